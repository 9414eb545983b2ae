"""Loading a checkpoint never runs code from it: trainer_state.pt is read weights-only, a pickled
object outside that allow-list is refused with one line naming the file (exit 2, the run folder
as it was, the payload never run), the RNG states round-trip bit for bit through the file, and
checkpoints written before the RNG state was stored as tensors still load."""

from __future__ import annotations

import hashlib
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from test_train_command import TESTS, logged, one_line_error, tiny_run

from groupwise.cli import main
from groupwise.train.checkpoint import (
    TRAINER_STATE,
    CheckpointError,
    load_trainer_state,
    rng_state,
    set_rng_state,
    write_manifest,
)


class Payload:
    """What a checkpoint made to deceive carries: unpickling it runs a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def folder_hash(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under `folder` by relative path (the lock file aside: it holds the
    pid of whoever last opened the folder, not data)."""
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != ".lock"
    }


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 2-step run of tiny-random with a checkpoint at each step (copied per test)."""
    run = tmp_path_factory.mktemp("trained") / "run"
    assert main(tiny_run(run, "train.max_steps=2", "train.save_every=1")) == 0
    return run


def copy_run(trained: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(trained, tmp_path / "run"))


def replace_state(checkpoint: Path, write) -> Path:
    """Writes checkpoint/trainer_state.pt with `write(path)` and updates the manifest to match,
    as a crafted checkpoint would. Returns the file."""
    path = checkpoint / TRAINER_STATE
    write(path)
    write_manifest(checkpoint, int(checkpoint.name.split("-")[1]))
    return path


ATTACKS = {
    # torch.save's zip format, the payload inside the trainer state
    "torch.save": lambda payload: lambda p: torch.save({"step": 2, "x": payload}, p),
    # a bare pickle (protocol 2, which torch's legacy reader accepts)
    "bare pickle": lambda payload: lambda p: p.write_bytes(pickle.dumps(payload, protocol=2)),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_pickled_payload_is_refused_in_one_line_and_never_runs(
    trained: Path, tmp_path: Path, capsys, attack: str
) -> None:
    run = copy_run(trained, tmp_path)
    marker = tmp_path / "payload-ran"
    state = replace_state(run / "checkpoints" / "step-2", ATTACKS[attack](Payload(marker)))
    before = folder_hash(run)
    capsys.readouterr()

    code = main([*tiny_run(run, "train.max_steps=3", "train.save_every=1"), "--resume"])

    assert code == 2
    err = one_line_error(capsys)
    assert f"{state}: refused: it holds a pickled posix.system" in err
    assert not marker.exists()  # the payload did not run
    assert folder_hash(run) == before  # nothing set aside, trimmed or rewritten


def test_the_refusal_is_exit_2_from_the_real_command(trained: Path, tmp_path: Path) -> None:
    run = copy_run(trained, tmp_path)
    marker = tmp_path / "payload-ran"
    state = replace_state(run / "checkpoints" / "step-2", ATTACKS["torch.save"](Payload(marker)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-m", "groupwise", *tiny_run(run, "train.max_steps=3"), "--resume"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"{state}: refused" in done.stderr
    assert not marker.exists()


def test_load_trainer_state_refuses_before_building_the_object(tmp_path: Path) -> None:
    marker = tmp_path / "payload-ran"
    torch.save({"step": 1, "x": Payload(marker)}, tmp_path / TRAINER_STATE)
    with pytest.raises(CheckpointError, match=r"refused: it holds a pickled posix\.system"):
        load_trainer_state(tmp_path)
    assert not marker.exists()


def test_a_checkpoint_of_this_code_holds_only_torchs_default_allowed_types(
    trained: Path,
) -> None:
    path = trained / "checkpoints" / "step-2" / TRAINER_STATE
    assert torch.serialization.get_unsafe_globals_in_checkpoint(str(path)) == []
    state = load_trainer_state(path.parent)
    assert state["step"] == 2 and set(state) >= {"optimizer", "scheduler", "rng", "lambda_reg"}


def test_rng_states_round_trip_bit_for_bit_through_the_file(tmp_path: Path) -> None:
    random.seed(3)
    np.random.seed(4)
    torch.manual_seed(5)
    np.random.standard_normal()  # numpy now holds a cached gaussian: that travels too
    torch.save({"rng": rng_state()}, tmp_path / TRAINER_STATE)

    def draws() -> tuple:
        return (
            [random.random() for _ in range(3)],
            np.random.standard_normal(3).tolist(),
            np.random.randint(0, 2**31, 3).tolist(),
            torch.rand(3).tolist(),
        )

    expected = draws()
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    set_rng_state(load_trainer_state(tmp_path)["rng"])
    assert draws() == expected


def test_a_checkpoint_written_before_rng_states_were_tensors_still_loads(tmp_path: Path) -> None:
    # what the previous code wrote: numpy's state as its own tuple, with a numpy array
    np.random.seed(7)
    older = {"python": random.getstate(), "numpy": np.random.get_state()}
    older["torch"] = torch.get_rng_state()
    torch.save({"step": 4, "rng": older, "data_position": 64}, tmp_path / TRAINER_STATE)
    expected = np.random.random(4).tolist()
    np.random.seed(0)
    state = load_trainer_state(tmp_path)
    set_rng_state(state["rng"])
    assert np.random.random(4).tolist() == expected
    assert (state["step"], state["data_position"]) == (4, 64)


def test_a_new_plain_field_needs_no_change_of_format(tmp_path: Path) -> None:
    torch.save(
        {"step": 1, "questions_drawn": 17, "notes": ["a", 1.5, None]}, tmp_path / TRAINER_STATE
    )
    assert load_trainer_state(tmp_path) == {
        "step": 1,
        "questions_drawn": 17,
        "notes": ["a", 1.5, None],
    }


def test_a_crafted_truncated_or_foreign_state_is_one_line_and_exit_2(
    trained: Path, tmp_path: Path, capsys
) -> None:
    run = copy_run(trained, tmp_path)
    checkpoint = run / "checkpoints" / "step-2"
    whole = (checkpoint / TRAINER_STATE).read_bytes()
    cases = {
        "truncated": (lambda p: p.write_bytes(whole[: len(whole) // 2]), "cannot be read"),
        "not a dict": (lambda p: torch.save([1, 2], p), "holds a list, not a trainer state"),
        "keys missing": (lambda p: torch.save({"step": 2}, p), "does not fit this run (KeyError"),
    }
    for name, (write, message) in cases.items():
        state = replace_state(checkpoint, write)
        before = folder_hash(run)
        capsys.readouterr()
        code = main([*tiny_run(run, "train.max_steps=3"), "--resume"])
        assert code == 2, name
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.endswith("\n"), (name, err)
        # a state read whole but not fitting is found once the folder was opened (its note first)
        assert err.splitlines()[-1] == f"groupwise train: {state}: {message}" or (
            err.splitlines()[-1].startswith(f"groupwise train: {state}: {message}")
        ), (name, err)
        assert len(err.splitlines()) == (2 if name == "keys missing" else 1), (name, err)
        after = folder_hash(run)
        if (
            name == "keys missing"
        ):  # opened: config.yaml saved train.max_steps=3, a resumable change
            assert "max_steps: 3" in (run / "config.yaml").read_text()
            after["config.yaml"] = before["config.yaml"]
        assert after == before, name
    # the folder still resumes once the state is whole again
    replace_state(checkpoint, lambda p: p.write_bytes(whole))
    assert main([*tiny_run(run, "train.max_steps=3"), "--resume"]) == 0
    assert [r["step"] for r in logged(run / "metrics.jsonl")] == [1, 2, 3]
