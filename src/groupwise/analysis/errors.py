"""Where and how incorrect solutions go wrong (docs/algorithms.md, "Analyses of AMIR-GRPO"; paper
Figures 5-6).

Each incorrect completion is cut into numbered steps (`segment_steps`), a judge names the first
erroneous step k and an error type from a taxonomy (YAML, default `error_taxonomy.yaml`), and
the relative error position is k / (number of steps). Per run: the histogram of error types
and a Gaussian-KDE density of the relative positions.

The judge is any OpenAI-compatible chat endpoint (`OpenAIChatJudge`, stdlib urllib) or a local
transformers model with greedy decoding (`LocalModelJudge`). Both only turn chat messages into
text; `judge_solution` asks, parses the JSON answer {"step": k, "type": "..."} robustly, and
retries unusable answers and transient transport errors a bounded number of times with
exponential backoff. What still fails is recorded as a judge failure with its reason, never
dropped. Answers are cached in OUTPUT/judgements.jsonl keyed by a hash of the judge and the
exact question asked, so a rerun resumes; failures are asked again on a rerun.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import random
import re
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import yaml

from groupwise.analysis.runs import load_runs, nothing_produced, warn_if_fewer_samples
from groupwise.records import Sample, SavedProblem, read_jsonl, write_json

DEFAULT_TAXONOMY = Path(__file__).with_name("error_taxonomy.yaml")
Message = dict[str, str]
# Samples per problem in the paper's protocol: 16 rollouts per problem (paper, Figures 5-6).
PROTOCOL_SAMPLES: int | None = 16
ERROR_FIGURES = ("errors_types.png", "errors_position.png")


# ----------------------------------------------------------------------------- taxonomy


@dataclass(frozen=True)
class ErrorType:
    name: str
    description: str


def load_taxonomy(path: str | Path = DEFAULT_TAXONOMY) -> list[ErrorType]:
    """The error types of a taxonomy YAML file: `types: [{name, description}, ...]`."""
    path = Path(path)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("types"), list) or not data["types"]:
        raise ValueError(
            f"{path}: expected a mapping with a non-empty list `types` of {{name, description}}"
        )
    types: list[ErrorType] = []
    seen: set[str] = set()
    for i, entry in enumerate(data["types"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ValueError(f"{path}: types[{i}] needs a string `name` (and a `description`)")
        name = entry["name"].strip()
        if _norm(name) in seen:
            raise ValueError(f"{path}: types[{i}]: duplicate name {name!r}")
        unknown = set(entry) - {"name", "description"}
        if unknown:
            raise ValueError(
                f"{path}: types[{i}]: unknown key(s) {sorted(unknown)} (valid: name, description)"
            )
        seen.add(_norm(name))
        types.append(ErrorType(name=name, description=str(entry.get("description", "")).strip()))
    return types


def _norm(name: str) -> str:
    return re.sub(r"[\s_\-]+", " ", name.strip().lower())


# ----------------------------------------------------------------------------- segmentation

_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)
_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.S)
_AFTER_REASONING = re.compile(r"</?(?:answer|analysis|confidence)>")
_BLANK_LINE = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def segment_steps(completion: str, min_steps: int = 3) -> list[str]:
    """Cut a completion into its numbered reasoning steps (the rule, in order):

    1. Reasoning text: the content of the first <think>...</think> block (to the end of the
       text if it is never closed); without <think>, the text before the first
       <answer>/<analysis>/<confidence> tag (all of it when there is none).
    2. Split the reasoning into paragraphs (blank lines). If that gives fewer than `min_steps`
       pieces, split into lines instead; if still fewer, split each line into sentences (after
       '.', '!' or '?' followed by white space). Empty pieces are dropped.
    3. When an <answer> block exists, its content is one last step, "Final answer: ...".
    The <analysis> and <confidence> blocks (self-assessment after the answer) are not steps.

    Returns the steps in order (step k is element k-1); empty for an empty completion.
    """
    think = _THINK.search(completion)
    if think:
        reasoning = think.group(1)
    else:
        tag = _AFTER_REASONING.search(completion)
        reasoning = completion[: tag.start()] if tag else completion
    steps: list[str] = []
    for splitter in (_BLANK_LINE.split, str.splitlines, _sentences):
        steps = [piece.strip() for piece in splitter(reasoning) if piece.strip()]
        if len(steps) >= min_steps:
            break
    answer = _ANSWER.search(completion)
    if answer and answer.group(1).strip():
        steps.append("Final answer: " + answer.group(1).strip())
    return steps


def _sentences(text: str) -> list[str]:
    return [s for line in text.splitlines() for s in _SENTENCE_END.split(line)]


# ----------------------------------------------------------------------------- judge protocol

JUDGE_SYSTEM = (
    "You are an expert mathematics grader. You locate the first step where a "
    "solution goes wrong and classify the error. You answer with JSON only."
)


def judge_messages(
    question: str, gold: str, steps: Sequence[str], taxonomy: Sequence[ErrorType]
) -> list[Message]:
    """The chat messages that ask a judge for the first erroneous step and its type."""
    numbered = "\n".join(f"Step {i}: {step}" for i, step in enumerate(steps, start=1))
    types = "\n".join(f'- "{t.name}": {t.description}' for t in taxonomy)
    user = (
        f"Problem:\n{question}\n\nReference answer: {gold}\n\n"
        "The solution below is INCORRECT (its final answer does not match the reference). "
        f"Its {len(steps)} steps are numbered.\n\n{numbered}\n\n"
        "Find the FIRST erroneous step: the earliest step at which the reasoning irreversibly "
        "departs from a valid solution. Classify that error with exactly one of these types:\n"
        f"{types}\n\n"
        'Answer with one JSON object and nothing else, e.g. {"step": 2, "type": "'
        f'{taxonomy[0].name}"}}. "step" is an integer from 1 to {len(steps)}; "type" is one '
        "of the type names above, spelled exactly."
    )
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


@dataclass(frozen=True)
class Judgement:
    step: int
    type: str


class JudgeAnswerError(ValueError):
    """The judge's text is not a usable {"step": k, "type": ...} answer."""


class JudgeTransportError(RuntimeError):
    """The judge could not be asked (network, HTTP status, malformed response)."""

    def __init__(self, message: str, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


_STEP_RE = re.compile(r"""["']?step["']?\s*[:=]\s*["']?(\d+)""", re.I)
_TYPE_RE = re.compile(r"""["']?(?:error_)?type["']?\s*[:=]\s*["']([^"'\n]+)["']""", re.I)
_PROSE_STEP_RE = re.compile(r"\bstep\s*(?:#|no\.?|number)?\s*(\d+)", re.I)


def parse_judgement(text: str, num_steps: int, taxonomy: Sequence[ErrorType]) -> Judgement:
    """Read {"step": k, "type": "..."} out of a judge's reply.

    Tolerates text or code fences around the object, key case, "error_type" for "type", a step
    given as a string; as fallbacks, almost-JSON (e.g. single quotes: the two fields found by
    pattern), then prose that names exactly one step number ("step 3") and exactly one
    taxonomy type. The type must name a taxonomy entry (compared ignoring case, spaces, '_'
    and '-'); the step must lie in 1..num_steps. Raises JudgeAnswerError saying what is wrong.
    """
    names = {_norm(t.name): t.name for t in taxonomy}
    fields = _json_fields(text) or _pattern_fields(text) or _prose_fields(text, names)
    if fields is None:
        raise JudgeAnswerError(f"no step/type fields in the reply: {text[:120]!r}")
    raw_step, raw_type = fields
    try:
        step = int(raw_step) if not isinstance(raw_step, str) else int(raw_step.strip())
        if isinstance(raw_step, float) and raw_step != step:
            raise ValueError
    except (TypeError, ValueError) as err:
        raise JudgeAnswerError(f"step is not an integer: {raw_step!r}") from err
    if not 1 <= step <= num_steps:
        raise JudgeAnswerError(f"step {step} outside 1..{num_steps}")
    if not isinstance(raw_type, str) or _norm(raw_type) not in names:
        raise JudgeAnswerError(f"type {raw_type!r} is not in the taxonomy")
    return Judgement(step=step, type=names[_norm(raw_type)])


def _json_fields(text: str) -> tuple[Any, Any] | None:
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            lowered = {str(k).lower(): v for k, v in obj.items()}
            kind = lowered.get("type", lowered.get("error_type"))
            if "step" in lowered and kind is not None:
                return lowered["step"], kind
    return None


def _pattern_fields(text: str) -> tuple[str, str] | None:
    step, kind = _STEP_RE.search(text), _TYPE_RE.search(text)
    return (step.group(1), kind.group(1)) if step and kind else None


def _prose_fields(text: str, names: Mapping[str, str]) -> tuple[str, str] | None:
    steps = set(_PROSE_STEP_RE.findall(text))
    flat = _norm(text)
    kinds = [name for key, name in names.items() if key in flat]
    return (steps.pop(), kinds[0]) if len(steps) == 1 and len(kinds) == 1 else None


class Judge(Protocol):
    """Turns chat messages into the judge's reply text; raises JudgeTransportError."""

    name: str
    deterministic: bool  # True: asking again gives the same reply, so garbage is not retried

    def complete(self, messages: list[Message]) -> str: ...


class OpenAIChatJudge:
    """A judge behind an OpenAI-compatible /chat/completions endpoint (stdlib urllib).

    `temperature` None leaves the server's default (some reasoning models accept no other).
    HTTP 408/409/429/5xx, timeouts, connection errors and malformed responses are retryable;
    other HTTP errors (e.g. 401 bad key, 404 wrong model) are not.
    """

    deterministic = False

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        temperature: float | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.temperature = temperature
        self.name = f"openai:{base_url.rstrip('/')}:{model}"

    def complete(self, messages: list[Message]) -> str:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            self.url, data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as err:
            detail = err.read()[:200].decode("utf-8", "replace")
            retryable = err.code in (408, 409, 429) or err.code >= 500
            raise JudgeTransportError(
                f"HTTP {err.code} from {self.url}: {detail}", retryable
            ) from err
        except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
            raise JudgeTransportError(f"{type(err).__name__} from {self.url}: {err}") from err
        try:
            content = json.loads(raw)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as err:
            raise JudgeTransportError(f"malformed response from {self.url}: {raw[:120]!r}") from err
        if not isinstance(content, str):
            raise JudgeTransportError(f"response content is {type(content).__name__}, not text")
        return content


class LocalModelJudge:
    """A local transformers model as judge: chat template (if any) and greedy decoding."""

    deterministic = True

    def __init__(self, model: Any, tokenizer: Any, name: str, max_new_tokens: int = 64) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = f"local:{name}"
        self.max_new_tokens = max_new_tokens
        self._lock = threading.Lock()

    def complete(self, messages: list[Message]) -> str:
        import torch

        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
        else:
            text = "\n\n".join(m["content"] for m in messages) + "\n\n"
        device = next(self.model.parameters()).device
        ids = self.tokenizer(text, return_tensors="pt", add_special_tokens=False).to(device)
        pad = self.tokenizer.pad_token_id
        with self._lock, torch.no_grad():
            out = self.model.generate(
                **ids,
                do_sample=False,
                max_new_tokens=self.max_new_tokens,
                pad_token_id=pad if pad is not None else self.tokenizer.eos_token_id,
            )
        return self.tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)


@dataclass(frozen=True)
class JudgeOutcome:
    """The result of asking about one solution: a judgement, or the reason it failed."""

    judgement: Judgement | None
    attempts: int
    error: str | None
    reply: str | None  # the last reply text (None if the judge never answered)


def judge_solution(
    judge: Judge,
    messages: list[Message],
    num_steps: int,
    taxonomy: Sequence[ErrorType],
    attempts: int = 3,
    backoff: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> JudgeOutcome:
    """Ask `judge` until it gives a usable answer, at most `attempts` times.

    Between tries it waits backoff * 2^(try - 1) seconds. Unusable replies are retried unless
    the judge is deterministic (the same question would get the same reply); transport errors
    are retried when retryable. Never raises for judge trouble: the outcome carries the error.
    """
    reply: str | None = None
    error = "not asked"
    for attempt in range(1, attempts + 1):
        if attempt > 1:
            sleep(backoff * 2 ** (attempt - 2))
        try:
            reply = judge.complete(messages)
        except JudgeTransportError as err:
            error = f"transport: {err}"
            if not err.retryable:
                return JudgeOutcome(None, attempt, error, reply)
            continue
        try:
            return JudgeOutcome(parse_judgement(reply, num_steps, taxonomy), attempt, None, reply)
        except JudgeAnswerError as err:
            error = f"answer: {err}"
            if judge.deterministic:
                return JudgeOutcome(None, attempt, error, reply)
    return JudgeOutcome(None, attempts, error, reply)


# ----------------------------------------------------------------------------- cache


class JudgeCache:
    """Judge outcomes in a JSON-lines file, keyed by a hash of the judge and the question.

    Only usable judgements count as cached: failed items are asked again on the next run. Each
    record is appended and flushed as soon as it is known.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.records: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            rows, _ = read_jsonl(self.path)
            for _, record in rows:
                if isinstance(record, dict) and isinstance(record.get("key"), str):
                    self.records[record["key"]] = record
        self._lock = threading.Lock()

    @staticmethod
    def key(judge_name: str, messages: list[Message]) -> str:
        blob = json.dumps([judge_name, messages], ensure_ascii=False, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def get(self, key: str) -> Judgement | None:
        record = self.records.get(key)
        if record and record.get("step") is not None and record.get("type") is not None:
            return Judgement(step=int(record["step"]), type=str(record["type"]))
        return None

    def put(self, key: str, record: dict[str, Any]) -> None:
        record = {"key": key, **record}
        with self._lock:
            self.records[key] = record
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
                f.flush()


# ----------------------------------------------------------------------------- analysis


@dataclass(frozen=True)
class ErrorItem:
    """One incorrect solution to be judged, and its outcome once judged."""

    run: str
    sample: Sample
    steps: list[str]
    judgement: Judgement | None = None
    error: str | None = None
    attempts: int = 0
    cached: bool = False

    @property
    def relative_position(self) -> float | None:
        """k / (number of steps) of the first erroneous step k, in (0, 1]."""
        return None if self.judgement is None else self.judgement.step / len(self.steps)


def judge_items(
    items: Sequence[ErrorItem],
    problems: Mapping[str, Mapping[Any, SavedProblem]],
    judge: Judge,
    taxonomy: Sequence[ErrorType],
    cache: JudgeCache,
    attempts: int = 3,
    backoff: float = 2.0,
    workers: int = 1,
    progress: bool = True,
) -> list[ErrorItem]:
    """Judge every item: cached answers first, then each distinct question once (in parallel
    threads for remote judges; identical solutions of the same problem share one answer).

    `problems[run][(benchmark, id)]` gives the question; an item with no steps or no saved
    question is a failure with that reason. Returns the items with outcomes, in input order.
    """
    from tqdm import tqdm

    done: list[ErrorItem | None] = [None] * len(items)
    questions: dict[str, tuple[list[Message], list[int]]] = {}  # key -> (messages, item rows)
    for row, item in enumerate(items):
        problem = problems.get(item.run, {}).get(item.sample.key)
        if problem is None:
            done[row] = replace(item, error="no saved problem text (problems.jsonl)")
        elif not item.steps:
            done[row] = replace(item, error="empty solution: no steps")
        else:
            messages = judge_messages(problem.question, item.sample.gold, item.steps, taxonomy)
            key = JudgeCache.key(judge.name, messages)
            cached = cache.get(key)
            if cached is not None:
                done[row] = replace(item, judgement=cached, cached=True)
            else:
                questions.setdefault(key, (messages, []))[1].append(row)

    def ask(key: str) -> tuple[str, JudgeOutcome]:
        messages, rows = questions[key]
        first = items[rows[0]]
        outcome = judge_solution(judge, messages, len(first.steps), taxonomy, attempts, backoff)
        s = first.sample
        cache.put(
            key,
            {
                "run": first.run,
                "benchmark": s.benchmark,
                "problem_id": s.problem_id,
                "sample": s.sample,
                "num_steps": len(first.steps),
                "step": outcome.judgement.step if outcome.judgement else None,
                "type": outcome.judgement.type if outcome.judgement else None,
                "error": outcome.error,
                "attempts": outcome.attempts,
                "reply": outcome.reply,
            },
        )
        return key, outcome

    failures = 0
    with (
        ThreadPoolExecutor(max_workers=max(1, workers)) as pool,
        tqdm(total=len(questions), desc="judging", disable=not progress) as bar,
    ):
        for key, outcome in pool.map(ask, list(questions)):
            for row in questions[key][1]:
                done[row] = replace(
                    items[row],
                    judgement=outcome.judgement,
                    error=outcome.error,
                    attempts=outcome.attempts,
                )
            failures += outcome.judgement is None
            bar.update(1)
            bar.set_postfix(failures=failures)
    return [d for d in done if d is not None]


def summarize_run(
    items: Sequence[ErrorItem], taxonomy: Sequence[ErrorType], grid: Sequence[float]
) -> dict[str, Any]:
    """Counts per error type, relative positions, their KDE on `grid`, and the failures."""
    from groupwise.figures import gaussian_kde

    judged = [i for i in items if i.judgement is not None]
    positions = [float(i.relative_position) for i in judged]  # type: ignore[arg-type]
    types = Counter(i.judgement.type for i in judged)  # type: ignore[union-attr]
    failed = [i for i in items if i.judgement is None]
    reasons = Counter((i.error or "unknown").split(":")[0] for i in failed)
    return {
        "solutions": len(items),
        "judged": len(judged),
        "judge_failures": len(failed),
        "failure_reasons": dict(reasons),
        "failed": [
            {
                "benchmark": i.sample.benchmark,
                "problem_id": i.sample.problem_id,
                "sample": i.sample.sample,
                "error": i.error,
            }
            for i in failed
        ],
        "types": {t.name: types.get(t.name, 0) for t in taxonomy},
        "mean_relative_position": float(np.mean(positions)) if positions else None,
        "relative_positions": positions,
        "density": {
            "grid": list(map(float, grid)),
            "values": gaussian_kde(positions, grid).tolist(),
        },
    }


def plot_errors(
    summary: Mapping[str, Mapping[str, Any]], taxonomy: Sequence[ErrorType], out: Path
) -> tuple[list[Path], list[str]]:
    """errors_types.png (share of each type per run, from the runs with a judged solution) and
    errors_position.png (the KDE per run, from the runs with at least MIN_DENSITY_POINTS judged
    solutions). Returns the figures drawn and, for each figure or run left out, why."""
    from groupwise.figures import (
        MIN_DENSITY_POINTS,
        figure_not_drawn,
        new_figure,
        save_figure,
        series_colors,
    )

    judged = [name for name in summary if summary[name]["judged"]]
    if not judged:
        reason = "no solution was judged (every judge call failed; see errors.json)"
        return [], [figure_not_drawn(out / name, reason) for name in ERROR_FIGURES]
    colors = dict(zip(summary, series_colors(len(summary)), strict=True))
    fig, axes = new_figure(width=max(6.0, 1.3 * len(taxonomy)), height=4.2)
    ax = axes[0, 0]
    width = 0.8 / len(judged)
    for i, name in enumerate(judged):
        counts = np.array([summary[name]["types"][t.name] for t in taxonomy], float)
        ax.bar(
            np.arange(len(taxonomy)) + (i - (len(judged) - 1) / 2) * width,
            100 * counts / counts.sum(),
            width,
            color=colors[name],
            label=f"{name} (n={int(counts.sum())})",
        )
    ax.set_xticks(range(len(taxonomy)), [t.name for t in taxonomy], rotation=25, ha="right")
    ax.set_ylabel("% of judged failures")
    ax.set_title("type of the first error")
    ax.legend(fontsize=8)
    paths, notes = [save_figure(fig, out / ERROR_FIGURES[0])], []
    dense = [name for name in judged if summary[name]["judged"] >= MIN_DENSITY_POINTS]
    notes += [
        f"errors_position.png: run {name!r} left out, {summary[name]['judged']} judged "
        f"solutions (a density needs {MIN_DENSITY_POINTS})"
        for name in summary
        if name not in dense
    ]
    if not dense:
        reason = f"no run has {MIN_DENSITY_POINTS} judged solutions, what a density needs"
        return paths, [*notes, figure_not_drawn(out / ERROR_FIGURES[1], reason)]
    fig, axes = new_figure()
    ax = axes[0, 0]
    for name in dense:
        density = summary[name]["density"]
        ax.plot(
            density["grid"],
            density["values"],
            color=colors[name],
            label=f"{name} (n={summary[name]['judged']})",
        )
    ax.set_xlabel("relative position of the first error (step / number of steps)")
    ax.set_ylabel("density (Gaussian KDE)")
    ax.set_xlim(0, 1)
    ax.legend(fontsize=8)
    paths.append(save_figure(fig, out / ERROR_FIGURES[1]))
    return paths, notes


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


def select_items(
    runs_samples: Mapping[str, Iterable[Sample]], min_steps: int, max_per_run: int | None, seed: int
) -> list[ErrorItem]:
    """The incorrect solutions of each run (a random `max_per_run` of them if given), cut into
    steps."""
    items: list[ErrorItem] = []
    for name, samples in runs_samples.items():
        wrong = [s for s in samples if not s.correct]
        if max_per_run is not None and len(wrong) > max_per_run:
            wrong = random.Random(seed).sample(wrong, max_per_run)
        items += [ErrorItem(name, s, segment_steps(s.completion, min_steps)) for s in wrong]
    return items


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
