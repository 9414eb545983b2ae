"""`groupwise report RUN_DIRS... --output PAGE.md|PAGE.html`: one page comparing runs.

For each run (NAME=DIR or DIR): its training curves from DIR/metrics.jsonl (one JSON object per
step; missing keys and a torn last line of a run still in progress are tolerated; a term the
run's config.yaml says it has not, AMIR's preference loss and lambda without algorithm.amir, KL
at algorithm.kl_coef 0, is left out rather than drawn as a line at 0), its held-out evaluations
during training from DIR/heldout.jsonl (groupwise.train.heldout: before the first step, during,
after the last, pass@k with intervals over problems) and its evaluation tables from
DIR/eval/*/results.json, DIR/results.json, or a results.json file given directly. Curves of all
runs share one figure (one panel per metric); evaluations are compared
in one table per k (rows: benchmarks, columns: evaluations) and a pass@1 bar chart; the
calibration of evaluations whose prompt asked for a confidence (docs/algorithms.md §6) per
benchmark, and each one's difference to the first with paired bootstrap intervals (read from
the samples.jsonl beside each results.json). Figures are written as PNG next to the page,
named after it.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from groupwise.metrics import doubling_ks, pass_at_k_table
from groupwise.records import RESULTS_FILE, SAMPLES_FILE, read_json, read_jsonl, read_samples

# (metrics.jsonl key, panel title); a panel is drawn when at least one run logged its key
CURVES: tuple[tuple[str, str], ...] = (
    ("reward_mean", "mean reward"),
    ("accuracy", "training accuracy"),
    ("group_all_correct", "groups all correct (fraction)"),
    ("group_all_wrong", "groups all wrong (fraction)"),
    ("group_mixed", "mixed groups (fraction)"),
    ("lambda", "lambda_reg (AMIR)"),
    ("policy_loss", "policy loss"),
    ("preference_loss", "preference loss"),
    ("completion_length_mean", "mean completion length (tokens)"),
    ("kl", "KL to reference"),
)
# metrics.jsonl keys of the loss terms a run may not have, by the setting of its config.yaml
# (algorithm section) that leaves the term out: a run without it logs 0 for them.
TERMS: dict[str, tuple[str, Any]] = {
    "preference_loss": ("amir", False),
    "lambda": ("amir", False),
    "kl": ("kl_coef", 0.0),
}
HELDOUT_FILE = "heldout.jsonl"  # groupwise.train.heldout writes it into a run folder


@dataclass
class RunRecord:
    """What the page shows of one run: its metric rows and its evaluations."""

    name: str
    path: Path
    metrics: list[dict[str, Any]] = field(default_factory=list)
    evals: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> results.json
    samples: dict[str, Path] = field(default_factory=dict)  # label -> samples.jsonl beside it
    heldout: list[dict[str, Any]] = field(default_factory=list)  # heldout.jsonl, step order
    absent: frozenset[str] = frozenset()  # metrics.jsonl keys of terms the run has not
    finished: bool = False  # the run wrote final/: its last held-out evaluation is "after"


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


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """metrics.jsonl rows; a row without "step" gets its 1-based line order as step."""
    rows, _ = read_jsonl(path)
    out = []
    for index, (number, row) in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object per line")
        out.append({"step": index, **row})
    return out


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
    metrics = path / "metrics.jsonl" if path.is_dir() else None
    if metrics is not None and metrics.is_file():
        record.metrics = read_metrics(metrics)
        record.absent = absent_terms(_run_config(path / "config.yaml"))
        record.finished = (path / "final").is_dir()
    if path.is_dir() and (path / HELDOUT_FILE).is_file():
        from groupwise.train.heldout import read_heldout

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


def _run_config(path: Path) -> Any:
    """A run's config.yaml as read, None when it has none; unreadable YAML names the file."""
    if not path.is_file():
        return None
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as err:
        raise ValueError(f"{path} cannot be read: {' '.join(str(err).split())}") from None


def _moving_average(values: np.ndarray, window: int) -> np.ndarray:
    if window <= 1 or values.size < window:
        return values
    kernel = np.ones(window) / window
    # Pad with edge values so the smoothed line keeps the series' length and ends.
    padded = np.pad(values, (window // 2, window - 1 - window // 2), mode="edge")
    return np.convolve(padded, kernel, mode="valid")


def plot_curves(records: Sequence[RunRecord], path: Path) -> Path | None:
    """One panel per logged metric, one line per run (raw faint, moving average solid when a
    run has more than 50 steps); a run's terms it has not (RunRecord.absent) are not drawn, and
    a panel no run has is left out. None when no run logged any metric."""
    from groupwise.figures import new_figure, save_figure, series_colors

    panels = [
        (k, t)
        for k, t in CURVES
        if any(k in row for r in records if k not in r.absent for row in r.metrics)
    ]
    if not panels:
        return None
    ncols = min(3, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = new_figure(width=5 * ncols, height=3.2 * nrows, ncols=ncols, nrows=nrows)
    colors = series_colors(len(records))
    for ax, (key, title) in zip(axes.flat, panels, strict=False):
        for record, color in zip(records, colors, strict=True):
            points = [
                (row["step"], row[key])
                for row in record.metrics
                if isinstance(row.get(key), (int, float)) and not isinstance(row[key], bool)
            ]
            if not points or key in record.absent:
                continue
            steps, values = (np.asarray(v, float) for v in zip(*points, strict=True))
            if steps.size > 50:
                ax.plot(steps, values, color=color, alpha=0.25, linewidth=0.8)
                values = _moving_average(values, max(2, steps.size // 25))
            ax.plot(steps, values, color=color, label=record.name)
        ax.set_title(title)
        ax.set_xlabel("step")
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=8)
    return save_figure(fig, path)


def _benchmarks(results: Mapping[str, Any]) -> list[str]:
    return [k for k, v in results.items() if k != "config" and isinstance(v, dict)]


def _ks(evals: Mapping[str, Mapping[str, Any]]) -> list[int]:
    ks = {
        int(key[len("pass@") :])
        for results in evals.values()
        for bench in _benchmarks(results)
        for key in results[bench]
        if key.startswith("pass@") and key[len("pass@") :].isdigit()
    }
    return sorted(ks)


def _cell(entry: Mapping[str, Any] | None, k: int) -> str:
    if not entry or f"pass@{k}" not in entry:
        return "-"
    text = f"{100 * entry[f'pass@{k}']:.1f}"
    ci = entry.get(f"pass@{k}_ci")
    if isinstance(ci, list) and len(ci) == 2:
        text += f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"
    return text


def eval_tables(
    evals: Mapping[str, Mapping[str, Any]],
) -> list[tuple[int, list[str], list[list[str]]]]:
    """One table per k: (k, header, rows), rows = benchmarks, columns = evaluations; cells are
    pass@k in percent with the 95 % interval, '-' where an evaluation lacks it."""
    labels = list(evals)
    benches = list(dict.fromkeys(b for r in evals.values() for b in _benchmarks(r)))
    tables = []
    for k in _ks(evals):
        rows = [[b, *(_cell(evals[label].get(b), k) for label in labels)] for b in benches]
        tables.append((k, ["benchmark", *labels], rows))
    return tables


def plot_pass1(evals: Mapping[str, Mapping[str, Any]], path: Path) -> Path | None:
    """Grouped bars of pass@1 (percent, with its interval) per benchmark and evaluation."""
    from groupwise.figures import new_figure, save_figure, series_colors

    labels = list(evals)
    benches = list(dict.fromkeys(b for r in evals.values() for b in _benchmarks(r)))
    if not benches:
        return None
    fig, axes = new_figure(width=max(6.0, 1.2 * len(benches) * max(1, len(labels)) / 2 + 2))
    ax = axes[0, 0]
    width = 0.8 / len(labels)
    for i, (label, color) in enumerate(zip(labels, series_colors(len(labels)), strict=True)):
        xs, ys, errs = [], [], [[], []]
        for j, bench in enumerate(benches):
            entry = evals[label].get(bench)
            if not entry or "pass@1" not in entry:
                continue
            value = 100 * entry["pass@1"]
            lo, hi = (100 * v for v in entry.get("pass@1_ci", [entry["pass@1"]] * 2))
            xs.append(j + (i - (len(labels) - 1) / 2) * width)
            ys.append(value)
            errs[0].append(max(0.0, value - lo))
            errs[1].append(max(0.0, hi - value))
        ax.bar(xs, ys, width, yerr=errs, color=color, label=label, capsize=2)
    ax.set_xticks(range(len(benches)), benches, rotation=20, ha="right")
    ax.set_ylabel("pass@1 (%)")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def heldout_table(evaluation: Mapping[str, Any]) -> dict[str, Any]:
    """The pass@k table of one heldout.jsonl line: as training wrote it ("pass_at_k"), else
    computed from its correct counts (docs/algorithms.md §4, k = 1, 2, 4, ... up to n)."""
    table = evaluation.get("pass_at_k")
    if isinstance(table, dict) and "pass@1" in table:
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


def plot_heldout(records: Sequence[RunRecord], path: Path) -> Path:
    """Held-out pass@1 (percent) over training steps, one line per run with a held-out
    evaluation, its 95 % interval over problems as a band."""
    from groupwise.figures import new_figure, save_figure, series_colors

    runs = [r for r in records if r.heldout]
    fig, axes = new_figure()
    ax = axes[0, 0]
    for record, color in zip(runs, series_colors(len(runs)), strict=True):
        tables = [heldout_table(e) for e in record.heldout]
        steps = [e["step"] for e in record.heldout]
        ax.plot(
            steps, [100 * t["pass@1"] for t in tables], marker="o", color=color, label=record.name
        )
        low = [100 * t.get("pass@1_ci", [t["pass@1"]] * 2)[0] for t in tables]
        high = [100 * t.get("pass@1_ci", [t["pass@1"]] * 2)[1] for t in tables]
        ax.fill_between(steps, low, high, color=color, alpha=0.2)
    ax.set(xlabel="step", ylabel="held-out pass@1 (%)", title="held-out pass@1 (95 % CI)")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def heldout_blocks(records: Sequence[RunRecord], page: Path) -> list[Block]:
    """The page's section on the runs' held-out evaluations during training ([] when none)."""
    if not any(r.heldout for r in records):
        return []
    header, rows = heldout_rows(records)
    figure = plot_heldout(records, page.with_name(f"{page.stem}-heldout.png"))
    return [
        ("h", 2, "Held-out evaluations during training"),
        (
            "p",
            "From each run's heldout.jsonl (train.eval_every, data.heldout): the policy before "
            "the first step, during training and after the last step, on the same problems with "
            "the same random streams; pass@k in percent (unbiased estimator, mean over "
            "problems) with its 95 % bootstrap interval over problems.",
        ),
        ("table", header, rows),
        ("img", figure.name, "held-out pass@1 over training"),
    ]


def _calibrated(results: Mapping[str, Any]) -> list[str]:
    return [b for b in _benchmarks(results) if "calibration" in results[b]]


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
    from groupwise.evaluation.calibration import sample_arrays, value_with_interval
    from groupwise.records import group_by_problem

    labels = [label for label, r in evals.items() if _calibrated(r) and label in samples]
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
        for bench in _calibrated(evals[base]):
            if bench not in _calibrated(evals[other]):
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


def calibration_blocks(
    evals: Mapping[str, Mapping[str, Any]], samples: Mapping[str, Path]
) -> list[Block]:
    """The page's calibration section: each calibrated evaluation's figures per benchmark, then
    the paired differences against the first one ([] when no evaluation has calibration)."""
    from groupwise.evaluation.calibration import CALIBRATION_HEADER, calibration_cells

    calibrated = [label for label, r in evals.items() if _calibrated(r)]
    if not calibrated:
        return []
    benches = list(dict.fromkeys(b for label in calibrated for b in _calibrated(evals[label])))
    rows = [
        [bench, label, *calibration_cells(evals[label][bench]["calibration"])]
        for bench in benches
        for label in calibrated
        if bench in _calibrated(evals[label])
    ]
    blocks: list[Block] = [
        ("h", 2, "Calibration"),
        (
            "p",
            "Stated confidences of the evaluations whose prompt asks for one "
            "(docs/algorithms.md §6): completions without a parsable confidence are counted "
            "(coverage, missing) and left out of the other figures, never read as 0.5; ECE "
            "with M = 10 bins; 95 % bootstrap intervals over problems.",
        ),
        ("table", ["benchmark", "evaluation", *CALIBRATION_HEADER], rows),
    ]
    paired = paired_calibration_rows(evals, samples)
    if paired:
        blocks += [
            ("h", 3, "Calibration differences (paired)"),
            (
                "p",
                f"Each evaluation minus {calibrated[0]}, on the problems both have: the "
                "difference of each figure with a paired 95 % bootstrap interval (each resample "
                "draws the problems once for both runs). Lower Brier and ECE are better, higher "
                "AUROC; an interval that excludes 0 is a difference beyond resampling noise.",
            ),
            ("table", PAIRED_HEADER, paired),
        ]
    elif len(calibrated) > 1:
        blocks.append(
            (
                "p",
                "No paired differences: they need each evaluation's samples.jsonl beside its "
                "results.json.",
            )
        )
    return blocks


# A page is a list of blocks: ("h", level, text), ("p", text), ("img", file, alt),
# ("table", header, rows); render_markdown / render_html turn it into text.
Block = tuple[Any, ...]


def render_markdown(blocks: Sequence[Block]) -> str:
    out = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            out.append("#" * block[1] + " " + block[2])
        elif kind == "p":
            out.append(block[1])
        elif kind == "img":
            out.append(f"![{block[2]}]({block[1]})")
        elif kind == "table":
            header, rows = block[1], block[2]
            lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(row) + " |" for row in rows]
            out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def render_html(blocks: Sequence[Block], title: str) -> str:
    esc = html.escape
    body = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            body.append(f"<h{block[1]}>{esc(block[2])}</h{block[1]}>")
        elif kind == "p":
            body.append(f"<p>{esc(block[1])}</p>")
        elif kind == "img":
            body.append(f'<img src="{esc(block[1])}" alt="{esc(block[2])}">')
        elif kind == "table":
            head = "".join(f"<th>{esc(c)}</th>" for c in block[1])
            rows = "".join(
                "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in block[2]
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
    style = (
        "body{font-family:sans-serif;max-width:1200px;margin:auto}img{max-width:100%}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}"
    )
    return (
        f"<!doctype html>\n<html><head><meta charset='utf-8'><title>{esc(title)}</title>"
        f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def _last(rows: Sequence[Mapping[str, Any]], key: str) -> str:
    for row in reversed(rows):
        value = row.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return f"{value:.4g}"
    return "-"


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


def _heldout_label(record: RunRecord) -> list[str]:
    """The runs table's name of a run's held-out evaluations: ["held-out at steps 0, 50, 100"]."""
    if not record.heldout:
        return []
    return ["held-out at steps " + ", ".join(str(e["step"]) for e in record.heldout)]


def _eval_label(records: Sequence[RunRecord], record: RunRecord, label: str) -> str:
    """An evaluation's name on the page: RUN/LABEL, or LABEL alone for one run with one."""
    return f"{record.name}/{label}" if len(records) > 1 or len(record.evals) > 1 else label


def build_page(records: Sequence[RunRecord], page: Path, title: str) -> list[Block]:
    """The page's blocks; writes its figures next to `page` as <stem>-*.png."""
    blocks: list[Block] = [("h", 1, title), ("h", 2, "Runs")]
    blocks.append(
        (
            "table",
            [
                "run",
                "path",
                "steps logged",
                "last reward_mean",
                "last accuracy",
                "last lambda",
                "evaluations",
            ],
            [
                [
                    r.name,
                    str(r.path),
                    str(len(r.metrics)),
                    _last(r.metrics, "reward_mean"),
                    _last(r.metrics, "accuracy"),
                    _last(r.metrics, "lambda"),
                    ", ".join([*r.evals, *_heldout_label(r)]) or "-",
                ]
                for r in records
            ],
        )
    )
    curves = plot_curves(records, page.with_name(f"{page.stem}-training.png"))
    if curves is not None:
        blocks += [
            ("h", 2, "Training curves"),
            (
                "p",
                "From each run's metrics.jsonl (faint: raw; solid: moving average "
                "when a run has more than 50 steps).",
            ),
            ("img", curves.name, "training curves"),
        ]
    blocks += heldout_blocks(records, page)
    evals = {
        _eval_label(records, r, label): results
        for r in records
        for label, results in r.evals.items()
    }
    if evals:
        blocks += [
            ("h", 2, "Evaluation settings"),
            ("table", SETTINGS_HEADER, settings_rows(evals)),
        ]
        mismatches = settings_mismatches(evals)
        if mismatches:
            blocks.append(
                (
                    "p",
                    "Warning: these evaluations differ in settings that change pass@k, so their "
                    "numbers do not measure the same thing: " + "; ".join(mismatches) + ".",
                )
            )
        blocks += [
            ("h", 2, "Evaluation"),
            (
                "p",
                "pass@k in percent (unbiased estimator, mean over problems) with its "
                "95 % bootstrap interval over problems.",
            ),
        ]
        for k, header, rows in eval_tables(evals):
            blocks += [("h", 3, f"pass@{k}"), ("table", header, rows)]
        bars = plot_pass1(evals, page.with_name(f"{page.stem}-pass1.png"))
        if bars is not None:
            blocks.append(("img", bars.name, "pass@1 per benchmark"))
        samples = {
            _eval_label(records, r, label): path
            for r in records
            for label, path in r.samples.items()
        }
        blocks += calibration_blocks(evals, samples)
    return blocks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="RUN_DIR",
        help="training runs (metrics.jsonl, eval/*/results.json), eval folders "
        "or results.json files; NAME=PATH names one",
    )
    parser.add_argument(
        "--output",
        required=True,
        type=Path,
        help="the page: .md (Markdown) or .html; figures go next to it",
    )
    parser.add_argument("--title", default="groupwise report", help="page title")
    parser.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="compare evaluations even when they differ in a setting that changes pass@k "
        "(temperature, top-p, max new tokens, prompt, checking, stop strings, limit); the "
        "page then says which",
    )


def run(args: argparse.Namespace) -> int:
    from groupwise.analysis.runs import parse_run_specs

    page: Path = args.output
    if page.suffix.lower() not in (".md", ".html", ".htm"):
        raise SystemExit(f"--output {page}: use a .md or .html file name")
    records = [load_record(name, path) for name, path in parse_run_specs(args.runs).items()]
    evals = {
        _eval_label(records, r, label): results
        for r in records
        for label, results in r.evals.items()
    }
    mismatches = settings_mismatches(evals)
    if mismatches and not args.allow_mismatch:
        print(
            "groupwise report: the evaluations differ in settings that change pass@k ("
            + "; ".join(mismatches)
            + "); compare evaluations made alike, or pass --allow-mismatch",
            file=sys.stderr,
        )
        return 2
    page.parent.mkdir(parents=True, exist_ok=True)
    blocks = build_page(records, page, args.title)
    text = (
        render_markdown(blocks) if page.suffix.lower() == ".md" else render_html(blocks, args.title)
    )
    page.write_text(text, encoding="utf-8")
    print(f"wrote {page}")
    return 0
