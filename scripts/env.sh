# Sourced by the set-up scripts: make_env VENV LOCK makes the virtual environment VENV hold
# exactly what the committed lock LOCK names (locks/*.txt, written by scripts/lock.sh), with uv.
# Once per change of the lock or of the set-up scripts (a stamp file says which); cheap to rerun.
#
# The CPU torch wheel: the locks name torch==2.13.0+cpu, which lies on this kind of machine in
# the folder of PIP_FIND_LINKS (/opt/wheels); PyPI has only the CUDA build of 2.13.0.
# What is built from source (DeepSpeed, antlr4's runtime, groupwise itself, editable) is built
# against the environment's own torch and setuptools, without build isolation, which would fetch
# another torch: so torch, setuptools and wheel are installed first, then the rest.

make_env() {
    local venv=$1 lock=$2 stamp want links uv_pin first find_links=()
    stamp=$venv/.setup-stamp
    want=$(cat "$lock" scripts/env.sh "$0" | sha256sum | cut -c1-16)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
    links=${UV_FIND_LINKS:-${PIP_FIND_LINKS:-/opt/wheels}}
    if [ -d "$links" ]; then find_links=(--find-links "$links"); fi
    uv_pin=$(locked "$lock" uv)
    first=$(locked "$lock" torch && locked "$lock" setuptools && locked "$lock" wheel)
    [ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"
    # uv installs a lock several times faster than pip (CONTRIBUTING.md, "The environments");
    # the lock names uv too, so the sync below keeps it.
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$uv_pin"
    # shellcheck disable=SC2086  # $first: one pin a line
    "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" "${find_links[@]}" $first
    # --compile-bytecode: every installed module's .pyc, written once here. Where
    # PYTHONDONTWRITEBYTECODE is set (these machines set it) no process caches what it compiles,
    # so without them each one compiles torch, transformers and verl again: importing verl took
    # 13.2 s without them and 6.1 s with (CONTRIBUTING.md, "The environments").
    "$venv/bin/uv" pip sync --quiet --python "$venv/bin/python" "${find_links[@]}" \
        --no-build-isolation --compile-bytecode "$lock"
    "$venv/bin/python" scripts/check_lock.py "$lock"
    echo "$want" > "$stamp"
}

# `name==version` of a package as the lock LOCK pins it: locked LOCK NAME; fails where it has none.
locked() {
    local line
    line=$(grep -E "^$2==" "$1") || { echo "$1: no pin of $2" >&2; return 1; }
    echo "${line%% *}"
}
