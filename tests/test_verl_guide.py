"""docs/guides/verl.md's "On a CPU" recipe, as written: its code block (the data step, then
`python -m verl.trainer.main_ppo` on the shipped `arith-base` with verl_cpu) is read from the
guide and run by bash from the repository's root, its `out=` line pointed at a temporary folder;
a guide and code that diverge fail here. And the failure it once met: a tokenizer without a chat
template (the shipped `arith-base`'s) is refused in one line naming the model and verl's
`actor_rollout_ref.model.custom_chat_template`, when verl's trainer loads it, before any worker.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from verl.trainer.ppo.v1.trainer_base import PPOTrainer
from verl_support import verl_config

from groupwise.integrations.verl.data import MESSAGE_TEXT_TEMPLATE
from groupwise.integrations.verl.trainer import check_chat_template, check_config

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guides" / "verl.md"
ENTRY = "verl.trainer.main_ppo"
OUT = re.compile(r"^out=\S+$", re.MULTILINE)
TEMPLATE_KEY = "actor_rollout_ref.model.custom_chat_template"


def recipe() -> str:
    """The code block of the guide's "On a CPU" section that runs main_ppo, unindented."""
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index("## On a CPU\n")
    section = text[start : text.find("\n## ", start + 1)]
    blocks, block = [], []
    for line in [*section.splitlines(), ""]:
        if line.startswith("    "):
            block.append(line[4:])
        elif block and line.strip():
            blocks.append("\n".join(block))
            block = []
    found = [code for code in blocks if ENTRY in code]
    assert len(found) == 1, f"the guide's 'On a CPU' has {len(found)} main_ppo blocks"
    return found[0] + "\n"


def main_ppo_overrides(code: str) -> list[str]:
    """The Hydra overrides of the block's main_ppo command, as bash would pass them (with $out
    left as written)."""
    words = shlex.split(code.replace("\\\n", " "))
    return [word for word in words[words.index(ENTRY) + 1 :] if "=" in word]


def test_the_recipe_is_a_groupwise_run_of_verl_own_keys() -> None:
    keys = main_ppo_overrides(recipe())
    config = verl_config(*keys)  # Hydra refuses a key verl's config does not have
    assert check_config(config) == "grpo"
    assert config.actor_rollout_ref.rollout.name == "hf_cpu"
    assert config.actor_rollout_ref.model.path == "src/groupwise/weights/arith-base"
    # the template the guide passes is the one the plugin's refusal names
    assert config.actor_rollout_ref.model.custom_chat_template == MESSAGE_TEXT_TEMPLATE
    assert config.trainer.total_training_steps == 1
    assert OUT.search(recipe()), "the recipe names its folder in one `out=` line"


def test_a_tokenizer_without_chat_template_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shipped arith-base has none; verl's own _init_tokenizer (wrapped by the plugin's
    trainer module) loads it and refuses it, for a groupwise estimator; with the guide's
    custom_chat_template it renders the bare question."""
    keys = [
        "algorithm.adv_estimator=groupwise_grpo",
        "actor_rollout_ref.model.path=src/groupwise/weights/arith-base",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    ]
    trainer = SimpleNamespace(config=verl_config(*keys))
    monkeypatch.chdir(ROOT)
    with pytest.raises(ValueError) as refused:
        PPOTrainer._init_tokenizer(trainer)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(
        "actor_rollout_ref.model.path=src/groupwise/weights/arith-base: its tokenizer has no "
        "chat template"
    )
    assert f"{TEMPLATE_KEY}=" in message and MESSAGE_TEXT_TEMPLATE in message
    # verl's own estimators are not groupwise's to refuse
    verl_own = SimpleNamespace(config=verl_config(*keys[1:], "algorithm.adv_estimator=grpo"))
    PPOTrainer._init_tokenizer(verl_own)
    assert not verl_own.tokenizer.chat_template

    given = SimpleNamespace(config=verl_config(*keys, f"{TEMPLATE_KEY}='{MESSAGE_TEXT_TEMPLATE}'"))
    PPOTrainer._init_tokenizer(given)
    messages = [{"role": "user", "content": "Start with 1, add 8. What is the result?"}]
    assert given.tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    ) == ("Start with 1, add 8. What is the result?")
    check_chat_template(given.config.actor_rollout_ref.model, given.tokenizer)


@pytest.mark.slow
def test_the_recipe_trains_a_step_as_written(tmp_path: Path) -> None:
    code, found = OUT.subn(f"out={shlex.quote(str(tmp_path))}", recipe())
    assert found == 1
    env = {
        **os.environ,
        # `python` is this environment's (.venv-verl)
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        # Ray's memory monitor kills its workers when the whole machine passes 95 %, whoever
        # holds the memory: in CI the other test lanes do (tests/verl_cpu/run.py)
        "RAY_memory_monitor_refresh_ms": "0",
    }
    log = tmp_path / "recipe.log"
    start = time.monotonic()
    with log.open("w") as out:
        # its own session: the whole group (main_ppo and its Ray cluster) goes afterwards
        process = subprocess.Popen(
            ["bash", "-e", "-c", code],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=600)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    seconds = time.monotonic() - start
    output = log.read_text(errors="replace")
    assert returncode == 0, output[-6000:]
    assert (tmp_path / "arith.parquet").is_file()
    # verl's console logger: step 1's metrics, groupwise's among them
    step = next(line for line in output.splitlines() if "step:1 " in line)
    assert "groupwise/groups/mixed" in step and "actor/pg_loss" in step
    assert "step:2 " not in output
    print(f"the guide's recipe: {seconds:.0f} s")
