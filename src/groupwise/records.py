"""The files of an evaluation folder and their records: what `groupwise eval` writes and the
analyses and `groupwise report` read back.

`groupwise eval --output DIR` writes, per completion, one JSON line of DIR/samples.jsonl
(`Sample`), one line per evaluated problem to DIR/problems.jsonl (`SavedProblem`: the question
and gold, so the analyses need no data folder), DIR/config.json (the settings that produced the
samples) and DIR/results.json (pass@k per benchmark).

JSON-lines files are read through `iter_jsonl` / `read_jsonl`, the one reader of the project's
own JSON-lines files: a line that is not UTF-8 or not JSON is an error naming the file and line,
except the torn last line a crash during an append leaves behind, which a caller may skip.
"""

from __future__ import annotations

import json
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SAMPLES_FILE = "samples.jsonl"
PROBLEMS_FILE = "problems.jsonl"
CONFIG_FILE = "config.json"
RESULTS_FILE = "results.json"

VERDICTS = ("correct", "wrong", "no_answer", "timeout", "error")

MEAN_LOGP_NOTE = (
    "mean_logp: mean token log-prob of the completion under the generating model, "
    "forward pass over prompt + completion at temperature 1 (raw distribution)"
)

ProblemKey = tuple[str, str]  # (benchmark, problem id)


@dataclass(frozen=True)
class Sample:
    """One completion of one problem, as saved by `groupwise eval`.

    `mean_logp` is the mean token log-probability of the completion under the model that
    generated it, at temperature 1 (raw distribution, not the sampling temperature), in nats per
    token; None when not computed or the completion is empty. `tokens` counts completion tokens
    (EOS included when the model stopped). `verdict` is one of VERDICTS.
    """

    benchmark: str
    problem_id: str
    sample: int
    completion: str
    extracted: str | None
    verdict: str
    tokens: int
    truncated: bool
    mean_logp: float | None
    confidence: float | None
    gold: str

    @property
    def correct(self) -> bool:
        return self.verdict == "correct"

    @property
    def key(self) -> ProblemKey:
        return (self.benchmark, self.problem_id)

    def to_json(self) -> str:
        # `correct` is written for people reading the file with jq; readers use `verdict`.
        return json.dumps({**asdict(self), "correct": self.correct}, ensure_ascii=False)


@dataclass(frozen=True)
class SavedProblem:
    """A problem as saved in problems.jsonl (the fields of groupwise.data.Problem we need);
    `level` is its MATH difficulty level 1-5 when its record carries one
    (groupwise.data.difficulty_level), else None (and absent from files written before)."""

    benchmark: str
    id: str
    question: str
    answer: str
    choices: list[str] | None = None
    level: int | None = None

    @property
    def key(self) -> ProblemKey:
        return (self.benchmark, self.id)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)


class JsonFileError(ValueError):
    """A line of a JSON or JSON-lines file that cannot be read: `path`, 1-based `line`, and
    `reason`; the message reads "PATH:LINE: REASON"."""

    def __init__(self, path: Path, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path, self.line, self.reason = path, line, reason


def _decode(path: Path, number: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise JsonFileError(
            path, number, f"not valid UTF-8 (byte 0x{raw[err.start]:02x} at column {err.start + 1})"
        ) from None


def iter_jsonl(
    path: str | Path, on_torn_tail: Callable[[int], None] | None = None
) -> Iterator[tuple[int, Any]]:
    """(line number, parsed object) for every non-blank line of a JSON-lines file, streamed.

    A line that is not UTF-8 or not JSON raises JsonFileError naming the file and line. The one
    exception: a last line without its final newline that does not parse is what a crash during
    an append leaves behind (cut anywhere, even inside a multi-byte character); with
    `on_torn_tail` it is skipped and on_torn_tail(line number) called, else it is an error too.
    """
    path = Path(path)
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, start=1):
            try:
                text = _decode(path, number, raw)
                if not text.strip():
                    continue
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as err:
                    raise JsonFileError(path, number, f"not valid JSON ({err.msg})") from None
            except JsonFileError:
                if on_torn_tail is not None and not raw.endswith(b"\n"):
                    on_torn_tail(number)
                    continue
                raise
            yield number, obj


def read_jsonl(path: str | Path) -> tuple[list[tuple[int, Any]], bool]:
    """All (line number, object) pairs of a JSON-lines file, and whether its tail was torn
    (a last line cut by a crash, skipped); see `iter_jsonl`."""
    torn: list[int] = []
    rows = list(iter_jsonl(path, on_torn_tail=torn.append))
    return rows, bool(torn)


def ends_with_newline(path: str | Path) -> bool:
    """Whether a non-empty file's last byte is a newline (True for an empty file): appending a
    line to a file that does not would glue it to the last one."""
    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            return True
        f.seek(-1, 2)
        return f.read(1) == b"\n"


def read_json(path: str | Path) -> Any:
    """A JSON file (config.json, results.json); bad UTF-8 or JSON names the file and line."""
    path = Path(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise JsonFileError(path, line, f"not valid UTF-8 (byte 0x{raw[err.start]:02x})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise JsonFileError(path, err.lineno, f"not valid JSON ({err.msg})") from None


def _sample_from(obj: Any, where: str) -> Sample:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    fields: dict[str, Any] = {}
    for name, kinds in _SAMPLE_TYPES.items():
        if name not in obj:
            raise ValueError(
                f"{where}: missing field {name!r} (fields: {', '.join(_SAMPLE_TYPES)})"
            )
        value = obj[name]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise ValueError(
                f"{where}: field {name!r} has type {type(value).__name__}, "
                f"expected {' or '.join(k.__name__ for k in kinds)}"
            )
        fields[name] = value
    if fields["verdict"] not in VERDICTS:
        raise ValueError(
            f"{where}: field 'verdict' is {fields['verdict']!r}, "
            f"expected one of {', '.join(VERDICTS)}"
        )
    for name in ("mean_logp", "confidence"):
        if fields[name] is not None:
            fields[name] = float(fields[name])
    return Sample(**fields)


_NONE = type(None)
_SAMPLE_TYPES: dict[str, tuple[type, ...]] = {
    "benchmark": (str,),
    "problem_id": (str,),
    "sample": (int,),
    "completion": (str,),
    "extracted": (str, _NONE),
    "verdict": (str,),
    "tokens": (int,),
    "truncated": (bool,),
    "mean_logp": (float, int, _NONE),
    "confidence": (float, int, _NONE),
    "gold": (str,),
}


def read_samples(path: str | Path) -> list[Sample]:
    """All samples of a samples.jsonl file, validated field by field.

    Duplicate (benchmark, problem_id, sample) entries are an error; a torn last line (crash
    during an append) is skipped with a warning.
    """
    path = Path(path)
    rows, torn = read_jsonl(path)
    if torn:
        warnings.warn(f"{path}: skipped a torn last line (interrupted write)", stacklevel=2)
    return samples_from_rows(rows, path)


def samples_from_rows(rows: Iterable[tuple[int, Any]], path: str | Path) -> list[Sample]:
    """Samples from (line number, object) rows of samples.jsonl at `path` (for messages),
    validated field by field; a duplicate (benchmark, problem_id, sample) is an error."""
    samples: list[Sample] = []
    seen: dict[tuple[str, str, int], int] = {}
    for number, obj in rows:
        sample = _sample_from(obj, f"{path}:{number}")
        ident = (sample.benchmark, sample.problem_id, sample.sample)
        if ident in seen:
            raise ValueError(
                f"{path}:{number}: duplicate sample {ident} (first on line {seen[ident]})"
            )
        seen[ident] = number
        samples.append(sample)
    return samples


def read_problems(path: str | Path) -> dict[ProblemKey, SavedProblem]:
    """problems.jsonl as {(benchmark, id): SavedProblem}; later lines replace earlier ones."""
    path = Path(path)
    rows, _ = read_jsonl(path)
    out: dict[ProblemKey, SavedProblem] = {}
    for number, obj in rows:
        try:
            problem = SavedProblem(**obj)
        except TypeError as err:
            raise ValueError(
                f"{path}:{number}: {err} (fields: benchmark, id, question, answer, choices, level)"
            ) from err
        out[problem.key] = problem
    return out


def write_problems(path: str | Path, problems: Iterable[SavedProblem]) -> None:
    """Write problems.jsonl atomically (temporary file, then rename)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(p.to_json() + "\n" for p in problems), encoding="utf-8")
    tmp.replace(path)


def group_by_problem(samples: Iterable[Sample]) -> dict[ProblemKey, list[Sample]]:
    """Samples grouped by (benchmark, problem id), each group sorted by sample index; groups in
    order of first appearance."""
    groups: dict[ProblemKey, list[Sample]] = defaultdict(list)
    for s in samples:
        groups[s.key].append(s)
    return {key: sorted(group, key=lambda s: s.sample) for key, group in groups.items()}


def write_json(path: str | Path, obj: Mapping[str, Any] | list[Any]) -> Path:
    """Write `obj` as indented JSON atomically and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
