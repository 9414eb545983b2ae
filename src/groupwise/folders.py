"""The folders groupwise writes: the user's cache folder (`cache_dir`) and a folder written
whole or not at all (`write_folder`)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["cache_dir", "write_folder"]


def cache_dir() -> Path:
    """The user's cache folder: env GROUPWISE_CACHE, else $XDG_CACHE_HOME/groupwise, else
    ~/.cache/groupwise. Not created here."""
    explicit = os.environ.get("GROUPWISE_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "groupwise"


def write_folder(target: Path, write: Callable[[Path], None], *, replace: bool = False) -> Path:
    """Fill folder `target` with `write(folder)`, atomically.

    `write` fills a temporary sibling folder that is renamed onto `target` only once complete,
    so a crash mid-way leaves no folder that later loads would take for a finished one. An
    existing `target` is kept as it is (another process finished first, or a cache hit) unless
    `replace`, in which case it is swapped out after the new folder is complete.
    """
    if target.is_dir() and not replace:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    scratch.chmod(0o755)  # mkdtemp's private 0700 would outlive the rename
    try:
        write(scratch)
        if replace and target.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            target.rename(retired / target.name)
            shutil.rmtree(retired, ignore_errors=True)
        try:
            scratch.rename(target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target
