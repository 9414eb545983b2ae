"""`groupwise analyze errors`: where and how incorrect solutions go wrong (docs/algorithms.md,
"Analyses of AMIR-GRPO"; paper Figures 5-6). Writes errors.json, errors.csv, the figures and
judgements.jsonl into --output."""

from __future__ import annotations

import argparse
import csv
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np

from groupwise.analysis.error_position.cache import JudgeCache
from groupwise.analysis.error_position.figures import plot_errors, summarize_run
from groupwise.analysis.error_position.judges import Judge, LocalModelJudge, OpenAIChatJudge
from groupwise.analysis.error_position.judging import judge_items, select_items
from groupwise.analysis.error_position.segmentation import segment_steps
from groupwise.analysis.error_position.taxonomy import DEFAULT_TAXONOMY, load_taxonomy
from groupwise.analysis.runs import load_runs, nothing_produced, warn_if_fewer_samples
from groupwise.records import write_json

# Samples per problem in the paper's protocol: 16 rollouts per problem (paper, Figures 5-6).
PROTOCOL_SAMPLES: int | None = 16


def make_judge(args: argparse.Namespace) -> Judge:
    """The judge the command line asks for (remote endpoint or local model)."""
    if args.judge_local:
        from groupwise.models import default_device, load_policy

        model, tokenizer = load_policy(
            args.judge_local,
            args.judge_adapter,
            dtype=args.dtype,
            device=args.device or default_device(),
        )
        return LocalModelJudge(model, tokenizer, args.judge_local, args.judge_max_new_tokens)
    if not args.judge_base_url or not args.judge_model:
        raise SystemExit(
            "errors: give --judge-base-url and --judge-model (an OpenAI-compatible "
            "endpoint) or --judge-local MODEL"
        )
    key = os.environ.get(args.judge_api_key_env)
    if not key:
        print(f"note: ${args.judge_api_key_env} is not set; asking without an API key")
    return OpenAIChatJudge(
        args.judge_base_url, args.judge_model, key, args.judge_timeout, args.judge_temperature
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="NAME=EVAL_DIR", help="evaluation runs")
    parser.add_argument(
        "--benchmark",
        action="append",
        default=None,
        help="restrict to this benchmark (repeatable; default: all)",
    )
    parser.add_argument(
        "--taxonomy",
        type=Path,
        default=DEFAULT_TAXONOMY,
        help="error taxonomy YAML (default: the packaged error_taxonomy.yaml)",
    )
    parser.add_argument(
        "--judge-base-url",
        default=None,
        help="OpenAI-compatible endpoint, e.g. https://api.openai.com/v1",
    )
    parser.add_argument("--judge-model", default=None, help="model name at that endpoint")
    parser.add_argument(
        "--judge-api-key-env",
        default="OPENAI_API_KEY",
        help="environment variable holding the API key (default OPENAI_API_KEY)",
    )
    parser.add_argument(
        "--judge-timeout", type=float, default=120.0, help="seconds per request (default 120)"
    )
    parser.add_argument(
        "--judge-temperature",
        type=float,
        default=None,
        help="sampling temperature sent to the endpoint (default: not sent)",
    )
    parser.add_argument(
        "--judge-local",
        default=None,
        metavar="MODEL",
        help="judge with a local transformers model (greedy) instead",
    )
    parser.add_argument("--judge-adapter", default=None, help="adapter for --judge-local")
    parser.add_argument(
        "--judge-max-new-tokens",
        type=int,
        default=64,
        help="reply length of the local judge (default 64)",
    )
    parser.add_argument(
        "--judge-attempts",
        type=int,
        default=3,
        help="tries per solution before it counts as a judge failure (default 3)",
    )
    parser.add_argument(
        "--judge-backoff",
        type=float,
        default=2.0,
        help="seconds before the 2nd try, doubling after (default 2)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=4,
        help="parallel requests to a remote judge (default 4; local: 1)",
    )
    parser.add_argument(
        "--min-steps",
        type=int,
        default=3,
        help="segmentation falls back to finer units below this many steps",
    )
    parser.add_argument(
        "--max-per-run",
        type=int,
        default=None,
        help="judge at most this many random incorrect solutions per run",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of that random choice")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--device", default=None, help="cpu or cuda for --judge-local")
    parser.add_argument("--output", required=True, type=Path, help="folder for figures and data")


def run(args: argparse.Namespace) -> int:
    if args.judge_local and args.judge_base_url:
        raise SystemExit("errors: --judge-local and --judge-base-url exclude each other")
    if args.judge_attempts < 1:
        raise SystemExit(f"--judge-attempts must be >= 1, got {args.judge_attempts}")
    taxonomy = load_taxonomy(args.taxonomy)
    runs = load_runs(args.runs, args.benchmark)
    warn_if_fewer_samples(runs, "errors", PROTOCOL_SAMPLES)
    items = select_items(
        {r.name: r.samples for r in runs}, args.min_steps, args.max_per_run, args.seed
    )
    if not items:
        names = ", ".join(r.name for r in runs)
        return nothing_produced("errors", f"no incorrect completion to judge in {names}")
    judge = make_judge(args)
    out: Path = args.output
    out.mkdir(parents=True, exist_ok=True)
    workers = 1 if judge.deterministic else args.workers
    done = judge_items(
        items,
        {r.name: r.problems for r in runs},
        judge,
        taxonomy,
        JudgeCache(out / "judgements.jsonl"),
        args.judge_attempts,
        args.judge_backoff,
        workers,
        progress=not args.quiet,
    )
    grid = np.linspace(0.0, 1.0, 201)
    summary = {
        r.name: summarize_run([i for i in done if i.run == r.name], taxonomy, grid) for r in runs
    }
    write_json(
        out / "errors.json",
        {
            "judge": judge.name,
            "taxonomy": [asdict(t) for t in taxonomy],
            "segmentation": {"min_steps": args.min_steps, "rule": segment_steps.__doc__},
            "runs": summary,
        },
    )
    with open(out / "errors.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            [
                "run",
                "benchmark",
                "problem_id",
                "sample",
                "num_steps",
                "step",
                "relative_position",
                "type",
                "judge_error",
            ]
        )
        for i in done:
            writer.writerow(
                [
                    i.run,
                    i.sample.benchmark,
                    i.sample.problem_id,
                    i.sample.sample,
                    len(i.steps),
                    i.judgement.step if i.judgement else "",
                    i.relative_position if i.judgement else "",
                    i.judgement.type if i.judgement else "",
                    i.error or "",
                ]
            )
    figures, notes = plot_errors(summary, taxonomy, out)
    for name, s in summary.items():
        mean = s["mean_relative_position"]
        print(
            f"{name:<20} incorrect {s['solutions']:>5}  judged {s['judged']:>5}  "
            f"judge failures {s['judge_failures']:>4}  mean position "
            f"{'-' if mean is None else f'{mean:.2f}'}"
        )
    for note in notes:
        print(note)
    drawn = "".join(f", {path.name}" for path in figures)
    print(f"wrote {out / 'errors.json'}, errors.csv{drawn}, judgements.jsonl")
    if not any(i.judgement is not None for i in done):
        first = next(i for i in done if i.error)
        return nothing_produced(
            "errors",
            f"no solution was judged: {len(done)} of {len(done)} failed; the first "
            f"({first.run}, {first.sample.problem_id}, sample {first.sample.sample}): "
            f"{first.error}",
        )
    return 0
