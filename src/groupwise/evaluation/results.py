"""The results of an evaluation: pass@k per benchmark with its 95 % bootstrap interval over
problems (docs/algorithms.md §4), as results.json, results.md and results.png; when the prompt
asks for a confidence, its calibration too (docs/algorithms.md §6,
groupwise.evaluation.calibration; the reliability diagram calibration.png).

A benchmark whose problems carry a MATH difficulty level (MATH, MATH-500) is also reported per
level and for Levels 4-5 together, the hard subset of the LENS paper's curves
(docs/algorithms.md §3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from groupwise.evaluation.calibration import (
    CALIBRATION_FIGURE,
    add_calibration,
    asks_confidence,
    calibration_markdown,
    plot_reliability,
)
from groupwise.evaluation.config import MEAN_LOGP_NOTES, EvalConfig
from groupwise.evaluation.provenance import provenance
from groupwise.records import RESULTS_FILE, Sample, write_json

HARD_LEVELS = (4, 5)
HARD_LABEL = "4-5"
# Characters per line of a benchmark's name under its bars (longer specs are wrapped).
TICK_LABEL_WIDTH = 24


def _level_tables(
    config: EvalConfig, counts: Sequence[int], levels: Sequence[int | None]
) -> dict[str, Any]:
    """{"1": table, ..., "5": table, "4-5": table} over the problems with a level (a table per
    level present; "4-5" when any problem is of level 4 or 5)."""
    from groupwise.metrics import pass_at_k_table

    groups: dict[str, list[int]] = {}
    for level in sorted({lv for lv in levels if lv is not None}):
        groups[str(level)] = [c for c, lv in zip(counts, levels, strict=True) if lv == level]
    hard = [c for c, lv in zip(counts, levels, strict=True) if lv in HARD_LEVELS]
    if hard:
        groups[HARD_LABEL] = hard
    return {
        label: pass_at_k_table(subset, config.n, config.ks, seed=config.seed)
        for label, subset in groups.items()
    }


def results_table(
    config: EvalConfig,
    groups: Mapping[str, Sequence[Sequence[Sample]]],
    levels: Mapping[str, Sequence[int | None]] | None = None,
    provenance_record: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """{benchmark: {"n", "problems", "pass@k", "pass@k_ci", ..., "timeouts", "no_answer",
    "errors", "truncated", "mean_tokens"[, "levels"][, "calibration"]}, "config": {...}} from
    each problem's n samples; "calibration" (also in each level) when the prompt asks for a
    confidence (groupwise.evaluation.calibration.calibration_entry). "config" holds the settings
    and "provenance" (groupwise.evaluation.provenance: versions, engine, model and adapter
    hashes, checkpoint step, sampling settings, seed): `provenance_record` when given (the
    record of the session that sampled), else recorded now.

    pass@k and its interval come from metrics.pass_at_k_table (docs/algorithms.md §4); the
    counts are over samples. levels[benchmark], when given, holds each problem's difficulty
    level (or None), in the order of groups[benchmark]; a benchmark with any level gets
    "levels": {"1": {"problems", "pass@k", "pass@k_ci", ...}, ..., "4-5": {...}}.
    """
    from groupwise.metrics import pass_at_k_table

    results: dict[str, Any] = {}
    for bench, problems in groups.items():
        if not problems:
            continue
        samples = [s for g in problems for s in g]
        counts = [sum(s.correct for s in g) for g in problems]
        results[bench] = {
            **pass_at_k_table(counts, config.n, config.ks, seed=config.seed),
            "timeouts": sum(s.verdict == "timeout" for s in samples),
            "no_answer": sum(s.verdict == "no_answer" for s in samples),
            "errors": sum(s.verdict == "error" for s in samples),
            "truncated": sum(s.truncated for s in samples),
            "mean_tokens": sum(s.tokens for s in samples) / len(samples),
        }
        bench_levels = (levels or {}).get(bench)
        if bench_levels is not None and any(lv is not None for lv in bench_levels):
            results[bench]["levels"] = _level_tables(config, counts, bench_levels)
    if asks_confidence(config.prompt):
        add_calibration(results, groups, levels, config.seed)
    results["config"] = {
        **config.to_dict(),
        "note": MEAN_LOGP_NOTES[config.engine],
        "provenance": dict(provenance_record) if provenance_record else provenance(config),
    }
    return results


def _benchmarks(results: Mapping[str, Any]) -> list[str]:
    return [b for b in results if b != "config"]


def level_label(level: str) -> str:
    """ "Level 3" for "3", "Levels 4-5" for "4-5"."""
    return f"Levels {level}" if "-" in level else f"Level {level}"


def _row(label: str, table: Mapping[str, Any], ks: Sequence[int]) -> list[str]:
    return [
        label,
        str(table["problems"]),
        *(
            f"{100 * table[f'pass@{k}']:.1f} [{100 * table[f'pass@{k}_ci'][0]:.1f}, "
            f"{100 * table[f'pass@{k}_ci'][1]:.1f}]"
            for k in ks
        ),
    ]


def _markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def results_markdown(results: Mapping[str, Any]) -> str:
    """The results as Markdown: a table of pass@k in percent with the 95 % interval per
    benchmark, then one per leveled benchmark, by level, then the settings (model, engine,
    sampling, prompt, the checking mode that judged the answers)."""
    ks = results["config"]["ks"]
    passes = [f"pass@{k} (%)" for k in ks]
    rows = [
        [
            *_row(bench, results[bench], ks),
            str(results[bench]["no_answer"]),
            str(results[bench]["timeouts"]),
            str(results[bench]["truncated"]),
        ]
        for bench in _benchmarks(results)
    ]
    lines = _markdown_table(
        ["benchmark", "problems", *passes, "no answer", "timeouts", "truncated"], rows
    )
    for bench in _benchmarks(results):
        if "levels" in results[bench]:
            lines += ["", f"{bench} by MATH difficulty level:", ""]
            lines += _markdown_table(
                ["level", "problems", *passes],
                [
                    _row(level_label(level), table, ks)
                    for level, table in results[bench]["levels"].items()
                ],
            )
    lines += calibration_markdown(results)
    config = results["config"]
    engine = config.get("engine", "transformers")  # results.json of older folders lack it
    served = f" at {config['base_url']}, {config['api']} endpoint" if engine == "openai" else ""
    lines.append(
        f"\nmodel {config['model']}"
        + (f" + adapter {config['adapter']}" if config["adapter"] else "")
        + f"; engine {engine}{served}; n={config['n']}, temperature "
        f"{config['temperature']}, top-p {config['top_p']}, "
        f"{config['max_new_tokens']} new tokens, prompt {config['prompt']}, checking "
        f"{config.get('checking', '-')}"
        + (f", stop {config['stop']}" if config.get("stop") else "")
    )
    return "\n".join(lines) + "\n"


def _short_path(name: str) -> str:
    """A local folder by its last three parts ("trial/final/model"), else `name` as given (an
    alias, a hub id or a relative folder)."""
    path = Path(name)
    return "/".join(path.parts[-3:]) if path.is_absolute() else name


def _adapter_name(path: Path) -> str:
    """An adapter by its training run and which of the run's adapters it is (the layouts of
    groupwise.evaluation.provenance.adapter_identity), else by its folder's name."""
    if path.name == "adapter" and path.parent.name == "final":
        return f"{path.parent.parent.name} (final adapter)"
    if path.name == "adapter" and path.parent.parent.name == "checkpoints":
        return f"{path.parent.parent.parent.name} ({path.parent.name} adapter)"
    return f"{_short_path(str(path))} (adapter)"


def evaluated_name(config: Mapping[str, Any]) -> str:
    """What an evaluation's results are of, as its figure names it: the model, or with an
    adapter the adapter's run on the base model ("smollm2_arith (final adapter) on
    smollm2-135m-instruct", "trial (step-3 adapter) on arith-base"). `config` is
    results["config"]; a local folder is named by its last three parts."""
    model = _short_path(str(config["model"]))
    adapter = config.get("adapter")
    return f"{_adapter_name(Path(adapter))} on {model}" if adapter else model


def _grouped_bars(ax: Any, entries: Mapping[str, Mapping[str, Any]], ks: Sequence[int]) -> None:
    """pass@k bars (percent, with interval) per entry, one bar per k, on axes `ax`; long entry
    names are wrapped."""
    from groupwise.figures import series_colors, wrap_text

    labels = list(entries)
    width = 0.8 / len(ks)
    for i, (k, color) in enumerate(zip(ks, series_colors(len(ks)), strict=True)):
        values = [100 * entries[e][f"pass@{k}"] for e in labels]
        low = [v - 100 * entries[e][f"pass@{k}_ci"][0] for v, e in zip(values, labels, strict=True)]
        high = [
            100 * entries[e][f"pass@{k}_ci"][1] - v for v, e in zip(values, labels, strict=True)
        ]
        ax.bar(
            [j + (i - (len(ks) - 1) / 2) * width for j in range(len(labels))],
            values,
            width,
            yerr=[low, high],
            capsize=2,
            color=color,
            label=f"pass@{k}",
        )
    ax.set_xticks(
        range(len(labels)),
        [wrap_text(label, TICK_LABEL_WIDTH) for label in labels],
        rotation=20,
        ha="right",
    )
    ax.set_ylabel("%")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=8)


def plot_results(results: Mapping[str, Any], path: Path) -> Path:
    """Grouped bars of pass@k per benchmark, then one panel per leveled benchmark: pass@k per
    MATH difficulty level and for Levels 4-5. The first title names what was evaluated
    (`evaluated_name`: the adapter's run when there is an adapter) and n as samples per problem;
    titles are wrapped to their panel."""
    from groupwise.figures import new_figure, save_figure, set_wrapped_title

    benches = _benchmarks(results)
    leveled = [b for b in benches if "levels" in results[b]]
    ks = results["config"]["ks"]
    widths = [max(5.0, 1.0 + 0.4 * len(ks) * len(benches))]
    widths += [max(5.0, 1.0 + 0.4 * len(ks) * len(results[b]["levels"])) for b in leveled]
    fig, axes = new_figure(
        width=sum(widths), ncols=len(widths), gridspec_kw={"width_ratios": widths}
    )
    _grouped_bars(axes[0, 0], {b: results[b] for b in benches}, ks)
    config = results["config"]
    set_wrapped_title(
        axes[0, 0], f"{evaluated_name(config)}: pass@k, n={config['n']} samples per problem"
    )
    for ax, bench in zip(axes[0, 1:], leveled, strict=True):
        _grouped_bars(ax, {level_label(lv): t for lv, t in results[bench]["levels"].items()}, ks)
        set_wrapped_title(ax, f"{bench} by MATH difficulty level")
    return save_figure(fig, path)


def write_results(results: Mapping[str, Any], output_dir: Path) -> None:
    """results.json, results.md and results.png into output_dir, and calibration.png (the
    reliability diagram) when the results have calibration."""
    write_json(output_dir / RESULTS_FILE, dict(results))
    (output_dir / "results.md").write_text(results_markdown(results), encoding="utf-8")
    plot_results(results, output_dir / "results.png")
    plot_reliability(results, output_dir / CALIBRATION_FIGURE)
