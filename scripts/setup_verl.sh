#!/usr/bin/env bash
# Makes .venv-verl: groupwise beside verl 0.9.1 with the extras its v1 trainer needs (verl-core:
# TransferQueue, Hydra, Ray), the transformers verl allows (>= 5.5.3, < 5.11) and the antlr4
# runtime Hydra pins (4.9.3), exactly as locks/verl.txt names them (scripts/env.sh), for the verl
# tests (pytest -m verl), the answer-checking tests and verl's own CPU unit tests
# (scripts/test.sh). Once per change of the lock or of the set-up scripts.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
venv=.venv-verl
make_env $venv locks/verl.txt
# verl's own CPU unit tests (scripts/test.sh runs them with groupwise's plugin loaded): from its
# source distribution, which has tests/ (its wheel has not).
pin=$(locked locks/verl.txt verl)
if [ "$(cat $venv/verl-src/.pin 2>/dev/null)" != "$pin" ]; then
    rm -rf $venv/verl-src && mkdir -p $venv/verl-src
    $venv/bin/python -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
        "$pin" -d $venv/verl-src
    tar -xzf $venv/verl-src/verl-*.tar.gz -C $venv/verl-src --strip-components=1 --wildcards '*/tests'
    printf "[pytest]\n" > $venv/verl-src/pytest.ini  # its own rootdir, not groupwise's pyproject.toml
    echo "$pin" > $venv/verl-src/.pin
fi
