"""verl 0.9.1 on a CPU, for tests only (docs/guides/verl.md, "On a CPU").

`plugin` is loaded in every verl process (the driver, the TaskRunner, every Ray worker) through
verl's own hook, `VERL_USE_EXTERNAL_MODULES=verl_cpu.plugin` with `tests/` on PYTHONPATH and
`VERL_PLATFORM=cpu`: `import verl` imports it before any entry point. `host` registers the CPU
platform, the FSDP engines for it and a gloo-only process group; `rollout` registers the
rollout `hf_cpu`, a token-in token-out server that samples from the actor's own weights with
transformers (`occurrences` counts each prompt's requests over its replicas); `record` saves
what each step's update consumed; `run` starts verl's `main_ppo` with them and reads back what
it logged and wrote. Importing the package itself changes nothing in verl.
"""
