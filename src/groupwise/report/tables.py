"""The tables of `groupwise report`'s page, as rows of cells (text): the runs, pass@k of the
evaluations per k, the held-out evaluations of the training runs, the evaluations' settings and
their mismatches, and the paired calibration differences.

A cell is a number in percent (pass@k) or as a fraction with its 95 % interval over problems
(groupwise.evaluation.calibration.value_with_interval), '-' where an evaluation lacks it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from groupwise.evaluation.calibration import value_with_interval
from groupwise.metrics import doubling_ks, pass_at_k_table
from groupwise.records import read_samples
from groupwise.report.methods import method_label
from groupwise.run_reader import RunRecord, is_number, read_config

RUNS_HEADER = [
    "run",
    "method",
    "path",
    "steps logged",
    "last reward_mean",
    "last accuracy",
    "last lambda",
    "evaluations",
]


def runs_rows(records: Sequence[RunRecord]) -> list[list[str]]:
    """Rows of RUNS_HEADER: each run's name, the method its config.yaml trains
    (methods.method_label; '-' for an evaluation folder), folder, steps, last logged reward,
    accuracy and lambda, and the names of its evaluations (held-out ones as "held-out at steps
    0, 50, 100", "held-out at step 0")."""

    def last(rows: Sequence[Mapping[str, Any]], key: str) -> str:
        values = [row[key] for row in rows if is_number(row.get(key))]
        return f"{values[-1]:.4g}" if values else "-"

    def held_out(record: RunRecord) -> list[str]:
        steps = ", ".join(str(e["step"]) for e in record.heldout)
        word = "step" if len(record.heldout) == 1 else "steps"
        return [f"held-out at {word} {steps}"] if record.heldout else []

    return [
        [
            r.name,
            _method(r),
            str(r.path),
            str(len(r.metrics)),
            last(r.metrics, "reward_mean"),
            last(r.metrics, "accuracy"),
            last(r.metrics, "lambda"),
            ", ".join([*r.evals, *held_out(r)]) or "-",
        ]
        for r in records
    ]


def _method(record: RunRecord) -> str:
    """The method a training run's config.yaml trains; '-' without a training config."""
    config = read_config(record.path) if record.path.is_dir() and record.metrics else None
    return method_label(config) if isinstance(config, dict) else "-"


def benchmarks(results: Mapping[str, Any]) -> list[str]:
    """The benchmarks of a results.json: its objects other than "config"."""
    return [k for k, v in results.items() if k != "config" and isinstance(v, dict)]


def _ks(evals: Mapping[str, Mapping[str, Any]]) -> list[int]:
    ks = {
        int(key[len("pass@") :])
        for results in evals.values()
        for bench in benchmarks(results)
        for key in results[bench]
        if key.startswith("pass@") and key[len("pass@") :].isdigit()
    }
    return sorted(ks)


def _cell(entry: Mapping[str, Any] | None, k: int) -> str:
    """pass@k of one benchmark in percent with its interval; '-' where it is missing."""
    return value_with_interval(entry or {}, f"pass@{k}")


def eval_tables(
    evals: Mapping[str, Mapping[str, Any]],
) -> list[tuple[int, list[str], list[list[str]]]]:
    """One table per k: (k, header, rows), rows = benchmarks, columns = evaluations; cells are
    pass@k in percent with the 95 % interval, '-' where an evaluation lacks it."""
    labels = list(evals)
    benches = list(dict.fromkeys(b for r in evals.values() for b in benchmarks(r)))
    tables = []
    for k in _ks(evals):
        rows = [[b, *(_cell(evals[label].get(b), k) for label in labels)] for b in benches]
        tables.append((k, ["benchmark", *labels], rows))
    return tables


def heldout_table(evaluation: Mapping[str, Any]) -> dict[str, Any]:
    """The pass@k table of one heldout.jsonl line: as training wrote it ("pass_at_k"), else
    computed from its correct counts (docs/algorithms.md §4, k = 1, 2, 4, ... up to n)."""
    table = evaluation.get("pass_at_k")
    if isinstance(table, dict) and is_number(table.get("pass@1")):
        return dict(table)
    n = int(evaluation["n"])
    return pass_at_k_table([int(c) for c in evaluation["correct"]], n, doubling_ks(n))


def _when(record: RunRecord, index: int) -> str:
    """before (step 0), after (the last evaluation of a finished run) or during training."""
    step = record.heldout[index]["step"]
    if step == 0:
        return "before"
    return "after" if record.finished and index == len(record.heldout) - 1 else "during"


def heldout_rows(records: Sequence[RunRecord]) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the held-out evaluations of the runs: one row per evaluation, its step,
    when, problems, samples per problem and pass@k in percent with the 95 % interval for every
    k any of them has ('-' where one lacks it)."""
    tables = [(r, i, heldout_table(e)) for r in records for i, e in enumerate(r.heldout)]
    ks = sorted({int(key[5:]) for *_, t in tables for key in t if re.fullmatch(r"pass@\d+", key)})
    header = ["run", "step", "when", "problems", "samples", *(f"pass@{k}" for k in ks)]
    rows = [
        [
            record.name,
            str(record.heldout[index]["step"]),
            _when(record, index),
            str(len(record.heldout[index]["correct"])),
            str(record.heldout[index]["n"]),
            *(_cell(table, k) for k in ks),
        ]
        for record, index, table in tables
    ]
    return header, rows


def calibrated_benchmarks(results: Mapping[str, Any]) -> list[str]:
    """The benchmarks of a results.json that have a calibration table."""
    return [b for b in benchmarks(results) if "calibration" in results[b]]


PAIRED_HEADER = [
    "benchmark",
    "difference",
    "shared problems",
    "coverage (pts)",
    "Brier",
    "ECE equal-mass",
    "ECE equal-width",
    "AUROC",
    "conf - acc (pts)",
]


def paired_calibration_rows(
    evals: Mapping[str, Mapping[str, Any]],
    samples: Mapping[str, Path],
    bootstrap: int = 1000,
    seed: int = 0,
) -> list[list[str]]:
    """Rows of PAIRED_HEADER: for each evaluation with calibration after the first one (the
    baseline) and each benchmark both calibrated, the difference later - baseline of every
    calibration figure with its paired 95 % bootstrap interval over their shared problems
    (groupwise.calibration.paired_calibration_table, from both samples.jsonl files; an
    evaluation without its samples.jsonl is left out)."""
    from groupwise.calibration import paired_calibration_table
    from groupwise.evaluation.calibration import sample_arrays
    from groupwise.records import group_by_problem

    labels = [label for label, r in evals.items() if calibrated_benchmarks(r) and label in samples]
    if len(labels) < 2:
        return []
    by_bench: dict[str, dict[str, dict[str, list[Any]]]] = {}
    for label in labels:
        groups = group_by_problem(read_samples(samples[label]))
        per_bench: dict[str, list[Any]] = {}
        for (bench, _), group in groups.items():
            per_bench.setdefault(bench, []).append(group)
        by_bench[label] = {b: sample_arrays(g) for b, g in per_bench.items()}
    base, rows = labels[0], []
    for other in labels[1:]:
        for bench in calibrated_benchmarks(evals[base]):
            if bench not in calibrated_benchmarks(evals[other]):
                continue
            first, second = by_bench[base].get(bench), by_bench[other].get(bench)
            if first is None or second is None:
                continue
            table = paired_calibration_table(first, second, bootstrap=bootstrap, seed=seed)
            rows.append(
                [
                    bench,
                    f"{other} - {base}",
                    str(table["problems"]),
                    value_with_interval(table, "coverage", 100.0, 1, signed=True),
                    value_with_interval(table, "brier", 1.0, 3, signed=True),
                    value_with_interval(table, "ece_mass", 1.0, 3, signed=True),
                    value_with_interval(table, "ece_width", 1.0, 3, signed=True),
                    value_with_interval(table, "auroc", 1.0, 3, signed=True),
                    value_with_interval(table, "overconfidence", 100.0, 1, signed=True),
                ]
            )
    return rows


# Settings that a results.json written before they existed lacks, with the value it had then
_FORMER_DEFAULTS = {"stop": []}


def settings_mismatches(evals: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per setting of PASS_AT_K_SETTINGS (groupwise.evaluation.provenance) in which
    the evaluations' results.json configs differ, naming each evaluation's value; evaluations
    whose config lacks a setting are left out of that setting's comparison."""
    from groupwise.evaluation.provenance import PASS_AT_K_SETTINGS

    lines = []
    for key in PASS_AT_K_SETTINGS:
        values = {}
        for label, results in evals.items():
            config = results.get("config")
            if not isinstance(config, dict):
                continue
            if key in config:
                values[label] = config[key]
            elif key in _FORMER_DEFAULTS and "temperature" in config:
                values[label] = _FORMER_DEFAULTS[key]
        if len({json.dumps(v, sort_keys=True) for v in values.values()}) > 1:
            lines.append(f"{key}: " + ", ".join(f"{label} {v!r}" for label, v in values.items()))
    return lines


def settings_rows(evals: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """Rows of SETTINGS_HEADER: what produced each evaluation (its config and provenance)."""
    rows = []
    for label, results in evals.items():
        config = results.get("config") if isinstance(results.get("config"), dict) else {}
        record = config.get("provenance") or {}
        adapter = record.get("adapter") or {}
        versions = record.get("versions") or {}
        model = record.get("model") or {}
        digest = model.get("sha256") or model.get("revision")
        rows.append(
            [
                label,
                str(config.get("model", "-")) + (f" ({digest[:12]})" if digest else ""),
                (
                    f"step {adapter.get('step')}, {adapter.get('chosen')} "
                    f"({str(adapter.get('sha256', ''))[:12]})"
                    if adapter
                    else ("-" if not config.get("adapter") else str(config["adapter"]))
                ),
                str(config.get("engine", "-")),
                ", ".join(
                    f"{key} {config[key]}"
                    for key in ("n", "temperature", "top_p", "max_new_tokens", "prompt")
                    if key in config
                ),
                str(config.get("checking", "-")),
                str(config.get("seed", "-")),
                ", ".join(f"{k} {v}" for k, v in versions.items() if v and k != "python") or "-",
            ]
        )
    return rows


SETTINGS_HEADER = [
    "evaluation",
    "model",
    "adapter",
    "engine",
    "sampling",
    "checking",
    "seed",
    "versions",
]
