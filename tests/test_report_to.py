"""train.report_to: a tiny `groupwise train` run with every logger, offline
(wandb's offline mode, trackio's local store, mlflow's file store, TensorBoard event files),
and what each logger holds read back with the logger's own reader equals metrics.jsonl, step
by step, held-out metrics included; a logger whose package is missing is a one-line error
before the run folder or the model."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from groupwise.cli import main
from groupwise.config import ConfigError
from groupwise.records import iter_jsonl
from groupwise.train.config_file import load_config
from groupwise.train.metrics_log import MetricsLog
from groupwise.train.report_to import mlflow_name, scalars
from groupwise.train.trainer import Trainer

HELDOUT = "data.heldout={benchmark: arith, split: test, options: {level: easy, size: 2}}"


def tiny_run(run: Path, *extra: str) -> list[str]:
    """Arguments of `groupwise train` for a run of a few seconds on tiny-random, evaluated on
    2 held-out problems at every step (as tests/test_train_command.py's tiny_run)."""
    return [
        "train",
        "model.name=tiny-random",
        "data.prompt=amir",
        "rollout.group_size=2",
        "rollout.max_new_tokens=4",
        "train.micro_batch_size=2",
        "train.max_steps=2",
        "train.progress=false",
        "train.log_rollouts=false",
        "reward.plugins=[reward_plugin]",
        "reward.weights={text_hash: 1.0}",
        "reward.workers=1",
        HELDOUT,
        "train.eval_every=1",
        "train.eval_samples=2",
        f"train.output_dir={run}",
        *extra,
    ]


def wandb_history(run_file: Path) -> dict[int, dict[str, float]]:
    """step -> logged values of an offline wandb run's transaction log (RUN/wandb/offline-run-*/
    run-ID.wandb): wandb's record format, a LevelDB-style log of protobuf Records (a 7-byte file
    header ":W&B", then in 32 KiB blocks records of crc32 (4 bytes), length (2), kind (1: full,
    2-4: first, middle, last part)); wandb's own `_` keys left out."""
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()
    assert data[:4] == b":W&B"
    history: dict[int, dict[str, float]] = {}
    index, parts = 7, b""
    while index + 7 <= len(data):
        if 32768 - index % 32768 < 7:  # a block's tail too short for a header is padding
            index += 32768 - index % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[index : index + 7])
        chunk, index = data[index + 7 : index + 7 + length], index + 7 + length
        if kind in (2, 3):
            parts = chunk if kind == 2 else parts + chunk
            continue
        record = wandb_internal_pb2.Record()
        record.ParseFromString(parts + chunk if kind == 4 else chunk)
        if record.WhichOneof("record_type") == "history":
            values = history.setdefault(record.history.step.num, {})
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                if not key.startswith("_"):
                    values[key] = json.loads(item.value_json)
    return history


def tensorboard_history(folder: Path) -> dict[int, dict[str, float]]:
    """step -> scalars of TensorBoard event files, read with tensorboard's EventAccumulator."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    history: dict[int, dict[str, float]] = {}
    for tag in events.Tags()["scalars"]:
        for event in events.Scalars(tag):
            history.setdefault(event.step, {})[tag] = event.value
    return history


def test_every_logger_reads_back_what_metrics_jsonl_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_PROJECT", "report-to-test")
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    monkeypatch.setenv("TRACKIO_PROJECT", "report-to-test")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # mlflow 3's file store opt-in
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "report-to-test")
    run = tmp_path / "run"
    everything = "train.report_to=[tensorboard, wandb, trackio, mlflow]"
    assert main(tiny_run(run, everything)) == 0

    expected = {row["step"]: scalars(row) for _, row in iter_jsonl(run / "metrics.jsonl")}
    assert sorted(expected) == [1, 2]
    for step in expected.values():  # the held-out numbers are among what is mirrored
        assert {"policy_loss", "heldout_accuracy", "heldout_pass@2"} <= set(step)
        assert "heldout_confidence_coverage" in step

    assert tensorboard_history(run / "tensorboard") == {
        step: {key: float(np.float32(value)) for key, value in values.items()}  # float32 events
        for step, values in expected.items()
    }

    (run_file,) = (run / "wandb").glob("offline-run-*/run-*.wandb")
    assert wandb_history(run_file) == expected

    from trackio.sqlite_storage import SQLiteStorage

    logs = SQLiteStorage.get_logs("report-to-test", "run")
    assert {
        row["step"]: {k: v for k, v in row.items() if k not in ("step", "timestamp")}
        for row in logs
    } == expected

    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    experiment = client.get_experiment_by_name("report-to-test")
    (mlflow_run,) = client.search_runs([experiment.experiment_id])
    assert mlflow_run.info.run_name == "run" and mlflow_run.info.status == "FINISHED"
    read_back: dict[int, dict[str, float]] = {}
    for key in mlflow_run.data.metrics:
        for metric in client.get_metric_history(mlflow_run.info.run_id, key):
            read_back.setdefault(metric.step, {})[key] = metric.value
    assert read_back == {
        step: {mlflow_name(key): value for key, value in values.items()}
        for step, values in expected.items()
    }


def test_a_missing_logger_package_is_one_line_before_the_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if wandb were not installed
    assert main(tiny_run(tmp_path / "run", "train.report_to=[tensorboard, wandb]")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "train.report_to: wandb needs the wandb package" in err
    assert "pip install wandb" in err
    assert not (tmp_path / "run").exists()  # refused before the run folder, model or data


def test_report_to_names_are_those_of_hf_and_trl() -> None:
    assert load_config(None, []).train.report_to == []  # none by default
    both = load_config(None, ["train.report_to=[wandb, trackio]"]).train.report_to
    assert both == ["wandb", "trackio"]
    with pytest.raises(ConfigError, match="train.report_to must be a list of: tensorboard, wandb"):
        load_config(None, ["train.report_to=[comet_ml]"])


def test_scalars_and_mlflow_names() -> None:
    record = {"step": 3, "policy_loss": 0.5, "n": 2, "flag": True, "note": "x", "bad": float("nan")}
    assert scalars(record) == {"policy_loss": 0.5, "n": 2.0}
    # MLflow's allowed characters, as HF's MLflowCallback maps the others
    assert mlflow_name("heldout_pass@4") == "heldout_pass_4"
    assert mlflow_name("a/b:c d.e-f_g") == "a/b:c d.e-f_g"


@pytest.mark.parametrize("main_process", [True, False])
def test_only_rank_0_opens_the_loggers(tmp_path: Path, main_process: bool) -> None:
    config = load_config(None, ["train.report_to=[tensorboard]", "train.log_rollouts=false"])
    trainer = SimpleNamespace(  # no held-out evaluation: no generator, tokenizer or rewards
        config=config,
        dist=SimpleNamespace(is_main=main_process),
        run_dir=tmp_path,
        generator=None,
        tokenizer=None,
        rewards=None,
    )
    Trainer._logs(trainer, resume_step=None)  # the trainer's own choice of logs, per process
    assert isinstance(trainer.log, MetricsLog) == main_process
    assert (tmp_path / "tensorboard").is_dir() == main_process
    trainer.log.write({"step": 1, "policy_loss": 0.25})
    trainer.log.close()
    if main_process:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(tmp_path / "tensorboard"))
        events.Reload()
        assert [(e.step, e.value) for e in events.Scalars("policy_loss")] == [(1, 0.25)]
