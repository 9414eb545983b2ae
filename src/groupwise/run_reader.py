"""A run folder read back: the one reading of what `groupwise train` and `groupwise eval` leave
in a folder, for `groupwise report` (its table and its page), the summary `groupwise train`
prints at its end, and the testbed.

- config.yaml: the run's config as read (`read_config`);
- metrics.jsonl: one JSON object per step (`read_metrics`); a torn last line of a run still in
  progress is skipped, a row without "step" gets its order, and a caller names the keys that
  must be finite numbers;
- heldout.jsonl: the held-out evaluations during training (groupwise.train.heldout), in step
  order (`read_heldout`);
- eval/*/results.json (or a results.json given directly) and the samples.jsonl beside each.

A line or file that cannot be read is a ValueError naming the file (and line). The file names
are defined here, and the trainer writes under them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from groupwise.records import RESULTS_FILE, SAMPLES_FILE, read_json, read_jsonl

METRICS_FILE = "metrics.jsonl"
HELDOUT_FILE = "heldout.jsonl"
CONFIG_FILE = "config.yaml"

# metrics.jsonl keys of the loss terms a run may not have, by the setting of its config.yaml
# (algorithm section) that leaves the term out: a run without it logs 0 for them.
TERMS: dict[str, tuple[str, Any]] = {
    "preference_loss": ("amir", False),
    "lambda": ("amir", False),
    "kl": ("kl_coef", 0.0),
}


@dataclass
class RunRecord:
    """What a run folder (or an evaluation folder) holds: its metric rows, held-out evaluations
    and evaluations."""

    name: str
    path: Path
    metrics: list[dict[str, Any]] = field(default_factory=list)
    evals: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> results.json
    samples: dict[str, Path] = field(default_factory=dict)  # label -> samples.jsonl beside it
    heldout: list[dict[str, Any]] = field(default_factory=list)  # heldout.jsonl, step order
    absent: frozenset[str] = frozenset()  # metrics.jsonl keys of terms the run has not
    finished: bool = False  # the run wrote final/: its last held-out evaluation is "after"


def is_number(value: Any) -> bool:
    """A finite int or float (not a bool): what a metric must be to be counted or drawn."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_config(run_dir: Path) -> Any:
    """RUN/config.yaml as read, None when there is none; unreadable YAML names the file."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        return None
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as err:
        raise ValueError(f"{path}: cannot be read ({' '.join(str(err).split())})") from None


def read_metrics(
    path: Path, numbers: Sequence[str] = (), optional: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """metrics.jsonl's rows in file order, each with "step" (a row without one gets its 1-based
    order). Each row must be a JSON object whose `numbers` are finite numbers, and so are its
    `optional` keys where it has them; an optional key that is null is left out of its row (not
    logged). Else a ValueError naming the file and line."""
    rows, _ = read_jsonl(path)
    out = []
    for order, (number, row) in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object per line")
        row = {k: v for k, v in row.items() if v is not None or k not in optional}
        for key in (*numbers, *(k for k in optional if k in row)):
            if not is_number(row.get(key)):
                raise ValueError(
                    f"{path}:{number}: {key} must be a finite number, got {row.get(key)!r}"
                )
        out.append({"step": order, **row})
    return out


def read_heldout(run_dir: str | Path) -> list[dict[str, Any]]:
    """RUN/heldout.jsonl's evaluations in step order ([] when the run has none); a line that is
    not an object with an integer step, n >= 1 and a non-empty list of correct counts (numbers
    in [0, n]) is an error naming the file and line."""
    path = Path(run_dir) / HELDOUT_FILE
    if not path.is_file():
        return []
    rows, _ = read_jsonl(path)
    for number, row in rows:
        if not _is_evaluation(row):
            raise ValueError(
                f"{path}:{number}: expected an object with an integer step, n >= 1 and a "
                "non-empty list of correct counts in [0, n]"
            )
    return sorted((row for _, row in rows), key=lambda row: row["step"])


def _is_evaluation(row: Any) -> bool:
    """Whether a heldout.jsonl line holds what every reader of it uses: step, n, correct."""
    if not isinstance(row, dict) or not {"step", "correct", "n"} <= set(row):
        return False
    step, n, correct = row["step"], row["n"], row["correct"]
    if not (_is_int(step) and _is_int(n) and n >= 1 and isinstance(correct, list) and correct):
        return False
    return all(
        isinstance(c, int | float) and not isinstance(c, bool) and 0 <= c <= n for c in correct
    )


def absent_terms(config: Any) -> frozenset[str]:
    """The TERMS keys that a training config (config.yaml as read) leaves out of the loss; none
    when it does not say (no algorithm section, or a run made elsewhere)."""
    algorithm = config.get("algorithm") if isinstance(config, dict) else None
    if not isinstance(algorithm, dict):
        return frozenset()
    return frozenset(
        key
        for key, (setting, off) in TERMS.items()
        if setting in algorithm and algorithm[setting] == off
    )


def find_results(path: Path) -> dict[str, Path]:
    """The results.json files belonging to `path`, labelled: a results.json file itself, an
    eval folder holding one, or a run folder with eval/*/results.json."""
    if path.is_file():
        return {path.parent.name: path}
    found = {}
    if (path / RESULTS_FILE).is_file():
        found[path.name] = path / RESULTS_FILE
    for results in sorted(path.glob(f"eval/*/{RESULTS_FILE}")):
        found[results.parent.name] = results
    return found


def load_record(name: str, path: Path) -> RunRecord:
    """Read what exists of run `name` at `path`; an error if there is nothing to show."""
    if not path.exists():
        raise FileNotFoundError(f"run {name!r}: {path} does not exist")
    record = RunRecord(name=name, path=path)
    if path.is_dir() and (path / METRICS_FILE).is_file():
        record.metrics = read_metrics(path / METRICS_FILE)
        record.absent = absent_terms(read_config(path))
        record.finished = (path / "final").is_dir()
    if path.is_dir():
        record.heldout = read_heldout(path)
    for label, results in find_results(path).items():
        data = read_json(results)
        if not isinstance(data, dict):
            raise ValueError(f"{results}: expected a JSON object of benchmarks")
        record.evals[label] = data
        if (results.parent / SAMPLES_FILE).is_file():
            record.samples[label] = results.parent / SAMPLES_FILE
    if not record.metrics and not record.evals and not record.heldout:
        raise FileNotFoundError(
            f"run {name!r}: no metrics.jsonl, results.json or eval/*/results.json under {path}"
        )
    return record
