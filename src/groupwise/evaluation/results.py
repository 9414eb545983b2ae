"""The results of an evaluation: pass@k per benchmark with its 95 % bootstrap interval over
problems (REFERENCE.md section 4), as results.json, results.md and results.png."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from groupwise.evaluation.config import EvalConfig
from groupwise.records import MEAN_LOGP_NOTE, RESULTS_FILE, Sample, write_json


def results_table(config: EvalConfig, groups: Mapping[str, Sequence[Sequence[Sample]]]
                  ) -> dict[str, Any]:
    """{benchmark: {"n", "problems", "pass@k", "pass@k_ci", ..., "timeouts", "no_answer",
    "errors", "truncated", "mean_tokens"}, "config": {...}} from each problem's n samples.

    pass@k and its interval come from metrics.pass_at_k_table (REFERENCE.md section 4); the
    counts are over samples.
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
    results["config"] = {**config.to_dict(), "note": MEAN_LOGP_NOTE}
    return results


def _benchmarks(results: Mapping[str, Any]) -> list[str]:
    return [b for b in results if b != "config"]


def results_markdown(results: Mapping[str, Any]) -> str:
    """The results as a Markdown table: pass@k in percent with the 95 % interval."""
    ks = results["config"]["ks"]
    header = ["benchmark", "problems", *(f"pass@{k} (%)" for k in ks), "no answer", "timeouts",
              "truncated"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for bench in _benchmarks(results):
        r = results[bench]
        cells = [f"{100 * r[f'pass@{k}']:.1f} [{100 * r[f'pass@{k}_ci'][0]:.1f}, "
                 f"{100 * r[f'pass@{k}_ci'][1]:.1f}]" for k in ks]
        lines.append("| " + " | ".join([bench, str(r["problems"]), *cells, str(r["no_answer"]),
                                        str(r["timeouts"]), str(r["truncated"])]) + " |")
    config = results["config"]
    lines.append(f"\nmodel {config['model']}" + (f" + adapter {config['adapter']}"
                                                 if config["adapter"] else "")
                 + f"; n={config['n']}, temperature {config['temperature']}, top-p "
                 f"{config['top_p']}, {config['max_new_tokens']} new tokens, prompt "
                 f"{config['prompt']}")
    return "\n".join(lines) + "\n"


def plot_results(results: Mapping[str, Any], path: Path) -> Path:
    """Grouped bars: pass@k (percent, with interval) per benchmark, one bar per k."""
    from groupwise.analysis.figures import new_figure, save_figure, series_colors

    benches = _benchmarks(results)
    ks = results["config"]["ks"]
    fig, axes = new_figure(width=max(5.0, 1.0 + 0.4 * len(ks) * len(benches)))
    ax = axes[0, 0]
    width = 0.8 / len(ks)
    for i, (k, color) in enumerate(zip(ks, series_colors(len(ks)), strict=True)):
        values = [100 * results[b][f"pass@{k}"] for b in benches]
        low = [v - 100 * results[b][f"pass@{k}_ci"][0] for v, b in zip(values, benches,
                                                                       strict=True)]
        high = [100 * results[b][f"pass@{k}_ci"][1] - v for v, b in zip(values, benches,
                                                                        strict=True)]
        ax.bar([j + (i - (len(ks) - 1) / 2) * width for j in range(len(benches))], values,
               width, yerr=[low, high], capsize=2, color=color, label=f"pass@{k}")
    ax.set_xticks(range(len(benches)), benches, rotation=20, ha="right")
    ax.set_ylabel("%")
    ax.set_ylim(0, 105)
    ax.set_title(f"{results['config']['model']}: pass@k (n={results['config']['n']})")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def write_results(results: Mapping[str, Any], output_dir: Path) -> None:
    """results.json, results.md and results.png into output_dir."""
    write_json(output_dir / RESULTS_FILE, dict(results))
    (output_dir / "results.md").write_text(results_markdown(results), encoding="utf-8")
    plot_results(results, output_dir / "results.png")
