"""Where a run's numbers go: metrics.jsonl (one JSON object per step), rollouts.jsonl (what was
sampled and how it scored, per step) and TensorBoard."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


class JsonlLog:
    """Appends one JSON object per line, each with a "step" key.

    On resume, lines for steps after the checkpoint are dropped first, so a resumed run's log
    reads exactly like an uninterrupted one.
    """

    def __init__(self, path: Path, resume_step: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is None or not self.path.exists():
            self.path.write_text("")
        else:
            self._truncate_after(resume_step)

    def _truncate_after(self, step: int) -> None:
        kept = []
        for line in self.path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                break  # a line cut by a crash: nothing after it can be trusted
            if record.get("step", math.inf) <= step:
                kept.append(line)
        self.path.write_text("".join(line + "\n" for line in kept))

    def write(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")

    def close(self) -> None:
        """Nothing stays open between writes; subclasses with writers close them."""


class MetricsLog(JsonlLog):
    """RUN/metrics.jsonl, optionally mirrored to TensorBoard under RUN/tensorboard."""

    def __init__(self, run_dir: Path, tensorboard: bool = False, resume_step: int | None = None):
        super().__init__(Path(run_dir) / "metrics.jsonl", resume_step)
        self._writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as err:
                raise RuntimeError(
                    "train.tensorboard=true needs the tensorboard package: "
                    "pip install 'groupwise[tensorboard]'"
                ) from err
            self._writer = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))

    def write(self, record: dict[str, Any]) -> None:
        super().write(record)
        if self._writer is not None:
            step = int(record["step"])
            for key, value in record.items():
                if key != "step" and isinstance(value, int | float) and math.isfinite(value):
                    self._writer.add_scalar(key, value, step)
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
