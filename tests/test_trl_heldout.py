"""PassAtKCallback: pass@k and calibration on held-out problems while TRL trains.

The held-out completions are scripted (`Scripted`): each held-out prompt gets the same four
completions at every evaluation, so pass@k, the group shares and the calibration figures are
computed by hand below. Training itself runs on the fixed batch of tests/trl_support.py.
A test samples for real (transformers) and checks that the callback leaves training as it
would have been without it. Run as a script (`python tests/test_trl_heldout.py OUT`, under
torchrun for several processes) it trains one step with the callback into OUT.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import trl_support as fx  # imports TRL: a CI dependency, so these tests never skip
from test_report_to import tensorboard_history
from transformers import TrainerCallback
from trl import GRPOTrainer

from groupwise.integrations.trl import GroupwiseGRPOTrainer, PassAtKCallback
from groupwise.integrations.trl.heldout import read_evaluations

N = 4
# prompt, gold, four completions; "c" marks the correct ones, a missing confidence is None
SCRIPT = {
    "Held-out 0: 2 + 3?": (
        "5",
        [
            r"\boxed{5} <confidence>0.9</confidence>",  # correct, 0.9
            r"\boxed{5} <confidence>0.6</confidence>",  # correct, 0.6
            r"\boxed{4} <confidence>0.8</confidence>",  # wrong, 0.8
            "I do not know.",  # wrong, no confidence
        ],
    ),
    "Held-out 1: 3 * 4?": (
        "12",
        [
            r"\boxed{11} <confidence>0.3</confidence>",
            r"\boxed{13} <confidence>0.2</confidence>",
            r"\boxed{10}",  # wrong, no confidence
            r"\boxed{9} <confidence>0.5</confidence>",
        ],
    ),
    "Held-out 2: 14 / 2?": (
        "7",
        [
            r"\boxed{7} <confidence>1.0</confidence>",
            r"\boxed{7} <confidence>0.9</confidence>",
            r"\boxed{7} <confidence>0.8</confidence>",
            r"\boxed{7} <confidence>0.7</confidence>",
        ],
    ),
}
ROWS = [{"prompt": prompt, "answer": gold} for prompt, (gold, _) in SCRIPT.items()]

# By hand. Correct counts 2, 0, 4 of 4. pass@1 = (2/4 + 0 + 1) / 3; pass@2 per problem is
# 1 - C(4-c, 2) / C(4, 2): 1 - 1/6, 0, 1; pass@4: 1, 0, 1.
EXPECTED = {
    "heldout/accuracy": 6 / 12,
    "heldout/pass@1": 0.5,
    "heldout/pass@2": (5 / 6 + 0 + 1) / 3,
    "heldout/pass@4": 2 / 3,
    "heldout/all_correct": 1 / 3,
    "heldout/all_wrong": 1 / 3,
    "heldout/mixed": 1 / 3,
    # 10 of 12 state a confidence: (p, correct) = (.9,1) (.6,1) (.8,0) (.3,0) (.2,0) (.5,0)
    # (1,1) (.9,1) (.8,1) (.7,1)
    "heldout/confidence_coverage": 10 / 12,
    # squared errors .01 .16 .64 .09 .04 .25 0 .01 .04 .09
    "heldout/brier": 1.33 / 10,
    # mean confidence 6.7 / 10 minus accuracy 6 / 10
    "heldout/overconfidence": 0.07,
    # 6 correct x 4 wrong pairs: the correct one ranked higher in 21 and tied (0.8, 0.8) in 1
    "heldout/auroc": 21.5 / 24,
}


class _Scripted:
    """Held-out prompts get SCRIPT's completions (the k-th copy of a prompt its k-th); the
    training prompts go on to the class's own generation."""

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, **kw):
        texts = self.processing_class.batch_decode(prompt_ids, skip_special_tokens=True)
        if texts[0].strip() not in SCRIPT:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, **kw
            )
        eos = self.processing_class.eos_token_id
        completions = [
            self.processing_class(SCRIPT[text.strip()][1][row % num_generations])["input_ids"]
            + [eos]
            for row, text in enumerate(texts)
        ]
        return completions, None


class ScriptedGroupwise(_Scripted, fx.FixedCompletions, GroupwiseGRPOTrainer):
    pass


class ScriptedTRL(_Scripted, fx.FixedCompletions, GRPOTrainer):
    pass


def _build(out: Path, cls: type, **options: Any) -> tuple[Any, PassAtKCallback]:
    args = fx.config(out, **options) if cls is ScriptedGroupwise else fx.trl_config(out, **options)
    trainer, _, _ = fx.trainer(out, cls=cls, args=args)
    callback = PassAtKCallback(trainer, ROWS, n=N, every=1, calibration=True)
    trainer.add_callback(callback)
    return trainer, callback


def _heldout_logs(trainer: Any) -> dict[int, dict[str, float]]:
    return {
        entry["step"]: entry for entry in trainer.state.log_history if "heldout/pass@1" in entry
    }


@pytest.mark.parametrize("cls", [ScriptedGroupwise, ScriptedTRL], ids=["groupwise", "trl"])
def test_logs_the_hand_computed_figures_at_step_0_every_step_and_the_last(
    tmp_path: Path, cls: type
) -> None:
    trainer, _ = _build(tmp_path, cls, max_steps=2, report_to=["tensorboard"])
    trainer.train()

    logged = _heldout_logs(trainer)
    assert sorted(logged) == [0, 1, 2]
    for step, entry in logged.items():
        for key, value in EXPECTED.items():
            assert entry[key] == pytest.approx(value, abs=1e-9), (step, key)
        for key in ("pass@1", "pass@2", "brier", "auroc"):
            low, high = entry[f"heldout/{key}_low"], entry[f"heldout/{key}_high"]
            assert low <= entry[f"heldout/{key}"] <= high
        assert "loss" not in entry  # TRL's training metrics stay in their own lines
    assert [e["step"] for e in trainer.state.log_history if "loss" in e] == [1, 2]
    # the same numbers reached TRL's loggers (report_to: tensorboard, read back; transformers'
    # loggers put "train/" before every name that does not start with "eval_")
    board = tensorboard_history(next((tmp_path / "runs").iterdir()))
    for step in (0, 1, 2):
        assert board[step]["train/heldout/pass@2"] == pytest.approx(EXPECTED["heldout/pass@2"])

    lines = read_evaluations(tmp_path)
    assert [line["step"] for line in lines] == [0, 1, 2]
    assert lines[1]["correct"] == [2, 0, 4]
    assert lines[1]["calibration"]["missing"] == 2
    assert lines[1]["sampling"]["engine"] == "transformers"
    assert lines[1]["sampling"]["temperature"] == fx.TEMPERATURE
    samples = [
        json.loads(line)
        for line in (tmp_path / "heldout" / "samples-step1.jsonl").read_text().splitlines()
    ]
    assert len(samples) == len(ROWS) * N
    assert [s["verdict"] for s in samples[:4]] == ["correct", "correct", "wrong", "no_answer"]
    assert [s["confidence"] for s in samples[:4]] == [0.9, 0.6, 0.8, None]


class CrashAt(TrainerCallback):
    """Stops the process (an exception) at the end of one step, after the evaluation."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise RuntimeError("killed")


def test_a_run_resumed_after_a_crash_loses_no_evaluation(tmp_path: Path) -> None:
    options = {"max_steps": 4, "save_strategy": "steps", "save_steps": 2}
    first, _ = _build(tmp_path, ScriptedGroupwise, **options)
    first.add_callback(CrashAt(3))
    with pytest.raises(RuntimeError, match="killed"):
        first.train()
    log = tmp_path / "heldout" / "heldout.jsonl"
    before = log.read_text().splitlines()
    assert [json.loads(line)["step"] for line in before] == [0, 1, 2, 3]

    resumed, _ = _build(tmp_path, ScriptedGroupwise, **options)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))

    after = log.read_text().splitlines()
    assert [json.loads(line)["step"] for line in after] == [0, 1, 2, 3, 4]
    assert after[:3] == before[:3]  # kept as written
    # step 3 was evaluated again after the resume; its first evaluation is set aside
    assert (tmp_path / "heldout" / "heldout.jsonl.set-aside").read_text().splitlines() == [
        before[3]
    ]
    assert (tmp_path / "heldout" / "samples-step3.jsonl.set-aside").is_file()
    assert (tmp_path / "heldout" / "samples-step4.jsonl").is_file()
    assert sorted(_heldout_logs(resumed)) == [0, 1, 2, 3, 4]  # 0-2 from the checkpoint's state


def _plain_trainer(out: Path, heldout: bool) -> tuple[Any, PassAtKCallback | None]:
    """TRL's GRPOTrainer sampling for real (transformers), a reward that prefers short
    completions, 2 steps; with or without the callback (every step)."""

    def short(completions, **_):
        return [-len(c) / 10.0 for c in completions]

    trainer, _, _ = fx.trainer(
        out,
        cls=GRPOTrainer,
        reward_funcs=[short],
        args=fx.trl_config(out, max_steps=2),
    )
    if not heldout:
        return trainer, None
    rows = [{"prompt": p, "answer": "5"} for p in ("What is 2 + 3?", "Add 1 and 4.")]
    callback = PassAtKCallback(trainer, rows, n=3, every=1)
    trainer.add_callback(callback)
    return trainer, callback


def test_sampling_for_real_leaves_training_as_it_was_and_repeats(tmp_path: Path) -> None:
    torch.manual_seed(0)
    plain, _ = _plain_trainer(tmp_path / "plain", heldout=False)
    plain.train()
    torch.manual_seed(0)
    watched, callback = _plain_trainer(tmp_path / "watched", heldout=True)
    watched.train()

    for a, b in zip(plain.model.parameters(), watched.model.parameters(), strict=True):
        assert torch.equal(a, b)  # the callback's sampling took nothing from training's RNG
    losses = [e["loss"] for e in plain.state.log_history if "loss" in e]
    assert losses == [e["loss"] for e in watched.state.log_history if "loss" in e]

    lines = read_evaluations(tmp_path / "watched")
    assert [line["step"] for line in lines] == [0, 1, 2]
    assert all(line["n"] == 3 and len(line["correct"]) == 2 for line in lines)
    samples = (tmp_path / "watched" / "heldout" / "samples-step0.jsonl").read_text().splitlines()
    assert len(samples) == 6
    assert all(json.loads(s)["tokens"] <= 8 for s in samples)  # max_completion_length
    # the same seed samples the same completions at the same step
    torch.manual_seed(0)
    again, _ = _plain_trainer(tmp_path / "again", heldout=True)
    again.train()
    assert (tmp_path / "again" / "heldout" / "samples-step2.jsonl").read_text() == (
        tmp_path / "watched" / "heldout" / "samples-step2.jsonl"
    ).read_text()
    assert callback is not None and callback.done == {0, 1, 2}


def test_two_processes_evaluate_what_one_does(tmp_path: Path) -> None:
    # 3 problems over 2 processes: process 1 holds one real problem and one repeat (dropped)
    tests = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": f"{tests}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env["OMP_NUM_THREADS"] = "1"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    for n, launch in ((1, [sys.executable]), (2, torchrun)):
        done = subprocess.run(
            [*launch, __file__, str(tmp_path / str(n))],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    one, two = (read_evaluations(tmp_path / str(n)) for n in (1, 2))
    assert [e["sampling"]["processes"] for e in (*one, *two)] == [1, 1, 2, 2]
    for a, b in zip(one, two, strict=True):
        assert a["correct"] == b["correct"] == [2, 0, 4]
        assert a["pass_at_k"] == b["pass_at_k"] and a["calibration"] == b["calibration"]
    for step in (0, 1):
        name = f"heldout/samples-step{step}.jsonl"
        assert (tmp_path / "1" / name).read_text() == (tmp_path / "2" / name).read_text()


def test_bad_held_out_rows_and_settings_are_named(tmp_path: Path) -> None:
    trainer, _, _ = fx.trainer(tmp_path, cls=ScriptedTRL, args=fx.trl_config(tmp_path))
    with pytest.raises(ValueError, match="held-out row 1 has no answer"):
        PassAtKCallback(trainer, [ROWS[0], {"prompt": "x"}])
    with pytest.raises(ValueError, match=r"every k must be in \[1, n=4\]"):
        PassAtKCallback(trainer, ROWS, n=4, ks=[8])
    with pytest.raises(ValueError, match="'id' values repeat"):
        PassAtKCallback(trainer, [{**ROWS[0], "id": "a"}, {**ROWS[1], "id": "a"}])
    with pytest.raises(ValueError, match="unknown"):
        PassAtKCallback(trainer, ROWS, checking="nope")


def main(out: Path) -> None:
    """One step of the fixed batch with the callback (every step), whatever the process count."""
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    rows_per_process = len(fx.COMPLETIONS) // processes // 2
    trainer, _ = _build(
        out, ScriptedGroupwise, max_steps=1, per_device_train_batch_size=rows_per_process
    )
    trainer.train()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
