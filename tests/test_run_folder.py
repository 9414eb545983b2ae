"""A run folder belongs to one run: a fresh start never reuses a used
folder, --overwrite really starts clean, a second training is locked out (and kill -9 leaves no
stale lock), --resume refuses changed settings by name, never deletes a valid log line, and
starts from the newest intact checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from groupwise.train.checkpoint import list_checkpoints, write_manifest
from groupwise.train.config import Config
from groupwise.train.config_file import load_config
from groupwise.train.metrics_log import JsonlLog, trim_jsonl
from groupwise.train.run_folder import (
    CONFIG_FILE,
    LOCK_FILE,
    RESUMABLE_CHANGES,
    RunFolder,
    RunFolderError,
)

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"


def config(run: Path, *overrides: str) -> Config:
    return load_config(None, ["model.name=tiny-random", f"train.output_dir={run}", *overrides])


def checkpoint(run: Path, step: int) -> Path:
    """A small checkpoint folder with its manifest, as save_checkpoint lays it out."""
    folder = run / "checkpoints" / f"step-{step}"
    (folder / "adapter").mkdir(parents=True)
    (folder / "adapter" / "adapter_model.safetensors").write_bytes(b"w" * (100 + step))
    torch.save({"step": step}, folder / "trainer_state.pt")
    write_manifest(folder, step)
    return folder


def log_lines(steps: list[int]) -> str:
    return "".join(json.dumps({"step": s, "loss": s / 10}) + "\n" for s in steps)


def previous_run(
    run: Path, *overrides: str, steps: int = 4, saved: tuple[int, ...] = (2, 3)
) -> None:
    """A run that logged `steps` steps and checkpointed at `saved`, then died."""
    RunFolder.open(run, config(run, *overrides), "fresh").close()
    (run / "metrics.jsonl").write_text(log_lines(list(range(1, steps + 1))))
    (run / "rollouts.jsonl").write_text(log_lines(list(range(1, steps + 1))))
    for step in saved:
        checkpoint(run, step)


def steps_in(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


# --- item 2: a fresh start never reuses a folder; --overwrite starts clean -----------------------


def test_a_fresh_start_into_a_used_folder_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    # The case: a new run into a folder holding checkpoints step-2 and step-3.
    previous_run(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(RunFolderError) as caught:
        RunFolder.open(tmp_path, config(tmp_path), "fresh")
    message = str(caught.value)
    assert str(tmp_path) in message and "checkpoints" in message
    assert "--resume" in message and "--overwrite" in message
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_a_fresh_start_takes_a_new_or_empty_folder_and_writes_config(tmp_path: Path) -> None:
    run = tmp_path / "new" / "run"
    with RunFolder.open(run, config(run, "optim.lr=0.01"), "fresh") as folder:
        assert folder.resume_point is None
        assert yaml.safe_load((run / CONFIG_FILE).read_text())["optim"]["lr"] == 0.01
    (run / CONFIG_FILE).unlink()
    assert [p.name for p in run.iterdir()] == [LOCK_FILE]  # an old lock file is not a run
    RunFolder.open(run, config(run), "fresh").close()


def test_overwrite_really_starts_clean(tmp_path: Path) -> None:
    previous_run(tmp_path)
    (tmp_path / "checkpoints" / ".tmp-step-4").mkdir()
    with RunFolder.open(tmp_path, config(tmp_path, "optim.lr=0.5"), "overwrite") as folder:
        assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_FILE, CONFIG_FILE]
        assert "deleted the previous run" in folder.notes[0]
    assert yaml.safe_load((tmp_path / CONFIG_FILE).read_text())["optim"]["lr"] == 0.5


def test_overwrite_refuses_a_folder_that_holds_no_run(tmp_path: Path) -> None:
    (tmp_path / "thesis.tex").write_text("years of work")
    with pytest.raises(RunFolderError, match="holds no run"):
        RunFolder.open(tmp_path, config(tmp_path), "overwrite")
    assert (tmp_path / "thesis.tex").read_text() == "years of work"


def test_an_empty_output_dir_is_refused() -> None:
    with pytest.raises(RunFolderError, match="train.output_dir is empty"):
        RunFolder.open("", Config(), "fresh")


# --- item 3: one training per folder ---------------------------------------------------------


HOLDER = """
import sys, time
from groupwise.train.config_file import load_config
from groupwise.train.run_folder import RunFolder
overrides = ["model.name=tiny-random", "train.output_dir=" + sys.argv[1]]
folder = RunFolder.open(sys.argv[1], load_config(None, overrides), "fresh")
print("locked", flush=True)
time.sleep(300)
"""


def hold_lock(run: Path) -> subprocess.Popen:
    """Another process that opened `run` and holds it (as a running training does)."""
    path = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run)], env=env, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_a_second_training_is_refused_and_kill_9_leaves_no_stale_lock(tmp_path: Path) -> None:
    holder = hold_lock(tmp_path)
    try:
        for mode in ("fresh", "resume", "overwrite"):
            with pytest.raises(RunFolderError) as caught:
                RunFolder.open(tmp_path, config(tmp_path), mode)
            assert str(tmp_path) in str(caught.value)
            assert f"in use by another training (pid {holder.pid})" in str(caught.value)
        assert (tmp_path / CONFIG_FILE).is_file()  # the holder's files are untouched
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    # The OS dropped the lock with the process: the run can be resumed at once.
    with RunFolder.open(tmp_path, config(tmp_path), "resume") as folder:
        assert (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())
        assert folder.resume_point is not None


def test_the_lock_is_held_until_close_even_within_one_process(tmp_path: Path) -> None:
    first = RunFolder.open(tmp_path, config(tmp_path), "fresh")
    with pytest.raises(RunFolderError, match=f"pid {os.getpid()}"):
        RunFolder.open(tmp_path, config(tmp_path), "resume")
    first.close()
    RunFolder.open(tmp_path, config(tmp_path), "resume").close()


# --- item 1: resume keeps the settings the run started with -------------------------------------


def test_resume_refuses_every_changed_setting_by_name(tmp_path: Path) -> None:
    started = ("optim.lr=0.01", "rollout.group_size=4")
    previous_run(tmp_path, *started)
    saved = (tmp_path / CONFIG_FILE).read_text()
    changed = config(tmp_path, "optim.lr=0.5", "rollout.group_size=8", "model.seed=1")
    with pytest.raises(RunFolderError) as caught:
        RunFolder.open(tmp_path, changed, "resume")
    message = str(caught.value)
    for change in ("optim.lr: 0.01 -> 0.5", "rollout.group_size: 4 -> 8", "model.seed: 0 -> 1"):
        assert change in message
    assert "train.max_steps" in message  # what may change is said
    assert (tmp_path / CONFIG_FILE).read_text() == saved  # nothing written
    assert steps_in(tmp_path / "metrics.jsonl") == [1, 2, 3, 4]  # nothing trimmed


def test_resume_says_when_rollout_engine_auto_resolves_otherwise_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # started in .venv-vllm, where auto resolved to vllm; resumed in .venv, where it resolves to
    # transformers (the config passed to RunFolder.open is preflight's: auto resolved)
    from groupwise.train import run_folder

    previous_run(tmp_path, "rollout.engine=vllm")
    monkeypatch.setattr(run_folder, "installed_engine", lambda: "transformers")
    monkeypatch.setattr(run_folder, "processes_from_environment", lambda: 1)
    with pytest.raises(RunFolderError) as caught:
        RunFolder.open(tmp_path, config(tmp_path, "rollout.engine=transformers"), "resume")
    assert (
        "these differ: rollout.engine: 'vllm' -> 'transformers' (where the config says "
        "rollout.engine: auto, as the GSM8K presets do, it resolves to transformers here: this "
        "environment has no vLLM; the run started with vllm: resume it as one process in an "
        "environment with vLLM installed, as the one it started in, e.g. .venv-vllm; the engine "
        "cannot change on resume). A resumed run may change only"
    ) in str(caught.value)
    monkeypatch.setattr(run_folder, "processes_from_environment", lambda: 2)
    with pytest.raises(RunFolderError, match="here: this run has 2 training processes; the run"):
        RunFolder.open(tmp_path, config(tmp_path, "rollout.engine=transformers"), "resume")


def test_resume_started_without_vllm_says_to_name_transformers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from groupwise.train import run_folder

    previous_run(tmp_path, "rollout.engine=transformers")
    monkeypatch.setattr(run_folder, "installed_engine", lambda: "vllm")
    with pytest.raises(RunFolderError) as caught:
        RunFolder.open(tmp_path, config(tmp_path, "rollout.engine=vllm"), "resume")
    assert (
        "rollout.engine: 'transformers' -> 'vllm' (where the config says rollout.engine: auto, "
        "as the GSM8K presets do, it resolves to vllm here, where vLLM is installed; the run "
        "started with transformers: resume it with rollout.engine=transformers given "
        "explicitly, or where it started)"
    ) in str(caught.value)
    # what the note advises resumes it
    with RunFolder.open(tmp_path, config(tmp_path, "rollout.engine=transformers"), "resume"):
        pass


def test_an_engine_changed_by_hand_gets_no_note_about_auto(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from groupwise.train import run_folder

    previous_run(tmp_path, "rollout.engine=transformers")
    monkeypatch.setattr(run_folder, "installed_engine", lambda: "transformers")
    with pytest.raises(RunFolderError) as caught:
        RunFolder.open(tmp_path, config(tmp_path, "rollout.engine=vllm"), "resume")
    assert "rollout.engine: 'transformers' -> 'vllm'. A resumed run may change" in str(caught.value)


def test_resume_accepts_the_documented_changes_and_saves_them(tmp_path: Path) -> None:
    previous_run(tmp_path, "train.max_steps=4", "optim.lr=0.01")
    allowed = [
        "train.max_steps=10",
        "train.save_every=5",
        "train.keep_checkpoints=3",
        "train.progress=false",
        "reward.workers=4",
        "rollout.batch_size=16",
        "model.device=cpu",
        "optim.lr=1e-2",  # the same value, spelled otherwise
    ]
    with RunFolder.open(tmp_path, config(tmp_path, *allowed), "resume") as folder:
        assert folder.resume_point.step == 3
    saved = yaml.safe_load((tmp_path / CONFIG_FILE).read_text())
    assert saved["train"]["max_steps"] == 10 and saved["reward"]["workers"] == 4
    assert {a.split("=")[0] for a in allowed} - {"optim.lr"} <= set(RESUMABLE_CHANGES)


def test_resume_refuses_max_steps_below_the_checkpoint(tmp_path: Path) -> None:
    previous_run(tmp_path)
    with pytest.raises(RunFolderError, match=r"train.max_steps=2 is below .*step-3"):
        RunFolder.open(tmp_path, config(tmp_path, "train.max_steps=2"), "resume")


def test_an_option_missing_from_the_saved_config_counts_as_its_default(tmp_path: Path) -> None:
    previous_run(tmp_path)
    saved = yaml.safe_load((tmp_path / CONFIG_FILE).read_text())
    del saved["algorithm"]["lambda_every"]  # as if written before the option existed
    (tmp_path / CONFIG_FILE).write_text(yaml.safe_dump(saved))
    with pytest.raises(RunFolderError, match=r"algorithm.lambda_every: 1 -> 3"):
        RunFolder.open(tmp_path, config(tmp_path, "algorithm.lambda_every=3"), "resume")
    RunFolder.open(tmp_path, config(tmp_path), "resume").close()


def test_resume_of_a_folder_without_a_saved_config_is_refused(tmp_path: Path) -> None:
    previous_run(tmp_path)
    (tmp_path / CONFIG_FILE).unlink()
    with pytest.raises(RunFolderError, match="has no config.yaml"):
        RunFolder.open(tmp_path, config(tmp_path), "resume")
    (tmp_path / CONFIG_FILE).write_text("- not\n- a config\n")
    with pytest.raises(RunFolderError, match="is not a saved groupwise config"):
        RunFolder.open(tmp_path, config(tmp_path), "resume")


def test_resume_into_a_new_folder_starts_the_run(tmp_path: Path) -> None:
    with RunFolder.open(tmp_path / "run", config(tmp_path / "run"), "resume") as folder:
        assert folder.resume_point.checkpoint is None and folder.resume_point.step == 0
    assert (tmp_path / "run" / CONFIG_FILE).is_file()


# --- item 4: resume trims the logs without deleting a valid line ----------------------------------


def damaged_log(path: Path) -> None:
    """Steps 1-5 with a damaged line between steps 2 and 3 and a torn line at the end."""
    path.write_bytes(
        log_lines([1, 2]).encode()
        + b'{"step": 3, "lo\xff\n'  # damaged in the middle (and not UTF-8)
        + log_lines([3, 4, 5]).encode()
        + b'{"step": 6, "loss'  # torn by a crash mid-write
    )


def test_a_damaged_middle_line_does_not_delete_the_valid_lines_after_it(tmp_path: Path) -> None:
    # The pre-existing API (what the trainer calls): resume at the step-4 checkpoint.
    path = tmp_path / "metrics.jsonl"
    damaged_log(path)
    log = JsonlLog(path, resume_step=4)
    assert steps_in(path) == [1, 2, 3, 4]
    log.write({"step": 5})
    assert steps_in(path) == [1, 2, 3, 4, 5]
    aside = tmp_path / "metrics.jsonl.set-aside"
    assert aside.read_bytes() == (
        b'{"step": 3, "lo\xff\n' + log_lines([5]).encode() + b'{"step": 6, "loss\n'
    )
    assert any(f"{path}:3: not UTF-8" in note for note in log.notes)
    assert any(f"{path}:7: not JSON" in note for note in log.notes)


def test_trim_names_every_unreadable_line_and_keeps_a_copy(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    path.write_text(log_lines([1]) + "[1, 2]\n" + '{"loss": 1}\n' + "\n" + log_lines([2, 3]))
    notes = trim_jsonl(path, 2)
    assert steps_in(path) == [1, 2]
    assert notes == [
        f"{path}:2: not an object with an integer step; set aside in {path}.set-aside",
        f"{path}:3: not an object with an integer step; set aside in {path}.set-aside",
        f"{path}: 1 line(s) of steps after the checkpoint's step 2, which the resumed run "
        f"writes again, moved to {path}.set-aside",
    ]
    assert (tmp_path / "rollouts.jsonl.set-aside").read_text() == (
        '[1, 2]\n{"loss": 1}\n' + log_lines([3])
    )
    assert trim_jsonl(path, 2) == []  # a second trim finds nothing to remove


def test_resume_trims_both_logs_back_to_the_checkpoint(tmp_path: Path) -> None:
    previous_run(tmp_path, steps=5, saved=(2, 4))
    damaged_log(tmp_path / "metrics.jsonl")
    with RunFolder.open(tmp_path, config(tmp_path), "resume") as folder:
        assert folder.resume_point.step == 4
        assert any("metrics.jsonl:3: not UTF-8" in note for note in folder.notes)
    assert steps_in(tmp_path / "metrics.jsonl") == [1, 2, 3, 4]
    assert steps_in(tmp_path / "rollouts.jsonl") == [1, 2, 3, 4]
    assert (tmp_path / "rollouts.jsonl.set-aside").read_text() == log_lines([5])


# --- item 5: resume from the newest intact checkpoint -----------------------------------------


def test_resume_skips_a_damaged_checkpoint_names_it_and_sets_it_aside(tmp_path: Path) -> None:
    previous_run(tmp_path, steps=4, saved=(2, 3, 4))
    weights = tmp_path / "checkpoints" / "step-4" / "adapter" / "adapter_model.safetensors"
    weights.write_bytes(b"w" * 10)  # truncated
    with RunFolder.open(tmp_path, config(tmp_path), "resume") as folder:
        assert folder.resume_point.step == 3
        assert folder.notes[0] == (
            "skipped checkpoint step-4 (adapter/adapter_model.safetensors has 10 bytes, the "
            f"manifest says 104); moved to {tmp_path / 'checkpoints' / 'step-4.damaged'}"
        )
        assert folder.notes[-1] == f"resuming from {tmp_path / 'checkpoints' / 'step-3'} (step 3)"
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-2", "step-3"]
    assert steps_in(tmp_path / "metrics.jsonl") == [1, 2, 3]


def test_resume_with_every_checkpoint_damaged_is_refused(tmp_path: Path) -> None:
    previous_run(tmp_path, saved=(2, 3))
    for step in (2, 3):
        (tmp_path / "checkpoints" / f"step-{step}" / "trainer_state.pt").unlink()
    with pytest.raises(RunFolderError) as caught:
        RunFolder.open(tmp_path, config(tmp_path), "resume")
    assert "step-3: trainer_state.pt is missing; step-2: trainer_state.pt is missing" in str(
        caught.value
    )
    assert steps_in(tmp_path / "metrics.jsonl") == [1, 2, 3, 4]  # nothing trimmed


def test_a_run_saved_before_the_std_option_resumes_with_the_population_std(tmp_path: Path) -> None:
    # Runs saved before algorithm.advantage_std existed divided by the population std: resuming
    # one must not switch it to today's default (unbiased) behind the user's back.
    previous_run(tmp_path)
    saved = yaml.safe_load((tmp_path / CONFIG_FILE).read_text())
    del saved["algorithm"]["advantage_std"]
    (tmp_path / CONFIG_FILE).write_text(yaml.safe_dump(saved))
    with pytest.raises(RunFolderError, match=r"advantage_std: 'population' -> 'unbiased'"):
        RunFolder.open(tmp_path, config(tmp_path), "resume")
    population = config(tmp_path, "algorithm.advantage_std=population")
    RunFolder.open(tmp_path, population, "resume").close()


# --- a start that never finished a step blocks nothing --------------------------------------


def test_a_start_that_never_ran_removes_what_it_wrote(tmp_path: Path) -> None:
    run = tmp_path / "new" / "run"
    RunFolder.open(run, config(run), "fresh").close(discard_unstarted=True)
    assert not run.exists() and (tmp_path / "new").is_dir()  # only what open() created goes
    run.mkdir()
    folder = RunFolder.open(run, config(run), "fresh")
    JsonlLog(run / "metrics.jsonl")  # opened, nothing logged
    (run / "heldout.jsonl").write_text(json.dumps({"step": 0, "accuracy": 0.5}) + "\n")
    folder.close(discard_unstarted=True)
    assert list(run.iterdir()) == []  # the user's folder stays, empty


def test_a_start_with_a_logged_step_keeps_everything(tmp_path: Path) -> None:
    for progress in ("metrics.jsonl", "heldout.jsonl", "notes.txt"):
        run = tmp_path / progress
        folder = RunFolder.open(run, config(run), "fresh")
        line = {"step": 1} if progress == "heldout.jsonl" else {"step": 1, "loss": 0.5}
        (run / progress).write_text(json.dumps(line) + "\n")
        folder.close(discard_unstarted=True)
        assert sorted(p.name for p in run.iterdir()) == sorted([CONFIG_FILE, LOCK_FILE, progress])
        with pytest.raises(RunFolderError, match="is not empty"):
            RunFolder.open(run, config(run), "fresh")


def test_a_folder_left_by_a_killed_start_is_taken_by_a_changed_run(tmp_path: Path) -> None:
    RunFolder.open(tmp_path, config(tmp_path, "model.name=/a/typo"), "fresh").close()
    (tmp_path / "metrics.jsonl").write_text("")
    with RunFolder.open(tmp_path, config(tmp_path, "optim.lr=0.5"), "resume") as folder:
        assert "held a start that never finished a step" in folder.notes[0]
        assert folder.resume_point.checkpoint is None
    assert yaml.safe_load((tmp_path / CONFIG_FILE).read_text())["optim"]["lr"] == 0.5
    assert not (tmp_path / "metrics.jsonl").exists()
