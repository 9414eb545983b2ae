"""The environments' locks (locks/, CONTRIBUTING.md "The environments"): each environment holds
exactly what its lock names, each lock lies inside pyproject.toml's ranges, and the check that
compares an environment with its lock finds a difference."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from scripts.check_lock import read_lock as pins

ROOT = Path(__file__).resolve().parents[1]
# environment folder -> its lock, as the set-up scripts make them
ENVIRONMENTS = {".venv": "venv", ".venv-vllm": "vllm", ".venv-verl": "verl"}
EXTRAS = re.compile(r"^-e\s+\.\[([^\]]*)\]")


def check_lock(python: Path, lock: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), str(ROOT / "scripts" / "check_lock.py"), str(lock)],
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("venv", ENVIRONMENTS)
def test_each_environment_holds_exactly_its_lock(venv: str) -> None:
    python = ROOT / venv / "bin" / "python"
    lock = ROOT / "locks" / f"{ENVIRONMENTS[venv]}.txt"
    assert python.is_file(), f"{venv} is missing: scripts/test.sh makes all three environments"
    done = check_lock(python, lock)
    assert done.returncode == 0, done.stdout + done.stderr
    installed = subprocess.run(
        [str(python), "-c", "import transformers; print(transformers.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert installed == pins(lock)["transformers"]


@pytest.mark.parametrize("name", sorted(ENVIRONMENTS.values()))
def test_each_lock_lies_inside_the_declared_ranges(name: str) -> None:
    """Every requirement of groupwise (with the extras the lock's input names) and of the input
    itself is pinned, at a version its range admits: a changed pyproject.toml needs
    `bash scripts/lock.sh`."""
    inputs = (ROOT / "locks" / f"{name}.in").read_text().splitlines()
    extras = next(m.group(1).split(",") for line in inputs if (m := EXTRAS.match(line)))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra.strip()]
    requirements += [line for line in inputs if line.strip() and not line.startswith(("#", "-e"))]
    locked = pins(ROOT / "locks" / f"{name}.txt")
    for text in requirements:
        requirement = Requirement(text)
        key = canonicalize_name(requirement.name)
        assert key in locked, f"locks/{name}.txt has no {requirement.name}: bash scripts/lock.sh"
        assert requirement.specifier.contains(locked[key], prereleases=True), (
            f"locks/{name}.txt: {requirement.name}=={locked[key]} outside {text!r}"
        )


def test_the_check_names_each_difference(tmp_path: Path) -> None:
    mine = ENVIRONMENTS.get(Path(sys.prefix).name)
    assert mine is not None, f"run in one of {', '.join(ENVIRONMENTS)}, not {sys.prefix}"
    text = (ROOT / "locks" / f"{mine}.txt").read_text()
    numpy = pins(ROOT / "locks" / f"{mine}.txt")["numpy"]
    changed = text.replace(f"numpy=={numpy}\n", "numpy==0.0.1\n").replace("\npyyaml==", "\n#")
    lock = tmp_path / "lock.txt"
    lock.write_text(changed + "not-installed==1.0\n")
    done = check_lock(Path(sys.executable), lock)
    assert done.returncode == 1
    lines = [line.split(": ", 1)[1] for line in done.stdout.splitlines()]
    assert sorted(lines) == [
        "not-installed: locked at 1.0, not installed",
        f"numpy: locked at 0.0.1, installed {numpy}",
        f"pyyaml: installed {pins(ROOT / 'locks' / f'{mine}.txt')['pyyaml']}, not in the lock",
    ]
    lock.write_text("numpy>=1\n")
    done = check_lock(Path(sys.executable), lock)
    assert done.returncode == 1 and f"{lock}:1: neither a pin" in done.stderr
