"""`groupwise train`: user errors are one line and exit status 2 (the traceback behind
--debug or GROUPWISE_DEBUG=1), the run folder's policy holds on the command line, --overwrite
starts clean, a resume skips a damaged checkpoint, and a run stopped by a signal or by a
non-finite value exits non-zero saying what to do."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import groupwise.train.trainer as trainer_module
from groupwise.cli import main
from groupwise.config import ConfigError
from groupwise.errors import NonFiniteError
from groupwise.records import iter_jsonl
from groupwise.train.checkpoint import checkpoint_problem
from groupwise.train.config_file import load_config, save_config
from groupwise.train.preflight import load_run_config


def logged(path: Path) -> list[dict]:
    """The JSON objects of a run's JSON-lines log, in order."""
    return [row for _, row in iter_jsonl(path)]


TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"


def tiny_run(run: Path, *extra: str) -> list[str]:
    """Arguments of `groupwise train` for a run of a few seconds on tiny-random."""
    return [
        "train",
        "model.name=tiny-random",
        "data.prompt=boxed",
        "rollout.group_size=2",
        "rollout.max_new_tokens=4",
        "train.micro_batch_size=2",
        "train.max_steps=1",
        "train.progress=false",
        "reward.plugins=[reward_plugin]",
        "reward.weights={text_hash: 1.0}",
        f"train.output_dir={run}",
        *extra,
    ]


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("groupwise train: "), err
    assert "Traceback" not in err
    return err


# --- one-line user errors ---------------------------------------------------------------------


def test_a_config_error_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    assert main(tiny_run(tmp_path / "run", "rollout.temperature=0")) == 2
    assert "rollout.temperature must be > 0" in one_line_error(capsys)
    assert not (tmp_path / "run").exists()  # refused before the run folder, model or data


def test_debug_flag_or_env_shows_the_traceback(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(ConfigError, match="reward.timeout must be > 0"):
        main([*tiny_run(tmp_path, "reward.timeout=0"), "--debug"])
    monkeypatch.setenv("GROUPWISE_DEBUG", "1")
    with pytest.raises(ConfigError, match="reward.timeout must be > 0"):
        main(tiny_run(tmp_path, "reward.timeout=0"))


def test_yaml_errors_are_one_line(tmp_path: Path, capsys) -> None:
    # a value that does not parse as YAML (an unquoted brace), in an override and in a file
    assert main([*tiny_run(tmp_path / "run"), "reward.weights={text_hash:"]) == 2
    assert "cannot parse value: while parsing a flow node" in one_line_error(capsys)
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  max_steps: [1\n")
    assert main([*tiny_run(tmp_path / "run"), "--config", str(bad)]) == 2
    assert f"{bad}: not valid YAML" in one_line_error(capsys)


def test_a_non_utf8_data_line_is_one_line_naming_file_and_line(tmp_path: Path, capsys) -> None:
    data = tmp_path / "data"
    (data / "gsm8k").mkdir(parents=True)
    good = json.dumps({"question": "1+1?", "answer": "1+1=2\n#### 2"})
    bad = '{"question": "caf\xe9?", "answer": "#### 3"}'.encode("latin-1")
    (data / "gsm8k" / "train.jsonl").write_bytes(good.encode() + b"\n" + bad + b"\n")
    assert main(tiny_run(tmp_path / "run", f"data.data_dir={data}")) == 2
    err = one_line_error(capsys)
    assert f"{data / 'gsm8k' / 'train.jsonl'} line 2: not valid UTF-8 (byte 0xe9" in err


def test_a_missing_model_folder_is_one_line_naming_it(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "no" / "such" / "model"
    overrides = [a for a in tiny_run(tmp_path / "run") if not a.startswith("model.name")]
    assert main([*overrides, f"model.name={missing}"]) == 2
    assert f"unknown model '{missing}'" in one_line_error(capsys)


# --- the run folder on the command line (items 1-3) --------------------------------------------


def old_run(run: Path, *overrides: str) -> None:
    """What a previous run left: its config.yaml and logs of 3 steps."""
    run.mkdir(parents=True, exist_ok=True)
    save_config(load_config(None, tiny_run(run, *overrides)[1:]), run / "config.yaml")
    lines = "".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3))
    (run / "metrics.jsonl").write_text(lines)


def test_a_fresh_run_into_a_used_folder_is_refused(tmp_path: Path, capsys) -> None:
    old_run(tmp_path)
    assert main(tiny_run(tmp_path)) == 2
    err = one_line_error(capsys)
    assert str(tmp_path) in err and "--resume" in err and "--overwrite" in err
    assert [r["step"] for r in logged(tmp_path / "metrics.jsonl")] == [1, 2, 3]


def test_resume_with_a_changed_setting_is_refused_by_name(tmp_path: Path, capsys) -> None:
    old_run(tmp_path, "optim.lr=0.01")
    assert main([*tiny_run(tmp_path, "optim.lr=0.5"), "--resume"]) == 2
    assert "optim.lr: 0.01 -> 0.5" in one_line_error(capsys)
    assert load_config(tmp_path / "config.yaml").optim.lr == 0.01


HOLDER = """
import sys, time
from groupwise.train.config_file import load_config
from groupwise.train.run_folder import RunFolder

RunFolder.open(sys.argv[1], load_config(None, sys.argv[2:]), "fresh")
print("locked", flush=True)
time.sleep(300)
"""


def test_a_second_training_into_a_locked_folder_is_refused(tmp_path: Path, capsys) -> None:
    paths = [str(SRC), str(TESTS), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    args = [sys.executable, "-c", HOLDER, str(tmp_path), *tiny_run(tmp_path)[1:]]
    holder = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert main([*tiny_run(tmp_path), "--resume"]) == 2
        err = one_line_error(capsys)
        assert f"{tmp_path} is in use by another training (pid {holder.pid})" in err
    finally:
        holder.kill()
        holder.wait()


def test_resume_and_overwrite_exclude_each_other(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as caught:
        main([*tiny_run(tmp_path), "--resume", "--overwrite"])
    assert caught.value.code == 2


def test_only_rank_0_opens_the_run_folder(tmp_path: Path, monkeypatch) -> None:
    from groupwise.train import command

    args = command_args(tmp_path)
    monkeypatch.setenv("RANK", "1")
    assert command._open_run_folder(load_config(None, args.overrides), args) is None
    assert not tmp_path.joinpath("config.yaml").exists()


def command_args(run: Path, *flags: str):
    import argparse

    from groupwise.train import command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser.parse_args([*tiny_run(run)[1:], *flags])


# --- real runs: --overwrite, and resume past a damaged checkpoint -------------------------------


def test_overwrite_starts_the_run_clean(tmp_path: Path, capsys) -> None:
    old_run(tmp_path)
    stale = tmp_path / "checkpoints" / "step-3"
    stale.mkdir(parents=True)
    assert main([*tiny_run(tmp_path), "--overwrite"]) == 0
    assert [r["step"] for r in logged(tmp_path / "metrics.jsonl")] == [1]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-1"]


def test_resume_skips_a_damaged_checkpoint_and_continues(tmp_path: Path, capsys) -> None:
    assert main(tiny_run(tmp_path, "train.max_steps=2", "train.save_every=1")) == 0
    state = tmp_path / "checkpoints" / "step-2" / "trainer_state.pt"
    state.write_bytes(state.read_bytes()[:100])  # truncated
    capsys.readouterr()
    assert main([*tiny_run(tmp_path, "train.max_steps=3", "train.save_every=1"), "--resume"]) == 0
    err = capsys.readouterr().err
    assert "skipped checkpoint step-2 (trainer_state.pt has 100 bytes" in err
    assert f"resuming from {tmp_path / 'checkpoints' / 'step-1'} (step 1)" in err
    assert [r["step"] for r in logged(tmp_path / "metrics.jsonl")] == [1, 2, 3]
    assert (tmp_path / "checkpoints" / "step-2.damaged").is_dir()


def test_a_reward_plugin_returning_nan_is_named_in_one_line(tmp_path: Path, capsys) -> None:
    code = main(tiny_run(tmp_path / "run", "reward.weights={nan_for_tests: 1.0}"))
    assert code == 2
    err = one_line_error(capsys)
    assert "reward component 'nan_for_tests' (reward_plugin.nan_for_tests) returned nan" in err


# --- how a run that did not finish exits --------------------------------------------------------


class StoppedTrainer:
    """The Trainer's contract as command.py reads it: train() returns, stop_signal says why."""

    signal_number: int | None = None
    error: Exception | None = None

    def __init__(self, config, resume: bool = False, folder=None) -> None:
        self.run_dir = Path(config.train.output_dir)
        self.step = 3
        self.stop_signal: int | None = None

    def train(self) -> Path:
        if self.error is not None:
            raise self.error
        self.stop_signal = self.signal_number
        return self.run_dir


@pytest.mark.parametrize(("number", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_run_stopped_by_a_signal_exits_128_plus_it(
    tmp_path: Path, capsys, monkeypatch, number: int, code: int
) -> None:
    monkeypatch.setattr(StoppedTrainer, "signal_number", number)
    monkeypatch.setattr(trainer_module, "Trainer", StoppedTrainer)
    args = [*tiny_run(tmp_path), "--config", "configs/quickstart_gsm8k.yaml"]
    assert main(args) == code
    err = capsys.readouterr().err
    assert f"stopped by {signal.Signals(number).name} at step 3" in err
    assert "continue with: groupwise train --config configs/quickstart_gsm8k.yaml " in err
    assert err.rstrip().endswith(f"train.output_dir={tmp_path} --resume")


def test_a_non_finite_stop_is_one_line_and_exit_1(tmp_path: Path, capsys, monkeypatch) -> None:
    error = NonFiniteError("gradient norm (nan)", step=4, hint="lower optim.lr (now 1e+10)")
    monkeypatch.setattr(StoppedTrainer, "error", error)
    monkeypatch.setattr(trainer_module, "Trainer", StoppedTrainer)
    assert main(tiny_run(tmp_path)) == 1
    err = one_line_error(capsys)
    assert "step 4: non-finite gradient norm (nan); lower optim.lr (now 1e+10)" in err
    assert "No optimizer step was taken on it" in err


# --- the same, on a real Trainer ---------------------------------------------------------------


def test_a_diverged_policy_stops_before_any_step_on_it(tmp_path: Path, capsys) -> None:
    # lr 1e10 blows the LoRA weights up within a few steps; the sampler then sees NaN logits.
    run = tmp_path / "run"
    diverge = ["optim.lr=1e10", "optim.warmup_ratio=0", "optim.schedule=constant"]
    code = main(tiny_run(run, *diverge, "train.max_steps=12", "train.save_every=1"))
    assert code == 1
    err = one_line_error(capsys)
    assert re.search(r"step (\d+): non-finite logits \(NaN in \d+ of \d+ rows\)", err), err
    assert "lower optim.lr (now 1e+10)" in err
    failed = int(re.search(r"step (\d+):", err).group(1))
    # every finished step was logged and checkpointed, intact; nothing of the failed step was
    steps = [r["step"] for r in logged(run / "metrics.jsonl")]
    assert steps == list(range(1, failed))
    checkpoints = sorted((run / "checkpoints").iterdir())
    assert checkpoints[-1].name == f"step-{failed - 1}"
    assert all(checkpoint_problem(c) is None for c in checkpoints)
    assert not (run / "final").exists()


def test_a_non_finite_loss_is_caught_before_backward(tmp_path: Path, monkeypatch) -> None:
    from groupwise.train import learner

    real = learner.loss_terms

    def nan_loss(*args, **kwargs):
        terms = real(*args, **kwargs)
        return dataclasses.replace(terms, policy=terms.policy * float("nan"))

    monkeypatch.setattr(learner, "loss_terms", nan_loss)
    config = load_run_config(None, tiny_run(tmp_path / "run")[1:])
    trainer = trainer_module.Trainer(config)
    before = [p.detach().clone() for p in trainer.params]
    with pytest.raises(NonFiniteError, match=r"step 1: non-finite loss \(nan\)"):
        trainer.train_step()
    assert all(torch.equal(a, p) for a, p in zip(before, trainer.params, strict=True))
    assert all(p.grad is None for p in trainer.params)
    trainer.close()


@pytest.mark.slow
def test_sigterm_checkpoints_then_exits_143(tmp_path: Path) -> None:
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{SRC}"}
    args = [*tiny_run(run, "train.max_steps=500", "train.save_every=1000")]
    process = subprocess.Popen(
        [sys.executable, "-m", "groupwise", *args], env=env, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while not (run / "metrics.jsonl").is_file() or not (run / "metrics.jsonl").read_text():
        assert process.poll() is None and time.monotonic() < deadline, "the run ended early"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    step = len(logged(run / "metrics.jsonl"))
    assert f"stopped by SIGTERM at step {step}" in err and err.rstrip().endswith("--resume")
    assert checkpoint_problem(run / "checkpoints" / f"step-{step}") is None
    assert not (run / "final").exists()
