#!/usr/bin/env bash
# The main job on the embedded default: set up .venv if needed, then the quickstart run
# (AMIR-GRPO, SmolLM2-135M-Instruct + LoRA, GSM8K). Extra arguments are config overrides.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -z "${GROUPWISE_DATA:-}" ] && [ -d ../shared/data ]; then
  export GROUPWISE_DATA="$PWD/../shared/data"
fi
exec .venv/bin/groupwise train --config configs/quickstart.yaml "$@"
