"""Checks that an environment holds exactly the versions its lock names.

Run with the environment's own Python: `ENV/bin/python scripts/check_lock.py locks/NAME.txt`.
Prints one line per difference (a locked package missing or at another version, a package the
lock does not name) and exits 1 where there is any; the set-up scripts run it after installing,
and tests/test_locks.py runs it for each environment.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import distributions
from pathlib import Path

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
EDITABLE = re.compile(r"^-e\s+\.")
# What a virtual environment brings by itself, whether or not a lock names it.
SEED = {"pip"}


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(lock: Path) -> dict[str, str]:
    """{canonical name: version} of the lock's pins; the editable checkout is 'groupwise'."""
    pins = {}
    for number, line in enumerate(lock.read_text().splitlines(), start=1):
        if EDITABLE.match(line):
            pins["groupwise"] = "editable"
        elif match := PIN.match(line):
            pins[canonical(match.group(1))] = match.group(2)
        elif line.strip() and not line.lstrip().startswith("#"):
            sys.exit(f"{lock}:{number}: neither a pin (name==version) nor a comment: {line!r}")
    return pins


def differences(lock: Path) -> list[str]:
    """What differs between the running environment and `lock`, one line each."""
    wanted = read_lock(lock)
    installed = {canonical(d.metadata["Name"]): d.version for d in distributions()}
    lines = []
    for name, version in sorted(wanted.items()):
        have = installed.get(name)
        if have is None:
            lines.append(f"{name}: locked at {version}, not installed")
        elif version != "editable" and have != version:
            lines.append(f"{name}: locked at {version}, installed {have}")
    lines += [
        f"{name}: installed {installed[name]}, not in the lock"
        for name in sorted(installed.keys() - wanted.keys() - SEED)
    ]
    return lines


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: ENV/bin/python scripts/check_lock.py locks/NAME.txt")
    lock = Path(sys.argv[1])
    found = differences(lock)
    for line in found:
        print(f"{sys.prefix} against {lock}: {line}")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
