"""A local folder or the Hugging Face hub: what a model name means, and whether the hub can be
reached, asked once per process in a few seconds, so that a command run offline fails (or works
from the caches) at once instead of spending a minute on huggingface_hub's retries (five per
file, 1 + 2 + 4 + 8 + 8 s apart). Light: it imports neither torch nor transformers, so a
mistyped folder is refused before they load.

`names_a_path(name)`: whether `name` can only mean a local path (absolute, ~, ./ or ../, or
its first part is a local folder: runs/trial with runs/ here is not the hub's user "runs").

`hub_unreachable()` is None when the hub answers, else why not: HF_HUB_OFFLINE (or
TRANSFORMERS_OFFLINE) is set, or one request to the hub's endpoint failed within
PROBE_TIMEOUT seconds. When the probe fails, the process is switched to offline mode
(huggingface_hub's and datasets' HF_HUB_OFFLINE), so what is cached still loads, with no
network call. docs/guides/evaluate.md, "Offline".
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

__all__ = ["PROBE_TIMEOUT", "hub_unreachable", "names_a_path"]

PROBE_TIMEOUT = 3.0


def names_a_path(name: str) -> bool:
    """Whether model name `name` can only mean a local path (module docstring)."""
    if name.startswith(("/", "~", "./", "../")) or name in (".", ".."):
        return True
    first = name.split("/", 1)[0]
    return "/" in name and Path(first).is_dir()


@functools.cache
def hub_unreachable() -> str | None:
    """None when the hub can be reached, else the reason (one phrase), the process then being
    in offline mode. Asked once per process."""
    from huggingface_hub import constants

    if constants.is_offline_mode():
        return "HF_HUB_OFFLINE is set"
    from huggingface_hub.utils import get_session

    try:  # huggingface_hub's own client (its proxies and headers), one try, no retries
        get_session().head(constants.ENDPOINT, timeout=PROBE_TIMEOUT)
    except Exception as error:  # whatever one request raises (DNS, refused, timeout, TLS)
        _go_offline()
        reason = " ".join(str(error).split()) or type(error).__name__
        return f"{constants.ENDPOINT} cannot be reached: {reason}"
    return None


def _go_offline() -> None:
    """What HF_HUB_OFFLINE=1 at start would have done, for this process and its children."""
    from huggingface_hub import constants

    os.environ["HF_HUB_OFFLINE"] = "1"
    constants.HF_HUB_OFFLINE = True
    try:
        import datasets.config
    except ImportError:
        return
    datasets.config.HF_HUB_OFFLINE = True
