"""Where a run's numbers go: metrics.jsonl (one JSON object per step), rollouts.jsonl (what was
sampled and how it scored, per step) and the loggers of train.report_to."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from groupwise.run_reader import METRICS_FILE
from groupwise.train.report_to import open_reporters, scalars

ROLLOUTS_FILE = "rollouts.jsonl"
SET_ASIDE_SUFFIX = ".set-aside"


def trim_jsonl(path: Path, step: int) -> list[str]:
    """Cuts the log `path` back to `step` (a resumed run's checkpoint) without losing a line.

    Keeps, in their order, the lines that are JSON objects with an integer "step" <= `step`;
    every other non-blank line (a later step, which the resumed run writes again, or a line
    that cannot be read: not UTF-8, not JSON, no step) is appended to `path`.set-aside before
    the log is rewritten (atomically). A log with nothing to remove is left untouched.

    Returns one note per unreadable line ("FILE:LINE: ...") and one for the later steps, for
    the user to see; [] when nothing was removed.
    """
    path = Path(path)
    data = path.read_bytes()
    kept, removed, later, unreadable = _sort_lines(data, step)
    if not removed and (not data or data.endswith(b"\n")):
        return []  # (a file not ending in a newline is rewritten: the next line would join it)
    aside = path.with_name(path.name + SET_ASIDE_SUFFIX)
    with aside.open("ab") as f:
        f.writelines(line + b"\n" for line in removed)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(b"".join(line + b"\n" for line in kept))
    os.replace(tmp, path)
    notes = [f"{path}:{number}: {reason}; set aside in {aside}" for number, reason in unreadable]
    if later:
        notes.append(
            f"{path}: {later} line(s) of steps after the checkpoint's step {step}, which the "
            f"resumed run writes again, moved to {aside}"
        )
    return notes


def _sort_lines(
    data: bytes, step: int
) -> tuple[list[bytes], list[bytes], int, list[tuple[int, str]]]:
    """trim_jsonl's reading of a log: (lines kept, lines removed in file order, how many of
    those are later steps, (line number, why) of each unreadable one)."""
    kept: list[bytes] = []
    removed: list[bytes] = []
    later = 0
    unreadable: list[tuple[int, str]] = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError as error:
            unreadable.append((number, f"not UTF-8 (byte {error.start + 1})"))
        except json.JSONDecodeError as error:
            unreadable.append((number, f"not JSON ({error.msg}, column {error.colno})"))
        else:
            recorded = record.get("step") if isinstance(record, dict) else None
            if isinstance(recorded, bool) or not isinstance(recorded, int):
                unreadable.append((number, "not an object with an integer step"))
            elif recorded <= step:
                kept.append(line)
                continue
            else:
                later += 1
        removed.append(line)
    return kept, removed, later, unreadable


class JsonlLog:
    """Appends one JSON object per line, each with a "step" key.

    On resume, the log is cut back to the checkpoint's step first (`trim_jsonl`: nothing is
    deleted, what is removed goes to a .set-aside file), so a resumed run's log reads exactly
    like an uninterrupted one. `notes` says what was set aside.
    """

    def __init__(self, path: Path, resume_step: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.notes: list[str] = []
        if resume_step is None or not self.path.exists():
            self.path.write_text("")
        else:
            self.notes = trim_jsonl(self.path, resume_step)

    def write(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")

    def close(self) -> None:
        """Nothing stays open between writes; subclasses with writers close them."""


class MetricsLog(JsonlLog):
    """RUN/metrics.jsonl, each line's numbers mirrored at its step to the loggers of
    train.report_to (groupwise.train.report_to; train.tensorboard=true adds tensorboard)."""

    def __init__(
        self,
        run_dir: Path,
        tensorboard: bool = False,
        resume_step: int | None = None,
        report_to: list[str] | tuple[str, ...] = (),
    ):
        super().__init__(Path(run_dir) / METRICS_FILE, resume_step)
        names = [*report_to, *(["tensorboard"] if tensorboard else [])]
        self.reporters = open_reporters(names, Path(run_dir))

    def write(self, record: dict[str, Any]) -> None:
        super().write(record)
        if self.reporters:
            step, metrics = int(record["step"]), scalars(record)
            for reporter in self.reporters:
                reporter.log(metrics, step)

    def close(self) -> None:
        for reporter in self.reporters:
            reporter.close()
        self.reporters = []  # closed once, however often the trainer's paths call close
