"""train.report_to: metrics.jsonl mirrored, step by step, to the loggers users look at.

The names are those HF's Trainer and TRL accept in `report_to`: tensorboard, wandb, trackio,
mlflow. Each logger is one small class with the same two methods, `log(metrics, step)` and
`close()`; MetricsLog (groupwise.train.metrics_log) calls them for every line it writes, on
rank 0 only. Each logger is configured the way its own tool is (its environment variables);
where the run goes by default is in docs/guides/train.md, "Where the metrics go".
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from groupwise.config import ConfigError

# report_to name -> (the module it imports, the package pip installs)
PACKAGES: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "trackio": ("trackio", "trackio"),
    "mlflow": ("mlflow", "mlflow-skinny"),
}
PROJECT = "groupwise"  # the wandb/trackio project and mlflow experiment unless the env names one


def check_report_to(names: list[str]) -> None:
    """ConfigError (one line, naming the package and the pip command) for a logger of
    train.report_to whose package is not installed; called when a run starts (train.preflight),
    before any model loads. The names themselves are checked by the option's declaration."""
    for name in names:
        module, package = PACKAGES[name]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(
                f"train.report_to: {name} needs the {package} package, which is not installed: "
                f"pip install {package} (or pip install 'groupwise[report]')"
            )


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The numbers of a metrics.jsonl line that loggers take: every finite int or float other
    than "step" (booleans and texts are left out)."""
    return {
        key: float(value)
        for key, value in record.items()
        if key != "step"
        and isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
    }


class Reporter(Protocol):
    """One logger: `log` takes a step's scalars (name -> value), `close` ends its run."""

    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


class TensorBoardReporter:
    """Event files under RUN/tensorboard (torch's SummaryWriter), one scalar per key."""

    def __init__(self, run_dir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise ConfigError(
                "train.report_to: tensorboard needs the tensorboard package: "
                "pip install tensorboard (or pip install 'groupwise[report]')"
            ) from err
        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbReporter:
    """A Weights & Biases run named after the run folder, its files under RUN/wandb; project
    WANDB_PROJECT (default groupwise); WANDB_MODE=offline keeps it on this machine."""

    def __init__(self, run_dir: Path) -> None:
        import wandb

        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", PROJECT),
            name=Path(run_dir).resolve().name,
            dir=str(run_dir),
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


class TrackioReporter:
    """A trackio run named after the run folder, in trackio's local store (TRACKIO_DIR, default
    ~/.cache/huggingface/trackio); project TRACKIO_PROJECT (default groupwise)."""

    def __init__(self, run_dir: Path) -> None:
        import trackio

        self.run = trackio.init(
            project=os.environ.get("TRACKIO_PROJECT", PROJECT), name=Path(run_dir).resolve().name
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowReporter:
    """An MLflow run named after the run folder, in experiment MLFLOW_EXPERIMENT_NAME (default
    groupwise) of MLFLOW_TRACKING_URI (mlflow's own default when unset). MLflow refuses some
    characters in names: they become "_" as in HF's MLflowCallback (heldout_pass@4 ->
    heldout_pass_4)."""

    def __init__(self, run_dir: Path) -> None:
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient()
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", PROJECT)
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = (
            experiment.experiment_id if experiment else self.client.create_experiment(name)
        )
        run = self.client.create_run(experiment_id, run_name=Path(run_dir).resolve().name)
        self.run_id = run.info.run_id

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(
            self.run_id,
            metrics=[Metric(mlflow_name(k), v, now, step) for k, v in metrics.items()],
        )

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def mlflow_name(key: str) -> str:
    """The name MLflow accepts for a metrics.jsonl key (HF's MLflowCallback's rule)."""
    return re.sub(r"[^0-9A-Za-z_\-\.\ :/]", "_", key)


REPORTERS: dict[str, Callable[[Path], Reporter]] = {
    "tensorboard": TensorBoardReporter,
    "wandb": WandbReporter,
    "trackio": TrackioReporter,
    "mlflow": MlflowReporter,
}


def open_reporters(names: list[str], run_dir: Path) -> list[Reporter]:
    """One started logger per name of train.report_to, in order (duplicates once)."""
    return [REPORTERS[name](Path(run_dir)) for name in dict.fromkeys(names)]
