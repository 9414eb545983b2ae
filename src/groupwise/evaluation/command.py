"""`groupwise eval`: the command line of groupwise.evaluation (flags, presets, model loading,
then `evaluate`); output folder layout in groupwise.evaluation.folder.

Every flag is checked before a model loads or a file is written; a bad one stops the command
with one line naming the flag and its valid range.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from groupwise.evaluation.config import GRADINGS, PRESETS, EvalConfig, InvalidSetting
from groupwise.evaluation.folder import count_pending
from groupwise.evaluation.results import results_markdown
from groupwise.evaluation.sampling import CheckFn, evaluate

if TYPE_CHECKING:
    from groupwise.data import Problem
    from groupwise.rewards import Verdict

# EvalConfig field -> the flag that sets it
FLAGS = {"model": "--model", "adapter": "--adapter", "benchmarks": "--benchmarks", "n": "--n",
         "ks": "--k", "temperature": "--temperature", "top_p": "--top-p",
         "max_new_tokens": "--max-new-tokens", "prompt": "--prompt", "grading": "--grading",
         "limit": "--limit",
         "batch_size": "--batch-size", "dtype": "--dtype", "seed": "--seed",
         "data_dir": "--data-dir"}


class FlagError(ValueError):
    """A command-line flag with a bad value; the message reads "FLAG: REASON"."""

    def __init__(self, flag: str, reason: str) -> None:
        super().__init__(f"{flag}: {reason}")


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
      help="protocol defaults: amir (paper: 7 benchmarks, AQUA-RAT as the official code shows "
           "it, n 8, k 1,2,4, T 0.6, 1024 tokens, amir prompt) or lens (math500 with pass@k per "
           "level and for Levels 4-5, n 16, k 1..16, T 1.0, top-p 1.0, 4096 tokens, boxed "
           "prompt); explicit flags override")
    p("--benchmarks", type=_str_list, default=None,
      help="comma-separated NAME[:SPLIT][@KEY=VALUE...] (e.g. gsm8k,livemathbench:hard_en,"
           "aqua@format=official)")
    p("--n", type=int, default=None, help="samples per problem")
    p("--k", dest="ks", type=_int_list, default=None, help="comma-separated k of pass@k")
    p("--temperature", type=float, default=None)
    p("--top-p", type=float, default=None)
    p("--max-new-tokens", type=int, default=None)
    p("--prompt", default=None, choices=sorted(TEMPLATES), help="prompt template")
    p("--grading", default=None, choices=list(GRADINGS),
      help="how answers are checked: official (AMIR-GRPO's grader: no <answer> block, no "
           "credit; amir preset), lenient (ours: boxes, '#### N', 'the answer is' anywhere), "
           "math_verify (Math-Verify on the whole completion; lens preset)")
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
    """EvalConfig from the command line: preset defaults, overridden by explicit flags.
    Raises FlagError naming the flag of the first bad value."""
    from groupwise.data import BenchmarkSpec
    from groupwise.models import check_model_name, resolve_adapter

    try:
        check_model_name(args.model)
    except ValueError as err:
        raise FlagError("--model", str(err)) from None
    try:
        adapter = str(resolve_adapter(args.adapter).resolve()) if args.adapter else None
    except FileNotFoundError as err:
        raise FlagError("--adapter", str(err)) from None
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        raise FlagError("--data-dir", f"no folder {args.data_dir}")
    preset = PRESETS[args.preset]
    chosen = {key: getattr(args, key) if getattr(args, key) is not None else preset[key]
              for key in preset}
    for spec in chosen["benchmarks"]:
        try:
            BenchmarkSpec.parse(spec)
        except ValueError as err:
            raise FlagError("--benchmarks", str(err)) from None
    try:
        return EvalConfig(model=args.model, adapter=adapter, limit=args.limit,
                          batch_size=args.batch_size, dtype=args.dtype, seed=args.seed,
                          data_dir=args.data_dir, **chosen)
    except InvalidSetting as err:
        raise FlagError(FLAGS[err.name], err.reason) from None


def check_run_flags(args: argparse.Namespace) -> str:
    """Check the flags that are not settings of the evaluation; return the device to use."""
    from groupwise.models import resolve_device

    for flag, value in (("--logp-batch-size", args.logp_batch_size),
                        ("--workers", args.workers)):
        if value < 1:
            raise FlagError(flag, f"must be an integer >= 1, got {value}")
    if args.output.exists() and not args.output.is_dir():
        raise FlagError("--output", f"{args.output} is a file, not a folder")
    try:
        return resolve_device(args.device)
    except ValueError as err:
        raise FlagError("--device", str(err)) from None


def load_problems(config: EvalConfig) -> dict[str, list[Problem]]:
    """{spec: problems} for each benchmark spec of the config, the first `limit` of each."""
    from groupwise.data import BenchmarkSpec

    out = {}
    for spec in config.benchmarks:
        try:
            problems = BenchmarkSpec.parse(spec).load(config.data_dir)
        except (ValueError, FileNotFoundError, ImportError) as err:
            raise FlagError("--benchmarks", f"{spec}: {err}") from err
        ids = [p.id for p in problems]
        if len(set(ids)) != len(ids):
            raise ValueError(f"benchmark {spec}: problem ids are not unique")
        out[spec] = list(problems[: config.limit] if config.limit else problems)
    return out


def answer_checker(config: EvalConfig, workers: int) -> CheckFn:
    """How the completions' answers are checked: groupwise.rewards.check_answers in `workers`
    processes, in the checking mode of config.grading (GRADINGS)."""
    from groupwise.rewards import check_answers

    mode = GRADINGS[config.grading]

    def check(texts: list[str], golds: list[str]) -> list[Verdict]:
        return check_answers(texts, golds, workers=workers, mode=mode)

    return check


def run(args: argparse.Namespace) -> int:
    from groupwise.data.prompts import render_prompt
    from groupwise.models import load_policy
    from groupwise.rollout import TransformersGenerator
    from groupwise.scoring import rollout_mean_logp

    try:
        config = config_from_args(args)
        device = check_run_flags(args)
        problems = load_problems(config)
        pending = count_pending(config, problems, args.output)
    except (ValueError, FileNotFoundError, ImportError) as err:
        print(f"groupwise eval: {err}", file=sys.stderr)  # a user error: one line, exit 2
        return 2
    generator = prompt_fn = logp_fn = None
    if pending:  # a rerun with everything sampled only rewrites the results: no model needed
        model, tokenizer = load_policy(config.model, config.adapter, dtype=config.dtype,
                                       device=device, seed=config.seed)
        generator = TransformersGenerator(model, tokenizer, batch_size=config.batch_size)

        def prompt_fn(problem: Problem) -> str:
            return render_prompt(problem, config.prompt, tokenizer)

        logp_fn = partial(rollout_mean_logp, model, batch_size=args.logp_batch_size)

    results = evaluate(config, problems, generator, args.output, prompt_fn=prompt_fn,
                       logp_fn=logp_fn, check_fn=answer_checker(config, args.workers),
                       progress=not args.quiet)
    print(results_markdown(results))
    print(f"wrote {args.output / 'results.json'}, results.md, results.png, samples.jsonl")
    return 0
