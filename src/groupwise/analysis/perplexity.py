"""Conditional perplexity of rollouts under the model that generated them (REFERENCE.md,
"Analyses of AMIR-GRPO"; paper Figure 3).

    PPL_m(Y | x) = exp( -(1/T) sum_t log p_m(y_t | x, y_<t) ) = exp(-mean_logp)

`groupwise eval` saves mean_logp for every completion (raw model distribution, temperature 1),
so the analysis needs no model; `--recompute` scores the completions again under each run's
own model (from its saved config), and `--model` scores every run's completions under one
fixed model instead (e.g. the base model, as in Yue et al. 2025).

Strata over the problems every run evaluated: "jointly solvable" = every run solves the
problem in at least `solvable_fraction` of its samples (default 1.0: all samples correct, the
paper's "consistently correct"); "jointly unsolved" = no run has a correct sample.
"""

from __future__ import annotations

import argparse
import csv
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from groupwise.analysis.runs import EvalRun, common_problems, load_runs, warn_if_fewer_samples
from groupwise.records import ProblemKey, Sample, SavedProblem, write_json

STRATA = ("jointly solvable", "jointly unsolved")

# Samples per problem in the paper's protocol: 16 rollouts per problem (paper, Figure 3).
PROTOCOL_SAMPLES: int | None = 16



def rescore(model: torch.nn.Module, tokenizer: Any, samples: Sequence[Sample],
            problems: Mapping[ProblemKey, SavedProblem], template: str,
            batch_size: int = 8) -> list[float | None]:
    """mean_logp of saved completions recomputed under `model` (None for empty ones).

    The prompt is rendered again with `template`; the completion text is tokenized again
    (without special tokens) and the EOS token appended when the sample was not truncated, as
    generation had it. Re-tokenizing decoded text can differ from the sampled ids in rare
    cases (e.g. merges across a special token), so this is close to, not always equal to, the
    saved value.
    """
    from groupwise.data import Problem
    from groupwise.data.prompts import render_prompt
    from groupwise.scoring import completion_mean_logp

    missing = [s.key for s in samples if s.key not in problems]
    if missing:
        raise ValueError(f"no saved problem text for {missing[0]} (problems.jsonl missing or "
                         "incomplete); cannot render its prompt")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    prompts, completions = [], []
    for s in samples:
        p = problems[s.key]
        problem = Problem(id=p.id, question=p.question, answer=p.answer, choices=p.choices)
        prompts.append(tokenizer(render_prompt(problem, template, tokenizer),
                                 add_special_tokens=False).input_ids)
        ids = tokenizer(s.completion, add_special_tokens=False).input_ids
        completions.append(ids if s.truncated else [*ids, tokenizer.eos_token_id])
    prompt_ids, prompt_mask = _pad(prompts, pad, left=True)
    completion_ids, completion_mask = _pad(completions, pad, left=False)
    means = completion_mean_logp(model, prompt_ids, prompt_mask, completion_ids,
                                 completion_mask, batch_size)
    return [None if math.isnan(v) else v for v in means.tolist()]


def _pad(rows: Sequence[Sequence[int]], pad: int, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        cols = slice(width - len(r), width) if left else slice(0, len(r))
        ids[i, cols] = torch.tensor(r, dtype=torch.long)
        mask[i, cols] = 1
    return ids, mask


def perplexity(mean_logp: float) -> float:
    """PPL = exp(-mean_logp), mean_logp in nats per token."""
    return math.exp(-mean_logp)


def strata(runs: Sequence[EvalRun], solvable_fraction: float = 1.0
           ) -> dict[str, list[ProblemKey]]:
    """The problems shared by all runs, split into STRATA (others belong to neither).

    Jointly solvable: in every run the fraction of correct samples is >= solvable_fraction (and
    > 0); jointly unsolved: no correct sample in any run.
    """
    if not 0.0 < solvable_fraction <= 1.0:
        raise ValueError(f"solvable_fraction must be in (0, 1], got {solvable_fraction}")
    groups = [r.by_problem() for r in runs]
    out: dict[str, list[ProblemKey]] = {name: [] for name in STRATA}
    for key in common_problems(runs):
        accuracy = [float(np.mean([s.correct for s in g[key]])) for g in groups]
        if all(a >= solvable_fraction and a > 0 for a in accuracy):
            out[STRATA[0]].append(key)
        elif all(a == 0 for a in accuracy):
            out[STRATA[1]].append(key)
    return out


def _box_stats(values: Sequence[float]) -> dict[str, float | int | None]:
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return {"rollouts": 0, "median": None, "q1": None, "q3": None, "mean": None}
    q1, median, q3 = np.percentile(x, [25, 50, 75])
    return {"rollouts": int(x.size), "median": float(median), "q1": float(q1), "q3": float(q3),
            "mean": float(x.mean())}


def plot_perplexity(ppl: Mapping[str, Mapping[str, Sequence[float]]], path: Path,
                    problems: Mapping[str, int] | None = None) -> Path:
    """One panel per stratum, one box per run (ppl[stratum][run] = rollout perplexities);
    `problems[stratum]`, when given, is shown in the panel title."""
    from groupwise.analysis.figures import new_figure, save_figure, series_colors

    fig, axes = new_figure(width=4.5 * len(ppl), height=4, ncols=len(ppl), sharey=True)
    for ax, (stratum, per_run) in zip(axes[0], ppl.items(), strict=True):
        names = list(per_run)
        parts = ax.boxplot([np.asarray(per_run[n], float) for n in names], patch_artist=True)
        # On the ticks: tick_labels= needs matplotlib 3.9, labels= is gone in 3.11.
        ax.set_xticks(range(1, len(names) + 1), names)
        for patch, color in zip(parts["boxes"], series_colors(len(names)), strict=True):
            patch.set_facecolor(color)
            patch.set_alpha(0.5)
        count = f" ({problems[stratum]} problems)" if problems else ""
        ax.set_title(stratum + count)
        if not any(len(v) for v in per_run.values()):
            ax.text(0.5, 0.5, "no problems in this stratum", transform=ax.transAxes,
                    ha="center", va="center", color="grey")
        ax.set_ylabel("PPL_m(Y | x)")
    return save_figure(fig, path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="NAME=EVAL_DIR",
                        help="evaluation runs, e.g. grpo=runs/eval-grpo amir=runs/eval-amir")
    parser.add_argument("--benchmark", action="append", default=None,
                        help="restrict to this benchmark (repeatable; default: all)")
    parser.add_argument("--solvable-fraction", type=float, default=1.0,
                        help="a run 'solves' a problem when at least this fraction of its "
                             "samples are correct (default 1.0, the paper's stratum)")
    parser.add_argument("--max-problems", type=int, default=None,
                        help="randomly keep at most this many problems per stratum "
                             "(paper: 3 per stratum, 6 in all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of that random choice")
    parser.add_argument("--recompute", action="store_true",
                        help="score completions again under each run's own model (its saved "
                             "config: model, adapter, dtype, prompt) instead of the saved values")
    parser.add_argument("--model", default=None,
                        help="score every run's completions under this one model instead")
    parser.add_argument("--adapter", default=None, help="adapter for --model (run or folder)")
    parser.add_argument("--dtype", default=None, choices=("float32", "bfloat16"),
                        help="dtype for scoring (default: the run's, else float32)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if present)")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per forward pass")
    parser.add_argument("--output", required=True, type=Path, help="folder for figure and data")


def _scored_values(args: argparse.Namespace, run: EvalRun, samples: list[Sample],
                   cache: dict[tuple[str, str | None], tuple[Any, Any]]) -> list[float | None]:
    """mean_logp for `samples`: saved, or recomputed as the options ask."""
    if args.model is None and not args.recompute:
        return [s.mean_logp for s in samples]
    from groupwise.models import default_device, load_policy

    model_name = args.model or run.config.get("model")
    adapter = args.adapter if args.model else run.config.get("adapter")
    if not model_name:
        raise SystemExit(f"run {run.name!r}: its config.json names no model; use --model")
    if (model_name, adapter) not in cache:
        cache.clear()  # one model in memory at a time
        cache[(model_name, adapter)] = load_policy(
            model_name, adapter, dtype=args.dtype or run.config.get("dtype", "float32"),
            device=args.device or default_device())
    model, tokenizer = cache[(model_name, adapter)]
    return rescore(model, tokenizer, samples, run.problems, run.config.get("prompt", "amir"),
                   args.batch_size)


def run(args: argparse.Namespace) -> int:
    runs = load_runs(args.runs, args.benchmark)
    warn_if_fewer_samples(runs, "perplexity", PROTOCOL_SAMPLES)
    split = strata(runs, args.solvable_fraction)
    if args.max_problems is not None:
        rng = random.Random(args.seed)
        split = {k: sorted(rng.sample(v, min(len(v), args.max_problems))) for k, v in
                 split.items()}
    out: Path = args.output
    out.mkdir(parents=True, exist_ok=True)
    ppl: dict[str, dict[str, list[float]]] = {s: {} for s in STRATA}
    rows: list[list[Any]] = []
    cache: dict[tuple[str, str | None], tuple[Any, Any]] = {}
    for r in runs:
        groups = r.by_problem()
        for stratum, keys in split.items():
            samples = [s for k in keys for s in groups[k]]
            values = _scored_values(args, r, samples, cache)
            ppl[stratum][r.name] = [perplexity(v) for v in values if v is not None]
            rows += [[r.name, stratum, s.benchmark, s.problem_id, s.sample, perplexity(v)]
                     for s, v in zip(samples, values, strict=True) if v is not None]
    source = ("model " + args.model) if args.model else (
        "recomputed under each run's model" if args.recompute else "saved mean_logp")
    write_json(out / "perplexity.json", {
        "source": source, "solvable_fraction": args.solvable_fraction,
        "problems": {s: [list(k) for k in keys] for s, keys in split.items()},
        "stats": {s: {n: _box_stats(v) for n, v in per.items()} for s, per in ppl.items()},
    })
    with open(out / "perplexity.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["run", "stratum", "benchmark", "problem_id", "sample", "ppl"])
        writer.writerows(rows)
    plot_perplexity(ppl, out / "perplexity.png", {s: len(k) for s, k in split.items()})
    for stratum, per in ppl.items():
        print(f"{stratum}: {len(split[stratum])} problems")
        for name, values in per.items():
            stats = _box_stats(values)
            median = "-" if stats["median"] is None else f"{stats['median']:.3f}"
            print(f"  {name:<20} rollouts {stats['rollouts']:>5}  median PPL {median}")
    print(f"wrote {out / 'perplexity.json'}, perplexity.csv, perplexity.png")
    return 0
