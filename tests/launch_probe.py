"""Imported by every process of a `groupwise train` run as a reward plugin
(reward.plugins=[launch_probe]), it records that process's RANK and WORLD_SIZE as the launcher
set them: a file RANK-of-WORLD_SIZE in the folder LAUNCH_PROBE_DIR names (tests/
test_distributed.py checks that a launch started the processes it says)."""

from __future__ import annotations

import os
from pathlib import Path

_folder = os.environ.get("LAUNCH_PROBE_DIR")
if _folder:
    name = f"{os.environ.get('RANK', '0')}-of-{os.environ.get('WORLD_SIZE', '1')}"
    (Path(_folder) / name).touch()
