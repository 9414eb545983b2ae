"""The verl commands of the README ("Use with verl") and of docs/guides/verl.md ("Launch
commands") set only keys verl 0.9.1's config has: each `python -m verl.trainer.main_ppo` command
is composed by Hydra from verl's own ppo_trainer config (which refuses a key it lacks unless the
command adds it with `+`), and its `+algorithm.groupwise.*` options pass the trainer mode's own
check (`check_config`), as main_ppo would run them."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from verl_cpu.run import COMMON_KEYS
from verl_support import verl_config

from groupwise.integrations.verl.trainer import check_config

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guides" / "verl.md"
ENTRY = "verl.trainer.main_ppo"
OVERRIDE = re.compile(r"^\+?[A-Za-z_][\w.]*=")


def section(path: Path, heading: str) -> str:
    """The text of `path` under the heading `heading` (## level), up to the next one."""
    text = path.read_text(encoding="utf-8")
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def commands(text: str) -> list[list[str]]:
    """The Hydra overrides of every main_ppo command in the indented code of `text`, with those
    of the shell variables it expands ($gw="..."): one list per command."""
    code = "\n".join(line for line in text.splitlines() if line.startswith("    "))
    words = shlex.split(code.replace("\\\n", " "), comments=False)
    variables: dict[str, list[str]] = {}
    found: list[list[str]] = []
    current: list[str] | None = None
    for word in words:
        name, _, value = word.partition("=")
        if name.isidentifier() and not word.startswith("+") and "." not in name:
            variables[name] = shlex.split(value)
            current = None
        elif word == ENTRY:
            current = []
            found.append(current)
        elif current is not None and word.startswith("$") and word[1:] in variables:
            current.extend(variables[word[1:]])
        elif current is not None and OVERRIDE.match(word):
            current.append(word)
        elif current is not None and word in ("python", "-m"):
            current = None
    return found


DOCUMENTED = [
    *[("README.md", keys) for keys in commands(section(ROOT / "README.md", "Use with verl"))],
    *[("guide", keys) for keys in commands(section(GUIDE, "Launch commands"))],
]


def test_the_documents_have_their_commands() -> None:
    assert [where for where, _ in DOCUMENTED] == ["README.md"] * 2 + ["guide"] * 2
    assert all(len(keys) > 15 for _, keys in DOCUMENTED)


@pytest.mark.parametrize(("where", "keys"), DOCUMENTED)
def test_every_key_of_a_documented_command_is_verl_own(where: str, keys: list[str]) -> None:
    config = verl_config(*keys)  # Hydra refuses a key verl's config does not have
    assert config.trainer.v1.trainer_mode == "groupwise", where
    check_config(config)


def test_the_cpu_run_sets_verl_own_keys_too() -> None:
    config = verl_config(*COMMON_KEYS, "algorithm.adv_estimator=groupwise_grpo")
    assert config.actor_rollout_ref.rollout.name == "hf_cpu"


def test_a_key_verl_lacks_is_refused() -> None:
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        verl_config("actor_rollout_ref.actor.no_such_key=1")
    assert commands('    a="x.y=1"\n    python -m verl.trainer.main_ppo $a +b.c=2 d') == [
        ["x.y=1", "+b.c=2"]
    ]
