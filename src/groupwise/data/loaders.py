"""The built-in benchmarks: each set's native records mapped to `Problem`, registered by name
(groupwise.data.benchmarks). Records come from `<root>/<folder>/<split>.jsonl` of the data
folder, else from the public hub copy via `datasets` (install `groupwise[hub]`). Folder layout
and native fields: see the data README (../shared/data/README.md in the development checkout).

| name          | splits                          | gold answer                             |
|---------------|---------------------------------|-----------------------------------------|
| gsm8k         | train, test                     | number after `####`, commas removed     |
| math          | train, test                     | last `\\boxed{}` of the solution        |
| math500       | test                            | `answer`                                |
| aime24        | test                            | `answer`                                |
| aime25        | test                            | `answer` (a float: "70" for 70.0)       |
| amc23         | test                            | `answer` (a float: "27" for 27.0)       |
| olympiadbench | test                            | `final_answer` items, `$` removed,      |
|               |                                 | joined with ", "                        |
| minerva       | test                            | last `\\boxed{}` of the solution        |
| aqua          | test                            | option letter; `choices` the options    |
|               |                                 | (format=official: the option text, no   |
|               |                                 | options shown, as AMIR's official code) |
| livemathbench | AMC_en (default), CCEE_en,      | `answer`, `$` removed                   |
|               | CNMO_en, WLPMC_en, hard_en      |                                         |
| dapo_math_17k | train                           | `reward_model.ground_truth`; the        |
|               |                                 | question without DAPO's Answer: wrapper |

DAPO-Math-17k is not in the offline data: it is read from `<root>/dapo_math_17k/train.jsonl` or
`train.parquet` (pyarrow) when present, else from the hub.

Loaders are pure: slicing (a `limit`) is the caller's business. A malformed record raises
`BenchmarkFormatError` naming the file and line. A well-formed MATH/Minerva record whose
solution has no non-empty box has no gold answer: it is skipped with a warning naming file
and line (two such records: MATH train lines 5530 and 5532).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groupwise.data.benchmarks import DATA_ENV, BenchmarkFormatError, Problem, register_benchmark
from groupwise.hub import hub_unreachable
from groupwise.records import JsonFileError, iter_jsonl
from groupwise.rewards.extract import last_boxed

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Reading records


@dataclass(frozen=True)
class _Record:
    """A raw record and where it came from (for error messages)."""

    fields: dict[str, Any]
    source: str
    line: int
    index: int

    def get(self, *names: str, optional: bool = False) -> Any:
        """The first of `names` present (hub copies name fields differently); a missing
        field raises BenchmarkFormatError unless optional (then None)."""
        for name in names:
            if name in self.fields and self.fields[name] is not None:
                return self.fields[name]
        if optional:
            return None
        wanted = " or ".join(repr(n) for n in names)
        raise BenchmarkFormatError(f"{self.source} line {self.line}: missing field {wanted}")

    def error(self, message: str) -> BenchmarkFormatError:
        return BenchmarkFormatError(f"{self.source} line {self.line}: {message}")


def _read_jsonl(path: Path) -> Iterator[_Record]:
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: the data folder must hold <benchmark>/<split>.jsonl as the "
            f"shared data folder does (set {DATA_ENV} or pass data_dir)"
        )
    try:
        for index, (number, fields) in enumerate(iter_jsonl(path)):
            if not isinstance(fields, dict):
                raise BenchmarkFormatError(f"{path} line {number}: expected a JSON object")
            yield _Record(fields, str(path), number, index)
    except JsonFileError as error:
        raise BenchmarkFormatError(f"{error.path} line {error.line}: {error.reason}") from None


def _read_hub(repo: str, config: str | None, split: str) -> Iterator[_Record]:
    try:
        import datasets
    except ImportError:
        raise ImportError(
            f"loading {repo} from the Hugging Face hub needs the `datasets` package: "
            f"pip install 'groupwise[hub]', or point {DATA_ENV} (or data_dir) at a local copy"
        ) from None
    hub_unreachable()  # out of reach: offline mode, so the cache answers without retries
    try:
        rows = datasets.load_dataset(repo, config, split=split)
    except OSError as err:  # offline, or the hub unreachable (ConnectionError)
        raise FileNotFoundError(
            f"cannot load {repo} from the Hugging Face hub ({' '.join(str(err).split())}); "
            f"point {DATA_ENV} (or data_dir, --data-dir) at a local copy"
        ) from None
    source = f"hub:{repo}" + (f"/{config}" if config else "") + f"[{split}]"
    for index, fields in enumerate(rows):
        yield _Record(dict(fields), source, index + 1, index)


def _read_parquet(path: Path) -> Iterator[_Record]:
    """The rows of a parquet file as records ("line" = 1-based row); needs pyarrow."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError(
            f"reading {path} needs pyarrow: pip install pyarrow, or convert the file to "
            f"{path.with_suffix('.jsonl')} (one JSON object per line)"
        ) from None
    index = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
        for fields in batch.to_pylist():
            yield _Record(fields, str(path), index + 1, index)
            index += 1


@dataclass(frozen=True)
class _Hub:
    """Where the public copy of a split lives: repo, config, split (per local split name)."""

    repo: str
    config: str | None = None
    splits: dict[str, str] = field(default_factory=dict)

    def split(self, local: str) -> str:
        return self.splits.get(local, local)


def _records(data_dir: Path | None, folder: str, split: str, hub: _Hub) -> Iterator[_Record]:
    if data_dir is not None:
        return _read_jsonl(data_dir / folder / f"{split}.jsonl")
    return _read_hub(hub.repo, hub.config, hub.split(split))


# ---------------------------------------------------------------------------------------------
# Field helpers

_GSM8K_FINAL = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


_MATH_DOLLAR = re.compile(r"(?<!\\)\$")


def _strip_dollars(text: str) -> str:
    """`text` without `$` math delimiters; an escaped `\\$` (a dollar sign) stays."""
    return _MATH_DOLLAR.sub("", text).strip()


def _number_text(record: _Record, value: Any) -> str:
    """A numeric gold as text: 70.0 -> "70", 0.5 -> "0.5", "204" stays "204"."""
    if isinstance(value, bool):
        raise record.error(f"answer {value!r} is not a number or a string")
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise record.error(f"answer {value!r} is not a number or a non-empty string")


def _boxed_answer(record: _Record, solution_field: str) -> str | None:
    """The last box of the solution; None (with a warning) when it has no non-empty box.

    A data defect, not a format error: MATH train lines 5530 and 5532 (number_theory/7115 and
    7117) end in an empty `\\boxed{}`. Such a record has no gold answer: the loader skips it.
    """
    solution = record.get(solution_field)
    if not isinstance(solution, str):
        raise record.error(f"field {solution_field!r} must be a string, got {solution!r}")
    answer = last_boxed(solution)
    # A box can straddle math spans: Minerva's "x_{0} \\cos (\\omega t)+$ $\\dot{x}_{0} ...".
    answer = _strip_dollars(answer) if answer is not None else None
    if not answer:
        logger.warning(
            "%s line %d: no non-empty \\boxed{...} answer in %r; record skipped",
            record.source,
            record.line,
            solution_field,
        )
        return None
    return answer


def _text(record: _Record, *names: str) -> str:
    value = record.get(*names)
    if not isinstance(value, str) or not value.strip():
        raise record.error(f"field {names[0]!r} must be a non-empty string, got {value!r}")
    return value


# ---------------------------------------------------------------------------------------------
# The loaders


@register_benchmark("gsm8k", splits=("train", "test"))
def load_gsm8k(data_dir: Path | None, split: str) -> list[Problem]:
    """GSM8K: gold = the number after `####` in `answer`, thousands commas removed."""
    problems = []
    for record in _records(data_dir, "gsm8k", split, _Hub("openai/gsm8k", "main")):
        solution = _text(record, "answer")
        final = _GSM8K_FINAL.search(solution)
        if final is None:
            raise record.error("field 'answer' has no '#### N' final answer")
        problems.append(
            Problem(
                id=f"gsm8k/{split}/{record.index}",
                question=_text(record, "question"),
                answer=final.group(1).replace(",", ""),
                meta={"solution": solution},
            )
        )
    return problems


_MATH_SUBJECTS = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)


@register_benchmark("math", splits=("train", "test"))
def load_math(data_dir: Path | None, split: str) -> list[Problem]:
    """Hendrycks MATH: gold = the last `\\boxed{}` of `solution`."""
    records: Iterable[_Record]
    if data_dir is not None:
        records = _read_jsonl(data_dir / "math" / f"{split}.jsonl")
    else:  # the hub copy has one config per subject
        records = [
            r
            for subject in _MATH_SUBJECTS
            for r in _read_hub("EleutherAI/hendrycks_math", subject, split)
        ]
    problems = []
    for position, record in enumerate(records):
        native_id = record.get("unique_id", optional=True) or f"{split}/{position}"
        answer = _boxed_answer(record, "solution")
        if answer is None:
            continue
        problems.append(
            Problem(
                id=f"math/{native_id}",
                question=_text(record, "problem"),
                answer=answer,
                meta={
                    "solution": record.get("solution"),
                    "level": record.get("level", optional=True),
                    "type": record.get("type", optional=True),
                },
            )
        )
    return problems


@register_benchmark("math500")
def load_math500(data_dir: Path | None, split: str) -> list[Problem]:
    """MATH-500 (PRM800K's subset of MATH test): gold = `answer`."""
    problems = []
    for record in _records(data_dir, "math500", split, _Hub("HuggingFaceH4/MATH-500")):
        problems.append(
            Problem(
                id=f"math500/{record.get('unique_id', optional=True) or record.index}",
                question=_text(record, "problem"),
                answer=_text(record, "answer").strip(),
                meta={
                    "solution": record.get("solution", optional=True),
                    "subject": record.get("subject", optional=True),
                    "level": record.get("level", optional=True),
                },
            )
        )
    return problems


def _competition(
    name: str, folder: str, hub: _Hub, data_dir: Path | None, split: str
) -> list[Problem]:
    """AIME/AMC-style sets: an id, a question, a numeric or string answer."""
    problems = []
    for record in _records(data_dir, folder, split, hub):
        native_id = record.get("id", "ID", optional=True)
        problems.append(
            Problem(
                id=f"{name}/{record.index if native_id is None else native_id}",
                question=_text(record, "question", "problem", "Problem"),
                answer=_number_text(record, record.get("answer", "Answer")),
                meta={k: record.fields[k] for k in ("url", "solution") if k in record.fields},
            )
        )
    return problems


@register_benchmark("aime24")
def load_aime24(data_dir: Path | None, split: str) -> list[Problem]:
    """AIME 2024 (30 problems): gold = `answer`."""
    return _competition("aime24", "aime24", _Hub("math-ai/aime24"), data_dir, split)


@register_benchmark("aime25")
def load_aime25(data_dir: Path | None, split: str) -> list[Problem]:
    """AIME 2025 I and II (30 problems): gold = `answer`, a float in the file ("70")."""
    return _competition("aime25", "aime25", _Hub("math-ai/aime25"), data_dir, split)


@register_benchmark("amc23")
def load_amc23(data_dir: Path | None, split: str) -> list[Problem]:
    """AMC 2023 (40 problems): gold = `answer`, a float in the file ("27")."""
    return _competition("amc23", "amc23", _Hub("math-ai/amc23"), data_dir, split)


@register_benchmark("olympiadbench")
def load_olympiadbench(data_dir: Path | None, split: str) -> list[Problem]:
    """OlympiadBench (English, text-only, competition math): gold = the `final_answer` items
    with `$` removed, joined with ", " (an item may itself hold several answers)."""
    hub = _Hub("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", {"test": "train"})
    problems = []
    for record in _records(data_dir, "olympiadbench", split, hub):
        finals = record.get("final_answer")
        if isinstance(finals, str):
            finals = [finals]
        if (
            not isinstance(finals, list)
            or not finals
            or not all(isinstance(f, str) and _strip_dollars(f) for f in finals)
        ):
            raise record.error(f"field 'final_answer' must be a list of strings, got {finals!r}")
        context = record.get("context", optional=True)
        question = _text(record, "question")
        problems.append(
            Problem(
                id=f"olympiadbench/{record.get('id', optional=True) or record.index}",
                question=f"{context}\n\n{question}" if context else question,
                answer=", ".join(_strip_dollars(f) for f in finals),
                meta={
                    k: record.fields.get(k)
                    for k in ("subfield", "unit", "answer_type", "is_multiple_answer")
                },
            )
        )
    return problems


@register_benchmark("minerva")
def load_minerva(data_dir: Path | None, split: str) -> list[Problem]:
    """Minerva math (272 problems): gold = the last `\\boxed{}` of `solution`."""
    problems = []
    for record in _records(data_dir, "minerva_math", split, _Hub("math-ai/minervamath")):
        native_id = record.get("idx", optional=True)
        answer = _boxed_answer(record, "solution")
        if answer is None:
            continue
        problems.append(
            Problem(
                id=f"minerva/{record.index if native_id is None else native_id}",
                question=_text(record, "problem", "question"),
                answer=answer,
                meta={
                    "solution": record.get("solution"),
                    "type": record.get("type", optional=True),
                },
            )
        )
    return problems


_OPTION_PREFIX = re.compile(r"^\s*\(?([A-E])\s*\)\s*")


def _options(record: _Record, options: Any) -> list[str]:
    """Option texts without their "A)" prefixes; a prefix must name its position."""
    if not isinstance(options, list) or not options or not all(isinstance(o, str) for o in options):
        raise record.error(f"field 'options' must be a non-empty list of strings, got {options!r}")
    texts = []
    for position, option in enumerate(options):
        prefix = _OPTION_PREFIX.match(option)
        if prefix is None or prefix.group(1) != "ABCDE"[position]:
            raise record.error(
                f"option {position} is {option!r}; expected it to start with '{'ABCDE'[position]})'"
            )
        texts.append(option[prefix.end() :].strip())
    return texts


AQUA_FORMATS = ("letters", "official")


@register_benchmark("aqua")
def load_aqua(data_dir: Path | None, split: str, format: str = "letters") -> list[Problem]:
    """AQUA-RAT test, in one of two formats (`format`):

    - "letters" (ours, the default): the question with its options (`choices`, the `options`
      without "A)"), gold = the letter in `correct`; the prompt lists the options and asks
      for the letter.
    - "official": as the AMIR-GRPO official loader (`get_aquarat_questions`) has it: the
      question alone, no options shown, gold = the text of the correct option ("Rs. 750",
      "5(√3 + 1)"). The options and the letter stay in meta ("options", "letter").
    """
    if format not in AQUA_FORMATS:
        raise ValueError(f"aqua: format must be one of {list(AQUA_FORMATS)}, got {format!r}")
    problems = []
    for record in _records(data_dir, "aqua", split, _Hub("deepmind/aqua_rat", "raw")):
        choices = _options(record, record.get("options"))
        letter = _text(record, "correct").strip()
        if letter not in "ABCDE"[: len(choices)] or len(letter) != 1:
            raise record.error(
                f"field 'correct' is {letter!r}; expected one of {list('ABCDE'[: len(choices)])}"
            )
        rationale = record.get("rationale", optional=True)
        official = format == "official"
        problems.append(
            Problem(
                id=f"aqua/{record.index}",
                question=_text(record, "question"),
                answer=choices["ABCDE".index(letter)] if official else letter,
                choices=None if official else choices,
                meta={"rationale": rationale, "options": choices, "letter": letter}
                if official
                else {"rationale": rationale},
            )
        )
    return problems


LIVEMATHBENCH_SPLITS = ("AMC_en", "CCEE_en", "CNMO_en", "WLPMC_en", "hard_en")


@register_benchmark("livemathbench", splits=LIVEMATHBENCH_SPLITS, default_split="AMC_en")
def load_livemathbench(data_dir: Path | None, split: str) -> list[Problem]:
    """LiveMathBench v202412, English: gold = `answer` with `$` removed; one split per file."""
    hub = _Hub("opencompass/LiveMathBench", f"v202412_{split}", {split: "test"})
    problems = []
    for record in _records(data_dir, "livemathbench", split, hub):
        options = record.get("options", optional=True) or None
        answer = _strip_dollars(_text(record, "answer"))
        if not answer:
            raise record.error("field 'answer' is empty once '$' are removed")
        problems.append(
            Problem(
                id=f"livemathbench/{split}/{record.index}",
                question=_text(record, "question"),
                answer=answer,
                choices=list(options) if options else None,
                meta={"question_type": record.get("question_type", optional=True)},
            )
        )
    return problems


DAPO_HUB = "BytedTsinghua-SIA/DAPO-Math-17k"
# The instruction DAPO-Math-17k wraps every question in (verl's recipe/dapo format); our own
# prompt templates add theirs, so the loader keeps the question alone.
DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be "
    "of the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'


def _dapo_records(data_dir: Path | None) -> Iterator[_Record]:
    if data_dir is None:
        return _read_hub(DAPO_HUB, None, "train")
    folder = data_dir / "dapo_math_17k"
    if (folder / "train.jsonl").is_file():
        return _read_jsonl(folder / "train.jsonl")
    if (folder / "train.parquet").is_file():
        return _read_parquet(folder / "train.parquet")
    raise FileNotFoundError(
        f"{folder / 'train.jsonl'} (or train.parquet) not found: DAPO-Math-17k is not in the "
        f"offline data. Download the hub copy {DAPO_HUB} (its data/dapo-math-17k.parquet) into "
        f"{folder} as train.parquet (reading it needs pyarrow) or convert it to train.jsonl; "
        "or load it from the hub: pip install 'groupwise[hub]' and give no data folder "
        f"(unset {DATA_ENV})"
    )


def _dapo_question(record: _Record) -> str:
    prompt = record.get("prompt")
    if isinstance(prompt, list):  # chat messages: the user's
        users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        prompt = users[0].get("content") if users else None
    if not isinstance(prompt, str) or not prompt.strip():
        raise record.error(
            f"field 'prompt' must be a string or a list of messages with a user message, "
            f"got {record.fields.get('prompt')!r:.80}"
        )
    text = prompt.removeprefix(DAPO_PREFIX).removesuffix(DAPO_SUFFIX).strip()
    if not text:
        raise record.error("field 'prompt' holds the instruction but no question")
    return text


@register_benchmark("dapo_math_17k", splits=("train",))
def load_dapo_math_17k(data_dir: Path | None, split: str) -> list[Problem]:
    """DAPO-Math-17k (BytedTsinghua-SIA/DAPO-Math-17k, verl's format): question = the user
    message of `prompt` without DAPO's "Answer:" instruction, gold = `reward_model.ground_truth`
    (an integer in this set), id = `extra_info.index`.

    The published file repeats each problem about 100 times (1.79M rows); repeats of an index
    are dropped (one problem per index), and a repeat whose question or gold differs from the
    first is an error naming both rows.
    """
    problems: list[Problem] = []
    first: dict[str, tuple[int, Problem]] = {}
    for record in _dapo_records(data_dir):
        reward = record.get("reward_model", optional=True)
        gold = reward.get("ground_truth") if isinstance(reward, dict) else None
        gold = gold if gold is not None else record.get("solution", "answer", optional=True)
        if gold is None:
            raise record.error("missing field 'reward_model.ground_truth' (or 'solution')")
        extra = record.get("extra_info", optional=True)
        native = extra.get("index") if isinstance(extra, dict) else None
        problem = Problem(
            id=f"dapo_math_17k/{record.index if native is None else native}",
            question=_dapo_question(record),
            answer=_number_text(record, gold),
            meta={"data_source": record.get("data_source", optional=True)},
        )
        if problem.id in first:
            line, kept = first[problem.id]
            if (kept.question, kept.answer) != (problem.question, problem.answer):
                raise record.error(
                    f"repeats {problem.id} of line {line} with another question or gold"
                )
            continue
        first[problem.id] = (record.line, problem)
        problems.append(problem)
    return problems
