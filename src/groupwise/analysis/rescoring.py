"""Log-probs of saved completions recomputed under a model, on any engine: what the analyses
that need log-probs of given text (perplexity, preference margin) use instead of the saved
`mean_logp` when asked (`--recompute`: each run's own model from its config.json; `--model`:
one fixed model for every run).

The text is turned into token ids here, as generation had it: the prompt rendered again with
the run's template and the scoring tokenizer's chat template, the completion tokenized without
special tokens and followed by the EOS token when it was not truncated (a completion ended by
a stop string gets the EOS too: the stop string itself is not in the saved text). Re-tokenizing
decoded text can differ from the sampled ids in rare cases (e.g. merges across a special
token), so a recomputed value is close to, not always equal to, the saved one.

Engines (`--engine`): transformers (groupwise.completion_logprobs.ModelScorer, a forward
pass), vllm (vLLM's prompt log-probs, groupwise.rollout.VLLMEngine) and openai (a server's
echoed prompt log-probs on the completions endpoint, groupwise.rollout.OpenAIEngine; the served
model's tokenizer is named by --tokenizer). A server that does not return log-probs of given
text is refused in one line before anything is scored.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from groupwise.evaluation.config import ENGINES
from groupwise.records import ProblemKey, Sample, SavedProblem

if TYPE_CHECKING:
    from groupwise.analysis.runs import EvalRun
    from groupwise.rollout import TokenScorer

# A short text whose token ids the server must read back as this text (tokenizer check).
PROBE_TEXT = "The answer is 42."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that choose where log-probs come from (saved, or recomputed on an engine)."""
    group = parser.add_argument_group("log-probs recomputed (instead of the saved mean_logp)")
    add = group.add_argument
    add(
        "--recompute",
        action="store_true",
        help="score completions again under each run's own model (its saved config: model, "
        "adapter, dtype, prompt) instead of the saved values",
    )
    add(
        "--model",
        default=None,
        help="score every run's completions under this one model instead (with --engine "
        "openai: the served model name)",
    )
    add("--adapter", default=None, help="adapter for --model (run or folder)")
    add(
        "--engine",
        choices=ENGINES,
        default="transformers",
        help="where the log-probs come from: transformers (a forward pass), vllm (vLLM in "
        "process) or openai (a server's echoed prompt log-probs at --base-url)",
    )
    add(
        "--dtype",
        default=None,
        choices=("float32", "bfloat16", "float16", "auto"),
        help="dtype for scoring (default: the run's, else float32)",
    )
    add("--device", default=None, help="transformers: cpu or cuda (default: cuda if present)")
    add("--batch-size", type=int, default=8, help="transformers: sequences per forward pass")
    add(
        "--base-url",
        default=None,
        help="openai: the server's API root, e.g. http://127.0.0.1:8000/v1",
    )
    add(
        "--tokenizer",
        default=None,
        help="openai: the served model's tokenizer (alias, folder or hub id), needed to render "
        "prompts and send token ids",
    )
    add(
        "--api-key-env",
        default="OPENAI_API_KEY",
        metavar="NAME",
        help="openai: environment variable holding the API key",
    )
    add("--concurrency", type=int, default=16, help="openai: requests in flight at once")
    add(
        "--vllm-arg",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="vllm: a vllm.LLM argument (repeatable), VALUE read as JSON where it parses",
    )


def completion_token_ids(
    tokenizer: Any,
    samples: Sequence[Sample],
    problems: Mapping[ProblemKey, SavedProblem],
    template: str,
) -> tuple[list[list[int]], list[list[int]]]:
    """(prompt ids, completion ids) of each sample, as generation had them (module docstring)."""
    from groupwise.data import Problem
    from groupwise.data.prompts import render_prompt

    missing = [s.key for s in samples if s.key not in problems]
    if missing:
        raise ValueError(
            f"no saved problem text for {missing[0]} (problems.jsonl missing or "
            "incomplete); cannot render its prompt"
        )
    prompts, completions = [], []
    for s in samples:
        p = problems[s.key]
        problem = Problem(id=p.id, question=p.question, answer=p.answer, choices=p.choices)
        prompts.append(
            list(
                tokenizer(
                    render_prompt(problem, template, tokenizer), add_special_tokens=False
                ).input_ids
            )
        )
        ids = list(tokenizer(s.completion, add_special_tokens=False).input_ids)
        completions.append(ids if s.truncated else [*ids, tokenizer.eos_token_id])
    return prompts, completions


def rescore(
    scorer: TokenScorer,
    tokenizer: Any,
    samples: Sequence[Sample],
    problems: Mapping[ProblemKey, SavedProblem],
    template: str,
) -> list[float | None]:
    """mean_logp of saved completions recomputed by `scorer` (None for empty ones)."""
    if not samples:
        return []
    prompts, completions = completion_token_ids(tokenizer, samples, problems, template)
    return scorer.mean_logp(prompts, completions)


def open_scorer(
    args: argparse.Namespace, model: str, adapter: str | None, dtype: str
) -> tuple[TokenScorer, Any]:
    """(scorer, tokenizer) for `model` (+ adapter) on args.engine. ValueError, ImportError or
    groupwise.rollout.ServerError (one line) when it cannot be had."""
    from groupwise.models import resolve_adapter

    adapter = str(resolve_adapter(adapter).resolve()) if adapter else None
    if args.engine == "transformers":
        from groupwise.completion_logprobs import ModelScorer
        from groupwise.models import default_device, load_policy

        policy, tokenizer = load_policy(
            model, adapter, dtype=dtype, device=args.device or default_device()
        )
        pad = (
            tokenizer.pad_token_id
            if tokenizer.pad_token_id is not None
            else (tokenizer.eos_token_id)
        )
        return ModelScorer(policy, pad, args.batch_size), tokenizer
    if args.engine == "vllm":
        from groupwise.rollout import VLLMEngine
        from groupwise.rollout.vllm_engine import parse_engine_args

        try:
            engine_args = parse_engine_args(args.vllm_arg or [])
        except ValueError as err:
            raise ValueError(f"--vllm-arg: {err}") from None
        engine = VLLMEngine(model, adapter=adapter, dtype=dtype, engine_args=engine_args)
        return engine, engine.tokenizer
    from groupwise.evaluation.engines import load_tokenizer
    from groupwise.rollout import OpenAIEngine

    if adapter is not None:
        raise ValueError(
            "--adapter: a server serves adapters under their own model names; name it with --model"
        )
    if args.base_url is None or args.tokenizer is None:
        raise ValueError(
            "--engine openai needs --base-url (the server) and --tokenizer (the "
            "served model's tokenizer, to send token ids)"
        )
    engine = OpenAIEngine(
        args.base_url,
        model,
        api="completions",
        api_key=os.environ.get(args.api_key_env) or None,
        concurrency=args.concurrency,
    )
    tokenizer = load_tokenizer(args.tokenizer)
    engine.check_scoring(tokenizer(PROBE_TEXT, add_special_tokens=False).input_ids, PROBE_TEXT)
    return engine, tokenizer


def recomputing(args: argparse.Namespace) -> bool:
    """Whether the options ask for recomputed log-probs (else the saved mean_logp is used)."""
    return args.model is not None or args.recompute


def _scored(
    args: argparse.Namespace,
    run: EvalRun,
    samples: list[Sample],
    cache: dict[tuple[str, str | None], tuple[Any, Any]],
) -> list[float | None]:
    """mean_logp for `samples` of `run`, recomputed as the options ask. `cache` keeps the one
    scorer in use, keyed by (model, adapter)."""
    model = args.model or run.config.get("model")
    adapter = args.adapter if args.model else run.config.get("adapter")
    if not model:
        raise ValueError(f"run {run.name!r}: its config.json names no model; use --model")
    if (model, adapter) not in cache:
        cache.clear()  # one model at a time
        cache[(model, adapter)] = open_scorer(
            args, model, adapter, args.dtype or run.config.get("dtype", "float32")
        )
    scorer, tokenizer = cache[(model, adapter)]
    return rescore(scorer, tokenizer, samples, run.problems, run.config.get("prompt", "amir"))


def scored_groups(
    args: argparse.Namespace,
    runs: Sequence[EvalRun],
    keys: Sequence[Sequence[ProblemKey]],
    analysis: str,
) -> list[dict[ProblemKey, list[Sample]]]:
    """For each run, the samples of its problems `keys[i]` with mean_logp as the options ask:
    saved, or recomputed (then in place of the saved value). A scorer that cannot be had
    (missing vLLM, a server without log-probs of given text, a model that does not load)
    stops the command with one line naming the analysis."""
    from dataclasses import replace

    from groupwise.rollout import ServerError

    out = []
    cache: dict[tuple[str, str | None], tuple[Any, Any]] = {}
    for run, wanted in zip(runs, keys, strict=True):
        groups = run.by_problem()
        samples = [s for key in wanted for s in groups[key]]
        if recomputing(args):
            try:
                values = _scored(args, run, samples, cache)
            except (ValueError, ImportError, FileNotFoundError, ServerError) as err:
                raise SystemExit(f"groupwise analyze {analysis}: {err}") from None
            samples = [replace(s, mean_logp=v) for s, v in zip(samples, values, strict=True)]
        scored: dict[ProblemKey, list[Sample]] = {key: [] for key in wanted}
        for s in samples:
            scored[s.key].append(s)
        out.append(scored)
    return out


def source_label(args: argparse.Namespace) -> str:
    """Where the values came from, as the analyses' JSON records it."""
    where = "" if args.engine == "transformers" else f" on {args.engine}"
    if args.model:
        return f"model {args.model}{where}"
    return f"recomputed under each run's model{where}" if args.recompute else "saved mean_logp"
