"""Loading and saving a training config: a YAML file and `a.b=value` overrides become a checked
Config (train.config, checked by train.config_checks.check_config), and a Config becomes YAML.

Reading YAML, overrides and type checks are groupwise.config. Loading depends on nothing but
the file and the overrides: a config.yaml loads on any machine. Errors are one line naming the
key and where it came from (the file, or the override that set the key).
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from groupwise.config import ConfigError, apply_override, build, read_yaml
from groupwise.train.config import Config
from groupwise.train.config_checks import check_config


def config_from_dict(data: dict[str, Any]) -> Config:
    """A checked Config from a nested mapping (as read from YAML)."""
    config = build(Config, data)
    check_config(config)
    return config


def config_to_dict(config: Config) -> dict[str, Any]:
    return dataclasses.asdict(config)


def load_config(
    path: str | Path | None,
    overrides: Sequence[str] = (),
    then: Callable[[Config], Config] | None = None,
) -> Config:
    """Reads a YAML preset (or the defaults when path is None), applies `a.b=value` overrides
    and checks the result (check_config); `then` (train.preflight.preflight, for a run) runs
    on it, its errors blamed as loading's. Errors name the offending key and where it came
    from: the file, or the command line (the override that set the key, when one did)."""
    data = read_yaml(path, "sections (model:, data:, rollout:, ...)") if path is not None else {}
    from_file = copy.deepcopy(data)
    for override in overrides:
        apply_override(data, override)
    try:
        return _made(data, then)
    except ConfigError as err:
        raise ConfigError(f"{_blame(path, from_file, overrides, err, then)}{err}") from None


def _made(data: dict[str, Any], then: Callable[[Config], Config] | None) -> Config:
    config = config_from_dict(data)
    return config if then is None else then(config)


def _blame(
    path: str | Path | None,
    from_file: dict[str, Any],
    overrides: Sequence[str],
    err: ConfigError,
    then: Callable[[Config], Config] | None,
) -> str:
    """Where a config error comes from, as its message's prefix: "FILE: " when the file alone
    fails the same way, else the command line ("override 'K=V': " naming the override whose key
    the message names, when one does)."""
    if path is not None:
        try:
            _made(copy.deepcopy(from_file), then)
        except ConfigError as alone:
            if str(alone) == str(err) or not overrides:
                return f"{path}: "
    if not overrides:
        return ""
    for override in reversed(overrides):
        key = override.split("=", 1)[0].strip()
        if re.search(rf"(?<![\w.]){re.escape(key)}(?![\w])", str(err)):
            return f"command line, override {override!r}: "  # repr: it may hold a newline
    return "command line: "


def save_config(config: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(config_to_dict(config), sort_keys=False))
