"""Shared fixtures: the offline benchmark data lives in ../shared/data beside the repository."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

# Loaders read GROUPWISE_DATA when no data_dir is given; tests never touch the network.
os.environ.setdefault("GROUPWISE_DATA", str(SHARED_DATA))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# tests/test_verl_*.py import verl to collect; only .venv-verl has it, and scripts/test.sh runs
# them there (never skipped). A plain `pytest` elsewhere leaves the files out instead of failing.
collect_ignore_glob = [] if importlib.util.find_spec("verl") else ["test_verl_*.py"]

# Property tests draw the same examples on every run, so that a test run (CI's included) passes
# or fails on the code, not on the draw; HYPOTHESIS_PROFILE=explore draws new ones each run, to
# look for counterexamples (then pin each one found with @example). Test modules build their
# @settings after this, so they inherit it.
settings.register_profile("fixed", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"benchmark data not found at {SHARED_DATA} (expected ../shared/data)")
    return SHARED_DATA


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks by file: tests/test_trl_*.py need TRL (both environments have it; scripts/test.sh
    runs them in .venv), tests/test_vllm_*.py need vLLM (only .venv-vllm has it: scripts/test.sh
    runs them there with -m vllm, and deselects them in .venv with -m "not vllm"; never
    skipped). vLLM test modules import vllm inside their fixtures, so that collecting them needs
    no vLLM. tests/test_verl_*.py need verl (only .venv-verl has it: scripts/test.sh runs them
    there; collect_ignore_glob leaves their files out elsewhere, since they import verl)."""
    for item in items:
        name = item.path.name
        if name.startswith("test_trl_"):
            item.add_marker(pytest.mark.trl)
        elif name.startswith("test_vllm_"):
            item.add_marker(pytest.mark.vllm)
        elif name.startswith("test_verl_"):
            item.add_marker(pytest.mark.verl)
    # Tests marked big_memory (several GiB: a TRL run of SmolLM2) run last: in CI the vLLM
    # engines and verl's runs of the other lanes have ended by then (scripts/test.sh); beside
    # them the machine once reached 22.7 of its 23.6 GiB.
    items.sort(key=lambda item: item.get_closest_marker("big_memory") is not None)


@pytest.fixture(scope="session")
def vllm_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real vLLM OpenAI-compatible server of SmolLM2-135M-Instruct on 127.0.0.1 for the vLLM
    tests (tests/vllm_support.py): one per session, started on first use, stopped at the end."""
    from vllm_support import MODEL, vllm_server

    from groupwise.rollout.vllm_engine import vllm_model_source

    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    with vllm_server(vllm_model_source(MODEL), log) as url:
        yield url
