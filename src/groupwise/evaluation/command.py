"""`groupwise eval`: the command line of groupwise.evaluation (flags, presets, the engine, then
`evaluate`); output folder layout in groupwise.evaluation.folder, engines in
groupwise.evaluation.engines.

Every flag is checked before a model loads or a file is written, and a server (--engine openai)
is contacted before anything is written; a bad flag or an unusable server stops the command
with one line naming the flag or the URL (exit 2). A server that fails for good during the run
stops it with one line (exit 1); the samples so far stay in the folder, and rerunning the same
command resumes.
"""

from __future__ import annotations

import argparse
import os
import sys
import typing
from collections.abc import Callable
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from groupwise.cpu_threads import announce
from groupwise.evaluation.config import (
    DEFAULT_BATCH_SIZES,
    FORMER_GRADINGS,
    PRESETS,
    EvalConfig,
    InvalidSetting,
    ks_problem,
)
from groupwise.evaluation.engines import EngineOptions, open_sampler
from groupwise.evaluation.folder import count_pending
from groupwise.evaluation.results import results_markdown
from groupwise.evaluation.sampling import CheckFn, evaluate

if TYPE_CHECKING:
    from groupwise.data import Problem
    from groupwise.rewards import Verdict


class FlagError(ValueError):
    """A command-line flag with a bad value; the message reads "FLAG: REASON"."""

    def __init__(self, flag: str, reason: str) -> None:
        super().__init__(f"{flag}: {reason}")


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None


def _str_list(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def flag_of(spec: Field) -> str:
    """The command-line flag of an EvalConfig field: its cli "flag", else --NAME-WITH-DASHES."""
    return spec.metadata["cli"].get("flag", "--" + spec.name.replace("_", "-"))


# EvalConfig field -> the flag that sets it
FLAGS = {spec.name: flag_of(spec) for spec in fields(EvalConfig)}
_PRESET_KEYS = {key for preset in PRESETS.values() for key in preset}


def _flag_type(hint: Any) -> Callable[[str], Any] | None:
    """How a flag's text becomes the field's type: int, float, comma-separated tuples."""
    if typing.get_origin(hint) is tuple:
        return _int_list if typing.get_args(hint)[0] is int else _str_list
    kinds = [t for t in (typing.get_args(hint) or (hint,)) if t is not type(None)]
    return kinds[0] if kinds[0] in (int, float) else None


def _add_config_flags(parser: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """One flag per EvalConfig field, generated from its declaration (groupwise.options): its
    doc is the help, its cli metadata the flag, choices, group and default. A flag not given is
    None where a preset or an engine decides the value, else the field's default. Returns the
    flag groups made, by title."""
    hints = typing.get_type_hints(EvalConfig)
    groups: dict[str, argparse._ArgumentGroup] = {}
    for spec in fields(EvalConfig):
        cli = spec.metadata["cli"]
        unset = spec.name in _PRESET_KEYS or spec.default is MISSING
        kwargs: dict[str, Any] = {
            "dest": spec.name,
            "help": spec.metadata["doc"],
            "default": cli.get("default", None if unset else spec.default),
        }
        if "choices" in cli:
            kwargs["choices"] = list(cli["choices"]())
        if "metavar" in cli:
            kwargs["metavar"] = cli["metavar"]
        if "action" in cli:
            kwargs["action"] = cli["action"]
        elif (kind := _flag_type(hints[spec.name])) is not None:
            kwargs["type"] = kind
        where = parser
        if "group" in cli:
            where = groups.setdefault(cli["group"], parser.add_argument_group(cli["group"]))
        where.add_argument(flag_of(spec), **kwargs)
    return groups


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `groupwise eval`: EvalConfig's (generated from its fields), then those of
    the command and the engines that are no setting of the evaluation."""
    groups = _add_config_flags(parser)
    p = parser.add_argument
    p(
        "--regrade",
        action="store_true",
        help="check the completions saved in --output again under --checking, into "
        "--output/regrade-MODE/ (results and verdicts); nothing is sampled, samples.jsonl is "
        "not touched",
    )
    p(
        "--preset",
        choices=sorted(PRESETS),
        default="amir",
        help="protocol defaults: amir (paper: 7 benchmarks, AQUA-RAT as the official code shows "
        "it, n 8, k 1,2,4, T 0.6, 1024 tokens, amir prompt) or lens (math500 with pass@k per "
        "level and for Levels 4-5, n 16, k 1..16, T 1.0, top-p 1.0, 4096 tokens, boxed "
        "prompt); explicit flags override",
    )
    p("--grading", default=None, choices=list(FORMER_GRADINGS), help=argparse.SUPPRESS)
    p(
        "--logp-batch-size",
        type=int,
        default=None,
        help="transformers engine: sequences per forward pass when scoring mean_logp (default 8)",
    )
    p(
        "--device",
        default=None,
        help="transformers engine: cpu or cuda (default: cuda when available)",
    )
    server = groups["--engine openai"]
    server.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        metavar="NAME",
        help="environment variable holding the API key (default "
        "OPENAI_API_KEY; unset: no key sent)",
    )
    server.add_argument(
        "--concurrency", type=int, default=16, help="requests in flight at once (default 16)"
    )
    server.add_argument(
        "--retries",
        type=int,
        default=5,
        help="further tries of a request after HTTP 408/409/429/5xx, a timeout "
        "or a lost connection, with exponential backoff (default 5)",
    )
    server.add_argument(
        "--request-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="seconds to wait for one response (default 600)",
    )
    vllm = parser.add_argument_group("--engine vllm")
    vllm.add_argument(
        "--vllm-arg",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="a vllm.LLM argument, VALUE read as JSON where it parses "
        "(repeatable): tensor_parallel_size=8, gpu_memory_utilization=0.9, "
        "max_model_len=8192, ...",
    )
    p("--workers", type=int, default=2, help="answer-checking worker processes (default 2)")
    p("--quiet", action="store_true", help="no progress bars")
    p("--output", required=True, type=Path, help="output folder (rerun to resume)")


def config_from_args(args: argparse.Namespace) -> EvalConfig:
    """EvalConfig from the command line: preset defaults, overridden by explicit flags.
    Raises FlagError naming the flag of the first bad value."""
    if args.engine != "openai":
        _take_run_settings(args)
    _check_ks(args)
    names = [("--model", args.model)] if args.engine != "openai" else []
    from groupwise.data import BenchmarkSpec
    from groupwise.data.prompts import TEMPLATES
    from groupwise.models import check_model_name, resolve_adapter
    from groupwise.rollout.openai_engine import check_base_url

    for flag, name in [*names, ("--tokenizer", args.tokenizer)]:
        try:
            if name is not None:
                check_model_name(name)
        except ValueError as err:
            raise FlagError(flag, str(err)) from None
    try:
        adapter = str(resolve_adapter(args.adapter).resolve()) if args.adapter else None
    except FileNotFoundError as err:
        raise FlagError("--adapter", str(err)) from None
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        raise FlagError("--data-dir", f"no folder {args.data_dir}")
    base_url = args.base_url
    if args.engine == "openai" and base_url is None:
        raise FlagError(
            "--base-url",
            "the openai engine needs the server's API root, e.g. http://127.0.0.1:8000/v1",
        )
    try:
        base_url = check_base_url(base_url) if base_url is not None else None
    except ValueError as err:
        raise FlagError("--base-url", str(err)) from None
    preset = PRESETS[args.preset]
    given = {**vars(args), "checking": _checking_flag(args)}
    chosen = {key: given[key] if given[key] is not None else preset[key] for key in preset}
    for spec in chosen["benchmarks"]:
        try:
            BenchmarkSpec.parse(spec)
        except ValueError as err:
            raise FlagError("--benchmarks", str(err)) from None
    api = args.api
    if args.engine == "openai" and api is None:
        chat = chosen["prompt"] in TEMPLATES and TEMPLATES[chosen["prompt"]].chat
        api = "chat" if chat else "completions"
    batch_size = (
        args.batch_size if args.batch_size is not None else DEFAULT_BATCH_SIZES.get(args.engine, 64)
    )
    try:
        return EvalConfig(
            model=args.model,
            adapter=adapter,
            limit=args.limit,
            batch_size=batch_size,
            dtype=args.dtype,
            seed=args.seed,
            data_dir=args.data_dir,
            engine=args.engine,
            api=api,
            stop=tuple(args.stop or ()),
            tokenizer=args.tokenizer,
            base_url=base_url,
            **chosen,
        )
    except InvalidSetting as err:
        raise FlagError(FLAGS[err.name], err.reason) from None


def _check_ks(args: argparse.Namespace) -> None:
    """--k against --n (each as given, else the preset's), before anything heavy is imported:
    FlagError as EvalConfig words it."""
    preset = PRESETS[args.preset]
    n = args.n if args.n is not None else preset["n"]
    ks = args.ks if args.ks is not None else preset["ks"]
    reason = ks_problem(ks, n)
    if reason is not None:
        raise FlagError("--k", reason)


def _take_run_settings(args: argparse.Namespace) -> None:
    """--model naming a training run: its weights, and its settings for the flags not given
    (groupwise.evaluation.trained), printed; args is changed in place."""
    from groupwise.evaluation.trained import apply_run, trained_model

    try:
        trained = trained_model(args.model)
    except (FileNotFoundError, ValueError) as err:
        raise FlagError("--model", str(err)) from None
    if trained is None:
        return
    if args.adapter is not None:
        raise FlagError(
            "--adapter",
            f"--model {args.model} is a training run, which gives the weights; drop --adapter",
        )
    if args.grading is not None:  # the former name of --checking counts as given
        args.checking, args.grading = _checking_flag(args), None
    n = args.n if args.n is not None else PRESETS[args.preset]["n"]
    try:
        lines = apply_run(args, trained, n)
    except ValueError as err:
        raise FlagError("--benchmarks", str(err)) from None
    for line in lines:
        print(f"groupwise eval: {line}", file=sys.stderr)


def _regrade(args: argparse.Namespace) -> int:
    """--regrade: the saved completions of --output checked under --checking."""
    from groupwise.evaluation.regrade import regrade

    if args.checking is None:
        print("groupwise eval: --regrade needs --checking MODE", file=sys.stderr)
        return 2
    try:
        results, target = regrade(args.output, args.checking, args.workers)
    except (ValueError, FileNotFoundError) as err:
        print(f"groupwise eval: {err}", file=sys.stderr)
        return 2
    print(results_markdown(results))
    print(
        f"re-graded under --checking {args.checking}: wrote {target}/results.json, results.md, "
        "results.png, verdicts.jsonl"
    )
    return 0


def _check_local_names(names: list[tuple[str, str | None]]) -> None:
    """A model name that reads as a local path but names no folder, refused before torch and
    transformers load (seconds on a busy machine): FlagError naming the flag."""
    from groupwise.hub import names_a_path

    for flag, name in names:
        if name is not None and names_a_path(name) and not Path(name).expanduser().is_dir():
            raise FlagError(flag, f"unknown model {name!r}: no such folder")


def check_run_flags(args: argparse.Namespace, config: EvalConfig) -> EngineOptions:
    """Check the flags that are not settings of the evaluation: how its engine runs."""
    from groupwise.models import resolve_device
    from groupwise.rollout.vllm_engine import parse_engine_args

    for flag, value, low in (
        ("--logp-batch-size", args.logp_batch_size, 1),
        ("--workers", args.workers, 1),
        ("--concurrency", args.concurrency, 1),
        ("--retries", args.retries, 0),
    ):
        if value is not None and value < low:
            raise FlagError(flag, f"must be an integer >= {low}, got {value}")
    if not args.request_timeout > 0:
        raise FlagError("--request-timeout", f"must be > 0 seconds, got {args.request_timeout}")
    engine_only = {
        "--device": (args.device, "transformers"),
        "--logp-batch-size": (args.logp_batch_size, "transformers"),
        "--vllm-arg": (args.vllm_arg, "vllm"),
    }
    for flag, (value, engine) in engine_only.items():
        if value is not None and config.engine != engine:
            raise FlagError(flag, f"applies to --engine {engine}, not {config.engine}")
    if args.output.exists() and not args.output.is_dir():
        raise FlagError("--output", f"{args.output} is a file, not a folder")
    try:
        device = resolve_device(args.device) if config.engine == "transformers" else "cpu"
    except ValueError as err:
        raise FlagError("--device", str(err)) from None
    try:
        vllm_args = parse_engine_args(args.vllm_arg or [])
    except ValueError as err:
        raise FlagError("--vllm-arg", str(err)) from None
    return EngineOptions(
        device=device,
        logp_batch_size=args.logp_batch_size or 8,
        api_key=os.environ.get(args.api_key_env) or None,
        concurrency=args.concurrency,
        retries=args.retries,
        timeout=args.request_timeout,
        vllm_args=vllm_args,
        progress=not args.quiet,
    )


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


def _checking_flag(args: argparse.Namespace) -> str | None:
    """--checking, or the checking mode named by its former flag --grading (with a note)."""
    if args.grading is None:
        return args.checking
    if args.checking is not None:
        raise FlagError("--grading", "is the former name of --checking: give one of them")
    mode = FORMER_GRADINGS[args.grading]
    print(f"groupwise eval: --grading {args.grading} is now --checking {mode}", file=sys.stderr)
    return mode


def answer_checker(config: EvalConfig, workers: int) -> CheckFn:
    """How the completions' answers are checked: groupwise.rewards.check_answers in `workers`
    processes, in the checking mode config.checking."""
    from groupwise.rewards import check_answers

    mode = config.checking

    def check(texts: list[str], golds: list[str]) -> list[Verdict]:
        return check_answers(texts, golds, workers=workers, mode=mode)

    return check


def run(args: argparse.Namespace) -> int:
    if args.regrade:
        return _regrade(args)
    if args.model is None:
        print("groupwise eval: --model is required (or --regrade)", file=sys.stderr)
        return 2
    try:  # before torch loads: a mistyped folder or a k above n is refused at once
        served = args.engine == "openai"  # --model is then the name the server gives it
        _check_local_names([("--model", None if served else args.model)])
        _check_local_names([("--tokenizer", args.tokenizer)])
        config = config_from_args(args)
    except (ValueError, FileNotFoundError, ImportError) as err:
        print(f"groupwise eval: {err}", file=sys.stderr)
        return 2
    from groupwise.rollout.openai_engine import ServerError

    if args.quiet:
        from groupwise.models import hide_loading_bars

        hide_loading_bars()
    try:
        options = check_run_flags(args, config)
        problems = load_problems(config)
        pending = count_pending(config, problems, args.output)
        # A rerun with everything sampled only rewrites the results: no engine needed.
        sampler, prompt_fn = open_sampler(config, options) if pending else (None, None)
    except (ValueError, FileNotFoundError, ImportError, ServerError) as err:
        print(f"groupwise eval: {err}", file=sys.stderr)  # a user error: one line, exit 2
        return 2
    announce("groupwise eval")
    try:
        results = evaluate(
            config,
            problems,
            sampler,
            args.output,
            prompt_fn=prompt_fn,
            check_fn=answer_checker(config, args.workers),
            progress=not args.quiet,
        )
    except ServerError as err:
        print(
            f"groupwise eval: {err}; the samples so far are in {args.output}: rerun the "
            "same command to resume",
            file=sys.stderr,
        )
        return 1
    print(results_markdown(results))
    calibrated = any(isinstance(v, dict) and "calibration" in v for v in results.values())
    figures = "results.png, calibration.png" if calibrated else "results.png"
    print(f"wrote {args.output / 'results.json'}, results.md, {figures}, samples.jsonl")
    return 0
