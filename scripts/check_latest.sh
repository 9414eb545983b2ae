#!/usr/bin/env bash
# Drift found on purpose: the newest versions that pyproject.toml's ranges and locks/*.in allow,
# in throwaway environments, with the test command run in them; writes what changed against the
# committed locks and what broke to bench/results/check_latest.md. Run it before refreshing the
# locks (bash scripts/lock.sh --upgrade): a range whose newest version breaks a test is narrowed,
# or the code is fixed, never left silent. Not run by CI (it takes as long as CI).
#
# Usage (from anywhere): bash scripts/check_latest.sh [pytest arguments for scripts/test.sh]
# Knobs (environment): RESULT (the report, default bench/results/check_latest.md; RESULT= writes
#   none), KEEP=1 (keep the throwaway checkout and its environments; its path is printed).
# The throwaway checkout is a copy of this working tree (committed or not, without its
# environments) beside a link to ../shared, as CI's clone is.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RESULT="${RESULT-bench/results/check_latest.md}"
work=$(mktemp -d)
# (a process of the tests may still be writing there for a moment after they end)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work" 2>/dev/null || { sleep 10; rm -rf "$work"; }' EXIT
start=$SECONDS

mkdir -p "$work/main"
git ls-files -z --cached --others --exclude-standard |
    tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$work/main"
# a repository, as CI's clone is: ruff and the tests skip what .gitignore names (the environments)
git -C "$work/main" init -q
ln -s "$ROOT/../shared" "$work/shared"
[ -x .venv/bin/uv ] && export UV="$ROOT/.venv/bin/uv"
(cd "$work/main" && bash scripts/lock.sh --upgrade) || exit 1

# What moved: one row per package whose pin differs between the committed and the newest lock.
changes=$(PYTHONPATH="$ROOT/scripts" python3 - "$ROOT/locks" "$work/main/locks" <<'EOF'
import sys
from pathlib import Path
from check_lock import read_lock
rows = []
for lock in sorted(Path(sys.argv[1]).glob("*.txt")):
    old, new = read_lock(lock), read_lock(Path(sys.argv[2]) / lock.name)
    for name in sorted(old.keys() | new.keys()):
        if old.get(name) != new.get(name):
            rows.append(f"| {lock.name} | {name} | {old.get(name, '-')} | {new.get(name, '-')} |")
print("\n".join(rows))
EOF
)
echo "${changes:-no package moved}"

log="$work/test.log"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
test_start=$SECONDS
(cd "$work/main" && bash scripts/test.sh "$@") > "$log" 2>&1
rc=$?
test_s=$((SECONDS - test_start))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
# pytest's closing line of each run, in the order scripts/test.sh prints them
outcomes=$(grep -E '^=* ?[0-9]+ (passed|failed|error)' "$log" | sed -E 's/^=+ //; s/ =+$//')
failures=$(grep -E '^(FAILED|ERROR) ' "$log")
echo "scripts/test.sh $*: exit $rc in ${test_s} s"
echo "$outcomes"
[ -z "$failures" ] || echo "$failures"
[ "${KEEP:-0}" = 1 ] && echo "kept: $work"

if [ -n "$RESULT" ]; then
    {
        echo "# The newest versions the ranges allow"
        echo
        echo "Made by \`bash scripts/check_latest.sh $*\` on $(date -u +%Y-%m-%d) ($(nproc) cores," \
            "load average $load_before before the tests, $load_after after), $((SECONDS - start)) s in all."
        echo "Throwaway environments from \`bash scripts/lock.sh --upgrade\` (the newest versions"
        echo "pyproject.toml's ranges and locks/*.in allow), then the test command in them."
        echo
        echo "## What moved against the committed locks"
        echo
        if [ -n "$changes" ]; then
            echo "| lock | package | committed | newest |"
            echo "| --- | --- | --- | --- |"
            echo "$changes"
        else
            echo "Nothing: every lock already holds the newest versions its ranges allow."
        fi
        echo
        echo "## The tests at the newest versions"
        echo
        echo "\`scripts/test.sh $*\`: exit $rc, ${test_s} s."
        echo
        echo "$outcomes" | sed 's/^/- /'
        if [ -n "$failures" ]; then
            echo
            echo "Failures:"
            echo
            echo "$failures" | sed 's/^/- /'
        fi
    } > "$RESULT"
    echo "wrote $RESULT"
fi
exit "$rc"
