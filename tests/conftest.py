"""Shared fixtures: the offline benchmark data lives in ../shared/data beside the repository."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

# Loaders read GROUPWISE_DATA when no data_dir is given; tests never touch the network.
os.environ.setdefault("GROUPWISE_DATA", str(SHARED_DATA))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"benchmark data not found at {SHARED_DATA} (expected ../shared/data)")
    return SHARED_DATA
