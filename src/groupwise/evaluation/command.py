"""`groupwise eval`: the command line of groupwise.evaluation (flags, presets, model loading,
then `evaluate`); output folder layout in groupwise.evaluation.folder."""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from groupwise.evaluation.config import PRESETS, EvalConfig
from groupwise.evaluation.folder import count_pending
from groupwise.evaluation.results import results_markdown
from groupwise.evaluation.sampling import evaluate

if TYPE_CHECKING:
    from groupwise.data import Problem


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}"
                                         ) from None


def _str_list(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from groupwise.data.prompts import TEMPLATES

    p = parser.add_argument
    p("--model", required=True, help="alias (smollm2-135m-instruct, tiny-random, ...), folder or "
                                     "hub id")
    p("--adapter", default=None,
      help="LoRA adapter: a training run folder (final adapter, else latest checkpoint), a "
           "checkpoint folder or an adapter folder")
    p("--preset", choices=sorted(PRESETS), default="amir",
      help="protocol defaults: amir (paper: 7 benchmarks, n 8, k 1,2,4, T 0.6, 1024 tokens, "
           "amir prompt) or lens (math test, n 16, k 1..16, T 1.0, 4096 tokens, boxed prompt); "
           "explicit flags override")
    p("--benchmarks", type=_str_list, default=None,
      help="comma-separated NAME or NAME:SPLIT (e.g. gsm8k,livemathbench:hard_en)")
    p("--n", type=int, default=None, help="samples per problem")
    p("--k", dest="ks", type=_int_list, default=None, help="comma-separated k of pass@k")
    p("--temperature", type=float, default=None)
    p("--top-p", type=float, default=None)
    p("--max-new-tokens", type=int, default=None)
    p("--prompt", default=None, choices=sorted(TEMPLATES), help="prompt template")
    p("--limit", type=int, default=None, help="first N problems of each benchmark")
    p("--data-dir", default=None, help="benchmark folder (default: $GROUPWISE_DATA)")
    p("--batch-size", type=int, default=64,
      help="completions decoded together; also the unit of saving (default 64)")
    p("--logp-batch-size", type=int, default=8,
      help="sequences per forward pass when scoring mean_logp (default 8)")
    p("--dtype", choices=("float32", "bfloat16"), default="float32")
    p("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p("--seed", type=int, default=0)
    p("--workers", type=int, default=2, help="answer-checking worker processes (default 2)")
    p("--quiet", action="store_true", help="no progress bars")
    p("--output", required=True, type=Path, help="output folder (rerun to resume)")


def config_from_args(args: argparse.Namespace) -> EvalConfig:
    """EvalConfig from the command line: preset defaults, overridden by explicit flags."""
    from groupwise.models import resolve_adapter

    preset = PRESETS[args.preset]
    chosen = {key: getattr(args, key) if getattr(args, key) is not None else preset[key]
              for key in preset}
    adapter = str(resolve_adapter(args.adapter).resolve()) if args.adapter else None
    return EvalConfig(model=args.model, adapter=adapter, limit=args.limit,
                      batch_size=args.batch_size, dtype=args.dtype, seed=args.seed,
                      data_dir=args.data_dir, **chosen)


def load_problems(config: EvalConfig) -> dict[str, list[Problem]]:
    """{spec: problems} for each benchmark spec NAME or NAME:SPLIT, the first `limit` each."""
    from groupwise.data import load_benchmark

    out = {}
    for spec in config.benchmarks:
        name, _, split = spec.partition(":")
        kwargs = {"split": split} if split else {}
        problems = load_benchmark(name, data_dir=config.data_dir, **kwargs)
        ids = [p.id for p in problems]
        if len(set(ids)) != len(ids):
            raise ValueError(f"benchmark {spec}: problem ids are not unique")
        out[spec] = list(problems[: config.limit] if config.limit else problems)
    return out


def run(args: argparse.Namespace) -> int:
    from groupwise.data.prompts import render_prompt
    from groupwise.models import default_device, load_policy
    from groupwise.rewards import check_answers
    from groupwise.rollout import TransformersGenerator
    from groupwise.scoring import rollout_mean_logp

    try:
        config = config_from_args(args)
        problems = load_problems(config)
        pending = count_pending(config, problems, args.output)
    except (ValueError, FileNotFoundError, ImportError) as err:
        raise SystemExit(f"eval: {err}") from err
    generator = prompt_fn = logp_fn = None
    if pending:  # a rerun with everything sampled only rewrites the results: no model needed
        model, tokenizer = load_policy(config.model, config.adapter, dtype=config.dtype,
                                       device=args.device or default_device(), seed=config.seed)
        generator = TransformersGenerator(model, tokenizer, batch_size=config.batch_size)

        def prompt_fn(problem: Problem) -> str:
            return render_prompt(problem, config.prompt, tokenizer)

        logp_fn = partial(rollout_mean_logp, model, batch_size=args.logp_batch_size)

    results = evaluate(
        config, problems, generator, args.output,
        prompt_fn=prompt_fn, logp_fn=logp_fn,
        check_fn=lambda texts, golds: check_answers(texts, golds, workers=args.workers),
        progress=not args.quiet)
    print(results_markdown(results))
    print(f"wrote {args.output / 'results.json'}, results.md, results.png, samples.jsonl")
    return 0
