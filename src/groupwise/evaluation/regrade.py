"""`groupwise eval --output DIR --regrade --checking MODE`: the saved completions of an
evaluation folder checked again under another checking mode, without sampling
(docs/guides/evaluate.md, "Re-grade saved completions").

The folder's samples.jsonl, problems.jsonl and config.json are read and never written; the
verdicts under MODE go to DIR/regrade-MODE/ as results.json, results.md and results.png (the
same tables as the folder's own results, its settings with checking = MODE) and verdicts.jsonl
(one line per sample: benchmark, problem_id, sample, extracted, verdict).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from groupwise.evaluation.config import EvalConfig
from groupwise.evaluation.results import results_table, write_results
from groupwise.records import (
    CONFIG_FILE,
    PROBLEMS_FILE,
    SAMPLES_FILE,
    group_by_problem,
    read_json,
    read_problems,
    read_samples,
)

__all__ = ["VERDICTS_FILE", "regrade", "regrade_folder"]

VERDICTS_FILE = "verdicts.jsonl"


def regrade_folder(output_dir: Path, mode: str) -> Path:
    """Where the results of re-grading `output_dir` under `mode` go."""
    return Path(output_dir) / f"regrade-{mode}"


def _saved_config(output_dir: Path) -> EvalConfig:
    path = output_dir / CONFIG_FILE
    if not (output_dir / SAMPLES_FILE).is_file() or not path.is_file():
        raise FileNotFoundError(
            f"--regrade: {output_dir} holds no {SAMPLES_FILE} and {CONFIG_FILE} (expected the "
            "--output folder of a `groupwise eval` run)"
        )
    saved = read_json(path)
    names = {f.name for f in dataclasses.fields(EvalConfig)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items() if k in names}
    return EvalConfig(**values)


def regrade(output_dir: str | Path, mode: str, workers: int = 2) -> tuple[dict[str, Any], Path]:
    """Check every saved completion of `output_dir` under checking mode `mode`; returns the
    results (as `results_table`) and the folder they were written to."""
    from groupwise.rewards import check_answers

    output_dir = Path(output_dir)
    config = dataclasses.replace(_saved_config(output_dir), checking=mode)
    samples = read_samples(output_dir / SAMPLES_FILE)
    verdicts = check_answers(
        [s.completion for s in samples], [s.gold for s in samples], workers=workers, mode=mode
    )
    regraded = [
        dataclasses.replace(s, verdict=v.status, extracted=v.extracted)
        for s, v in zip(samples, verdicts, strict=True)
    ]
    groups = group_by_problem(regraded)
    problems_path = output_dir / PROBLEMS_FILE
    problems = read_problems(problems_path) if problems_path.is_file() else {}
    by_bench: dict[str, list[Any]] = {}
    levels: dict[str, list[int | None]] = {}
    for (bench, problem_id), group in groups.items():
        if len(group) != config.n:  # an unfinished problem of an interrupted run
            continue
        by_bench.setdefault(bench, []).append(group)
        saved = problems.get((bench, problem_id))
        levels.setdefault(bench, []).append(saved.level if saved is not None else None)
    results = results_table(config, by_bench, levels)
    target = regrade_folder(output_dir, mode)
    target.mkdir(exist_ok=True)
    write_results(results, target)
    lines = (
        json.dumps(
            {
                "benchmark": s.benchmark,
                "problem_id": s.problem_id,
                "sample": s.sample,
                "extracted": s.extracted,
                "verdict": s.verdict,
            },
            ensure_ascii=False,
        )
        + "\n"
        for s in regraded
    )
    (target / VERDICTS_FILE).write_text("".join(lines), encoding="utf-8")
    return results, target
