"""Tokens per second of `groupwise eval` on each engine: groupwise's transformers decode loop,
vLLM in process, and a vLLM OpenAI-compatible server on 127.0.0.1 (the openai engine), on the
same problems with the same settings. Run it in the vLLM environment (scripts/setup_vllm.sh):

    .venv-vllm/bin/python bench/eval_engines.py                 # 8 MATH-500 problems x 4 x 128
    .venv-vllm/bin/python bench/eval_engines.py --problems 4 --engines transformers,vllm
    .venv-vllm/bin/python bench/eval_engines.py --threads 1     # on cores shared with others

--threads sets torch's threads in this process: the transformers engine's (vLLM's engine runs
in its own process with its own threads). On two cores shared with other work, one thread
decodes several times faster than two (their synchronisation waits for descheduled threads).

Model: SmolLM2-135M-Instruct in float32; problems: the first --problems of MATH-500 with the LENS
protocol's prompt (boxed), temperature 1.0, top-p 1.0, Math-Verify grading, n = --n samples of
at most --max-new-tokens tokens. Each engine runs `groupwise.evaluation.evaluate` into a fresh
folder, once (vLLM's CPU engine and the server are warmed up by one tiny request first); timed:
- setup: loading the model / starting vLLM / starting the server and checking it;
- sampling: the engine's `sample` calls alone (completions, their tokens and log-probs; for
  the transformers engine its separate scoring pass for mean_logp included);
- eval: the whole `evaluate` call (sampling, answer checking, writing samples and results).
tokens/s = completion tokens (EOS included) / seconds. The server runs in its own process and
the bench waits for it, so its tokens/s is what a client sees; requests go 8 at a time.

Writes bench/results/eval_engines.md (command, machine, load average, date).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    add_threads_argument,
    load_average,
    markdown_table,
    parse_with_threads,
    write_results,
)

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
MODEL = "smollm2-135m-instruct"
ENGINES = ("transformers", "vllm", "openai")


class Timed:
    """A Sampler that adds up the seconds and completion tokens of its `sample` calls."""

    def __init__(self, sampler: Any) -> None:
        self.sampler, self.seconds, self.tokens = sampler, 0.0, 0

    def sample(self, prompts: Any, n: int, sampling: Any, prompt_seeds: Any) -> Any:
        start = time.perf_counter()
        out = self.sampler.sample(prompts, n, sampling, prompt_seeds)
        self.seconds += time.perf_counter() - start
        self.tokens += sum(out.tokens)
        return out


def run_engine(engine: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Set up `engine`, evaluate, and return its timings."""
    from contextlib import ExitStack

    from groupwise.data import BenchmarkSpec
    from groupwise.evaluation import EvalConfig, evaluate
    from groupwise.evaluation.engines import EngineOptions, open_sampler
    from groupwise.rollout import SamplingParams

    problems = BenchmarkSpec.parse("math500").load(None)[: args.problems]
    load = load_average()
    with ExitStack() as stack:
        start = time.perf_counter()
        model, extra = MODEL, {}
        if engine == "openai":
            from groupwise.rollout.vllm_engine import vllm_model_source
            from groupwise.rollout.vllm_server import local_vllm_server

            # the engines run one after another: the server's worker gets every core, as the
            # in-process engine's does (groupwise.rollout.vllm_cpu)
            source = vllm_model_source(MODEL)
            server = local_vllm_server(source, folder / "server.log", "smollm2")
            url = stack.enter_context(server)
            model, extra = "smollm2", {"api": "chat", "base_url": url}
        config = EvalConfig(
            model=model,
            engine=engine,
            benchmarks=("math500",),
            n=args.n,
            ks=(1,),
            temperature=1.0,
            top_p=1.0,
            max_new_tokens=args.max_new_tokens,
            prompt="boxed",
            checking="math_verify",
            batch_size=args.n * args.problems,
            **extra,
        )
        options = EngineOptions(concurrency=8, vllm_args={"max_model_len": 2048})
        sampler, prompt_fn = open_sampler(config, options)
        if engine != "transformers":  # the first requests of a vLLM engine pay for warm-up
            sampler.sample([prompt_fn(problems[0])], 1, SamplingParams(max_new_tokens=4), [0])
        setup = time.perf_counter() - start
        timed = Timed(sampler)
        start = time.perf_counter()
        results = evaluate(
            config,
            {"math500": problems},
            timed,
            folder / "eval",
            prompt_fn=prompt_fn,
            progress=False,
        )
        total = time.perf_counter() - start
    return {
        "engine": engine,
        "setup": setup,
        "sampling": timed.seconds,
        "eval": total,
        "tokens": timed.tokens,
        "pass@1": results["math500"]["pass@1"],
        "truncated": results["math500"]["truncated"],
        "load": load,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=8, help="MATH-500 problems (default 8)")
    parser.add_argument("--n", type=int, default=4, help="samples per problem (default 4)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument(
        "--engines", default=",".join(ENGINES), help="comma-separated, of " + ", ".join(ENGINES)
    )
    add_threads_argument(parser)
    args = parse_with_threads(parser, argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        parser.error(f"--engines: unknown {unknown}; valid: {', '.join(ENGINES)}")
    load_before = load_average()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for engine in engines:
            folder = Path(tmp) / engine
            folder.mkdir()
            r = run_engine(engine, args, folder)
            rows.append(
                [
                    r["engine"],
                    r["setup"],
                    r["tokens"],
                    r["sampling"],
                    r["tokens"] / r["sampling"],
                    r["eval"],
                    r["tokens"] / r["eval"],
                    r["truncated"],
                    100 * r["pass@1"],
                    r["load"],
                ]
            )
            print(markdown_table(HEADERS, rows[-1:]), flush=True)
    import torch
    import vllm

    from groupwise.rollout.vllm_cpu import available_cores, core_list

    notes = (
        f"SmolLM2-135M-Instruct (float32), the first {args.problems} MATH-500 problems x "
        f"{args.n} samples, temperature 1.0, top-p 1.0, at most {args.max_new_tokens} new "
        f"tokens, boxed prompt, Math-Verify grading; vllm {vllm.__version__} "
        f"(CPU: eager, chunked prefill off; both vLLM engines' workers bound to cores "
        f"{core_list(available_cores())} through VLLM_CPU_OMP_THREADS_BIND, "
        f"groupwise.rollout.vllm_cpu); torch threads here {torch.get_num_threads()} "
        "(the transformers engine). Engines run one after the other; the load average is the "
        "machine's before each (shared with other work)."
    )
    write_results(
        "eval_engines",
        "groupwise eval: tokens/s per engine on a CPU",
        [("Engines", markdown_table(HEADERS, rows))],
        load_before=load_before,
        notes=notes,
    )


HEADERS = [
    "engine",
    "setup s",
    "completion tokens",
    "sampling s",
    "sampling tokens/s",
    "eval s",
    "eval tokens/s",
    "truncated",
    "pass@1 (%)",
    "load average before",
]


if __name__ == "__main__":
    main()
