"""`groupwise eval`: sample n completions per problem, check them, report unbiased pass@k.

REFERENCE.md "Evaluation of AMIR-GRPO" (the default protocol: n = 8, k in {1, 2, 4}, temperature
0.6, top-p 1.0, 1024 new tokens, the AMIR prompt) and section 4 (pass@k with a 95 % bootstrap
interval over problems). `--preset lens` is the LENS protocol (section 3: MATH test, n = 16,
k up to 16, temperature 1.0, 4096 new tokens, a plain boxed-answer prompt).

Output folder:
- config.json: the settings; a rerun into the same folder resumes, and refuses if a setting
  that changes the samples differs (`EvalConfig.SAMPLE_KEYS`).
- samples.jsonl: one line per completion (`groupwise.analysis.samples.Sample`), appended and
  flushed after every generate call, so a crash loses at most the batch in flight. A problem is
  done when all n of its samples are there; a rerun samples only the others.
- problems.jsonl: question and gold of every evaluated problem (for the analyses).
- results.json / results.md / results.png: pass@k per benchmark, also printed.

`mean_logp` of each sample is the mean token log-probability of the completion under the model
that generated it, from a separate forward pass over prompt + completion at temperature 1, i.e.
the raw model distribution (not the tempered one it was sampled from).
"""

from __future__ import annotations

import argparse
import json
import math
import warnings
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from groupwise.analysis.samples import (
    CONFIG_FILE,
    PROBLEMS_FILE,
    SAMPLES_FILE,
    Sample,
    SavedProblem,
    group_by_problem,
    read_jsonl,
    read_problems,
    read_samples,
    write_json,
    write_problems,
)

if TYPE_CHECKING:
    from groupwise.data import Problem
    from groupwise.rewards import Verdict
    from groupwise.rollout import Generator, Rollouts

PAPER_BENCHMARKS = ("gsm8k", "aime25", "olympiadbench", "amc23", "minerva", "aqua",
                    "livemathbench:AMC_en")
# Preset -> defaults; explicit command-line flags override them.
PRESETS: dict[str, dict[str, Any]] = {
    "amir": {"benchmarks": PAPER_BENCHMARKS, "n": 8, "ks": (1, 2, 4), "temperature": 0.6,
             "top_p": 1.0, "max_new_tokens": 1024, "prompt": "amir"},
    "lens": {"benchmarks": ("math:test",), "n": 16, "ks": (1, 2, 4, 8, 16), "temperature": 1.0,
             "top_p": 1.0, "max_new_tokens": 4096, "prompt": "boxed"},
}
MEAN_LOGP_NOTE = ("mean_logp: mean token log-prob of the completion under the generating model, "
                  "forward pass over prompt + completion at temperature 1 (raw distribution)")


class ResumeMismatch(ValueError):
    """An output folder holds samples made with settings that differ from the requested ones."""


@dataclass(frozen=True)
class EvalConfig:
    """The settings of one evaluation (saved as config.json in its folder).

    batch_size: completions decoded together; one generate call (and one flush of
    samples.jsonl) covers max(1, batch_size // n) problems.
    """

    model: str
    adapter: str | None = None
    benchmarks: tuple[str, ...] = PAPER_BENCHMARKS
    n: int = 8
    ks: tuple[int, ...] = (1, 2, 4)
    temperature: float = 0.6
    top_p: float = 1.0
    max_new_tokens: int = 1024
    prompt: str = "amir"
    limit: int | None = None
    batch_size: int = 64
    dtype: str = "float32"
    seed: int = 0
    data_dir: str | None = None

    # Settings that change what is sampled: a resumed run must keep them.
    SAMPLE_KEYS = ("model", "adapter", "n", "temperature", "top_p", "max_new_tokens", "prompt",
                   "dtype", "seed")

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        bad = [k for k in self.ks if not 1 <= k <= self.n]
        if not self.ks or bad:
            raise ValueError(f"every k must lie in 1..n={self.n}; got k={list(self.ks)}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if not self.benchmarks:
            raise ValueError("no benchmarks given")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in fields(self)}

    def check_resumable(self, saved: Mapping[str, Any], where: Path) -> None:
        """Raise ResumeMismatch naming every sample-changing setting that differs from `saved`."""
        mine = self.to_dict()
        diffs = [f"{k}: saved {saved.get(k)!r}, now {mine[k]!r}" for k in self.SAMPLE_KEYS
                 if saved.get(k) != mine[k]]
        if diffs:
            raise ResumeMismatch(f"{where} holds samples made with other settings ("
                             + "; ".join(diffs) + "); use a new --output folder or the same "
                             "settings to resume")


def problems_per_call(config: EvalConfig) -> int:
    return max(1, config.batch_size // config.n)


def chunk_seed(seed: int, benchmark: str, chunk: int) -> int:
    """Sampling seed of one generate call: fixed by (seed, benchmark, chunk index), so a
    resumed run samples a chunk exactly as an uninterrupted one would."""
    return (seed * 1_000_003 + zlib.crc32(f"{benchmark}#{chunk}".encode())) % (2**31)


def _complete_problems(output_dir: Path, n: int
                       ) -> tuple[dict[tuple[str, str], list[Sample]], bool]:
    """The complete problems of output_dir/samples.jsonl (exactly the sample indices 0..n-1),
    and whether the file holds anything else (incomplete problems, a torn last line)."""
    path = output_dir / SAMPLES_FILE
    if not path.is_file():
        return {}, False
    rows, torn = read_jsonl(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the torn tail is reported through `torn`
        groups = group_by_problem(read_samples(path))
    done = {k: g for k, g in groups.items() if [s.sample for s in g] == list(range(n))}
    return done, torn or sum(len(g) for g in done.values()) != len(rows)


def load_done(output_dir: Path, n: int) -> dict[tuple[str, str], list[Sample]]:
    """Samples of the problems already complete in output_dir/samples.jsonl.

    A problem is complete when it has exactly the sample indices 0..n-1. Incomplete problems
    and a torn last line (crash mid-write) are dropped by rewriting the file atomically.
    """
    done, stray = _complete_problems(output_dir, n)
    if stray:
        path = output_dir / SAMPLES_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(s.to_json() + "\n" for g in done.values() for s in g),
                       encoding="utf-8")
        tmp.replace(path)
    return done


def check_folder(config: EvalConfig, output_dir: Path) -> None:
    """Raise ResumeMismatch unless output_dir is new or holds samples made with `config`'s
    sample-changing settings."""
    config_path = output_dir / CONFIG_FILE
    if config_path.is_file():
        config.check_resumable(json.loads(config_path.read_text()), output_dir)
    elif (output_dir / SAMPLES_FILE).is_file():
        raise ResumeMismatch(f"{output_dir} has {SAMPLES_FILE} but no {CONFIG_FILE}: cannot "
                             "tell how its samples were made; use a new --output folder")


def count_pending(config: EvalConfig, problems: Mapping[str, Sequence[Problem]],
                  output_dir: Path) -> int:
    """How many problems still need sampling in output_dir (checks the folder first)."""
    check_folder(config, output_dir)
    done, _ = _complete_problems(output_dir, config.n)
    return sum((b, p.id) not in done for b, items in problems.items() for p in items)


def _prepare_folder(config: EvalConfig, output_dir: Path,
                    problems: Mapping[str, Sequence[Problem]]) -> None:
    check_folder(config, output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_json(output_dir / CONFIG_FILE, {**config.to_dict(), "note": MEAN_LOGP_NOTE})
    saved = read_problems(output_dir / PROBLEMS_FILE) if (
        output_dir / PROBLEMS_FILE).is_file() else {}
    for bench, items in problems.items():
        for p in items:
            saved[(bench, p.id)] = SavedProblem(bench, p.id, p.question, p.answer,
                                                list(p.choices) if p.choices else None)
    write_problems(output_dir / PROBLEMS_FILE, saved.values())


def score_rollouts(bench: str, chunk: Sequence[Problem], rollouts: Rollouts,
                   verdicts: Sequence[Verdict], mean_logp: torch.Tensor | None) -> list[Sample]:
    """The Sample records of one generate call (group-major: n rows per problem)."""
    from groupwise.rewards import parse_confidence

    n = rollouts.group_size
    lengths = rollouts.completion_lengths.tolist()
    truncated = rollouts.truncated.tolist()
    logps = mean_logp.tolist() if mean_logp is not None else [None] * len(rollouts)
    out = []
    for row, text in enumerate(rollouts.texts):
        problem = chunk[row // n]
        logp = logps[row]
        out.append(Sample(
            benchmark=bench, problem_id=problem.id, sample=row % n, completion=text,
            extracted=verdicts[row].extracted, verdict=verdicts[row].status,
            tokens=int(lengths[row]), truncated=bool(truncated[row]),
            mean_logp=None if logp is None or math.isnan(logp) or lengths[row] == 0 else logp,
            confidence=parse_confidence(text), gold=problem.answer))
    return out


def evaluate(config: EvalConfig, problems: Mapping[str, Sequence[Problem]],
             generator: Generator | None, output_dir: str | Path, *,
             prompt_fn: Callable[[Problem], str] | None,
             logp_fn: Callable[[Rollouts], torch.Tensor] | None = None,
             check_fn: Callable[[list[str], list[str]], list[Verdict]] | None = None,
             progress: bool = True) -> dict[str, Any]:
    """Sample, check and save n completions for every problem not yet done; return results.

    problems: {benchmark: problems}, the keys as they appear in samples and results.
    generator: any Generator (the tests inject a fake one); prompt_fn renders a problem's
        prompt; logp_fn gives mean_logp [N*n] of a Rollouts (None: not computed); check_fn
        turns (completions, golds) into Verdicts (default: groupwise.rewards.check_answers).
    generator and prompt_fn may be None when nothing is left to sample (a rerun that only
    rewrites the results).
    Returns the results dict written to results.json (see `results_table`).
    """
    from tqdm import tqdm

    from groupwise.rollout import SamplingParams

    if check_fn is None:
        from groupwise.rewards import check_answers

        check_fn = check_answers
    output_dir = Path(output_dir)
    _prepare_folder(config, output_dir, problems)
    done = load_done(output_dir, config.n)
    per_call = problems_per_call(config)
    with open(output_dir / SAMPLES_FILE, "a", encoding="utf-8") as sink:
        for bench, items in problems.items():
            finished = [done[(bench, p.id)] for p in items if (bench, p.id) in done]
            correct = sum(s.correct for g in finished for s in g)
            sampled = sum(len(g) for g in finished)
            bar = tqdm(total=len(items), initial=len(finished), desc=bench, unit="problem",
                       disable=not progress)
            if sampled:
                bar.set_postfix({"pass@1": f"{correct / sampled:.3f}"})
            for index, start in enumerate(range(0, len(items), per_call)):
                chunk = [p for p in items[start:start + per_call] if (bench, p.id) not in done]
                if not chunk:
                    continue
                if generator is None or prompt_fn is None:
                    raise ValueError(f"{len(chunk)} problem(s) of {bench} need sampling but no "
                                     "generator or prompt_fn was given")
                sampling = SamplingParams(temperature=config.temperature, top_p=config.top_p,
                                          max_new_tokens=config.max_new_tokens,
                                          seed=chunk_seed(config.seed, bench, index))
                rollouts = generator.generate([prompt_fn(p) for p in chunk], config.n, sampling)
                golds = [p.answer for p in chunk for _ in range(config.n)]
                verdicts = check_fn(list(rollouts.texts), golds)
                mean_logp = logp_fn(rollouts) if logp_fn is not None else None
                records = score_rollouts(bench, chunk, rollouts, verdicts, mean_logp)
                sink.write("".join(r.to_json() + "\n" for r in records))
                sink.flush()
                for key, group in group_by_problem(records).items():
                    done[key] = group
                correct += sum(r.correct for r in records)
                sampled += len(records)
                bar.update(len(chunk))
                bar.set_postfix({"pass@1": f"{correct / sampled:.3f}"})
            bar.close()
    results = results_table(config, {b: [done[(b, p.id)] for p in items]
                                     for b, items in problems.items()})
    write_json(output_dir / "results.json", results)
    (output_dir / "results.md").write_text(results_markdown(results), encoding="utf-8")
    plot_results(results, output_dir / "results.png")
    return results


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


# ----------------------------------------------------------------------------- models


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_adapter(path: str | Path) -> Path:
    """The LoRA adapter folder meant by `path`: an adapter folder itself, a checkpoint folder
    (its adapter/), or a run folder (RUN/final/adapter, else the latest
    RUN/checkpoints/step-N/adapter)."""
    path = Path(path)
    if (path / "adapter_config.json").is_file():
        return path
    if (path / "adapter" / "adapter_config.json").is_file():
        return path / "adapter"
    if (path / "final" / "adapter" / "adapter_config.json").is_file():
        return path / "final" / "adapter"
    steps = sorted((int(p.name.split("-", 1)[1]), p) for p in path.glob("checkpoints/step-*")
                   if p.name.split("-", 1)[1].isdigit() and (p / "adapter").is_dir())
    if steps:
        return steps[-1][1] / "adapter"
    full = [p for p in (path / "model", path / "final" / "model") if p.is_dir()]
    hint = (f"; {full[0]} holds full weights: pass it as --model instead" if full else "")
    raise FileNotFoundError(f"no LoRA adapter at {path} (looked for adapter_config.json in it, "
                            "in adapter/, final/adapter/ and checkpoints/step-N/adapter/)" + hint)


def load_policy(model: str, adapter: str | Path | None = None, *, dtype: str = "float32",
                device: str = "cpu", seed: int = 0) -> tuple[Any, Any]:
    """(model, tokenizer) in eval mode: `model` by groupwise.models.load_model, then the adapter
    (a run, checkpoint or adapter folder; see resolve_adapter) on top."""
    from groupwise.models import load_adapter, load_model

    policy, tokenizer = load_model(model, dtype=dtype, device=device, seed=seed)
    if adapter is not None:
        policy = load_adapter(policy, resolve_adapter(adapter))
    policy.eval()
    return policy, tokenizer


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


# ----------------------------------------------------------------------------- command line


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
    preset = PRESETS[args.preset]
    chosen = {key: getattr(args, key) if getattr(args, key) is not None else preset[key]
              for key in preset}
    adapter = str(resolve_adapter(args.adapter).resolve()) if args.adapter else None
    return EvalConfig(model=args.model, adapter=adapter, limit=args.limit,
                      batch_size=args.batch_size, dtype=args.dtype, seed=args.seed,
                      data_dir=args.data_dir, **chosen)


def rollout_mean_logp(model: torch.nn.Module, rollouts: Rollouts, batch_size: int = 8
                      ) -> torch.Tensor:
    """Mean token log-prob of each completion of `rollouts` under `model`: Tensor[N*n] (nats per
    token; REFERENCE.md 4, perplexity), computed batch_size completions at a time. The
    `logp_fn` of `evaluate`."""
    from groupwise.analysis.perplexity import completion_mean_logp

    index = rollouts.prompt_index
    return completion_mean_logp(model, rollouts.prompt_ids[index], rollouts.prompt_mask[index],
                                rollouts.completion_ids, rollouts.completion_mask, batch_size)


def run(args: argparse.Namespace) -> int:
    from groupwise.data.prompts import render_prompt
    from groupwise.rewards import check_answers
    from groupwise.rollout import TransformersGenerator

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

