"""The saved samples of an evaluation run: their schema, reading and writing.

`groupwise eval --output DIR` writes, per completion, one JSON line of DIR/samples.jsonl
(`Sample`), one line per evaluated problem to DIR/problems.jsonl (the question and gold, so the
analyses need no data folder), and DIR/config.json (the settings that produced the samples).
The analyses read those files back through this module; a run is named on their command
lines as NAME=EVAL_DIR (or EVAL_DIR alone, named after its folder).
"""

from __future__ import annotations

import json
import warnings
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SAMPLES_FILE = "samples.jsonl"
PROBLEMS_FILE = "problems.jsonl"
CONFIG_FILE = "config.json"

VERDICTS = ("correct", "wrong", "no_answer", "timeout", "error")

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
    """A problem as saved in problems.jsonl (the fields of groupwise.data.Problem we need)."""

    benchmark: str
    id: str
    question: str
    answer: str
    choices: list[str] | None = None

    @property
    def key(self) -> ProblemKey:
        return (self.benchmark, self.id)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)


@dataclass
class EvalRun:
    """One evaluation run read from its folder: samples, problems (may be empty), config."""

    name: str
    path: Path
    samples: list[Sample]
    problems: dict[ProblemKey, SavedProblem] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    def by_problem(self) -> dict[ProblemKey, list[Sample]]:
        return group_by_problem(self.samples)


def _sample_from(obj: Any, where: str) -> Sample:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    fields: dict[str, Any] = {}
    for name, kinds in _SAMPLE_TYPES.items():
        if name not in obj:
            raise ValueError(f"{where}: missing field {name!r} "
                             f"(fields: {', '.join(_SAMPLE_TYPES)})")
        value = obj[name]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise ValueError(f"{where}: field {name!r} has type {type(value).__name__}, "
                             f"expected {' or '.join(k.__name__ for k in kinds)}")
        fields[name] = value
    if fields["verdict"] not in VERDICTS:
        raise ValueError(f"{where}: field 'verdict' is {fields['verdict']!r}, "
                         f"expected one of {', '.join(VERDICTS)}")
    for name in ("mean_logp", "confidence"):
        if fields[name] is not None:
            fields[name] = float(fields[name])
    return Sample(**fields)


_NONE = type(None)
_SAMPLE_TYPES: dict[str, tuple[type, ...]] = {
    "benchmark": (str,), "problem_id": (str,), "sample": (int,), "completion": (str,),
    "extracted": (str, _NONE), "verdict": (str,), "tokens": (int,), "truncated": (bool,),
    "mean_logp": (float, int, _NONE), "confidence": (float, int, _NONE), "gold": (str,),
}


def read_jsonl(path: str | Path) -> tuple[list[tuple[int, Any]], bool]:
    """Parse a JSON-lines file into (line number, object) pairs, and whether its tail is torn.

    A last line that is not valid JSON and has no final newline is what a crash during an
    append leaves behind: it is skipped and reported as torn (True). Any other bad line is an
    error naming the file and line.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    out: list[tuple[int, Any]] = []
    torn = False
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append((number, json.loads(line)))
        except json.JSONDecodeError as err:
            if number == len(lines) and not text.endswith("\n"):
                torn = True
                continue
            raise ValueError(f"{path}:{number}: not valid JSON ({err.msg})") from err
    return out, torn


def read_samples(path: str | Path) -> list[Sample]:
    """All samples of a samples.jsonl file, validated field by field.

    Duplicate (benchmark, problem_id, sample) entries are an error; a torn last line (crash
    during an append) is skipped with a warning.
    """
    path = Path(path)
    rows, torn = read_jsonl(path)
    if torn:
        warnings.warn(f"{path}: skipped a torn last line (interrupted write)", stacklevel=2)
    samples: list[Sample] = []
    seen: dict[tuple[str, str, int], int] = {}
    for number, obj in rows:
        sample = _sample_from(obj, f"{path}:{number}")
        ident = (sample.benchmark, sample.problem_id, sample.sample)
        if ident in seen:
            raise ValueError(f"{path}:{number}: duplicate sample {ident} (first on line "
                             f"{seen[ident]})")
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
            raise ValueError(f"{path}:{number}: {err} (fields: benchmark, id, question, "
                             "answer, choices)") from err
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


def parse_run_specs(specs: Sequence[str]) -> dict[str, Path]:
    """Command-line runs as {name: folder}: NAME=EVAL_DIR, or EVAL_DIR named after its folder."""
    runs: dict[str, Path] = {}
    for spec in specs:
        name, sep, folder = spec.partition("=")
        if not sep:
            name, folder = Path(spec).name, spec
        if not name or not folder:
            raise ValueError(f"run {spec!r}: expected NAME=EVAL_DIR or EVAL_DIR")
        if name in runs:
            raise ValueError(f"run name {name!r} given twice ({runs[name]} and {folder}); "
                             "name them with NAME=EVAL_DIR")
        runs[name] = Path(folder)
    return runs


def load_run(name: str, path: str | Path, benchmarks: Sequence[str] | None = None) -> EvalRun:
    """Read an evaluation folder (or a samples.jsonl path); keep only `benchmarks` if given."""
    path = Path(path)
    folder = path.parent if path.is_file() else path
    samples_path = path if path.is_file() else folder / SAMPLES_FILE
    if not samples_path.is_file():
        raise FileNotFoundError(f"run {name!r}: no {SAMPLES_FILE} in {folder} "
                                "(expected the --output folder of `groupwise eval`)")
    samples = read_samples(samples_path)
    if benchmarks:
        present = sorted({s.benchmark for s in samples})
        missing = [b for b in benchmarks if b not in present]
        if missing:
            raise ValueError(f"run {name!r}: benchmark(s) {', '.join(missing)} not in "
                             f"{samples_path} (present: {', '.join(present)})")
        samples = [s for s in samples if s.benchmark in benchmarks]
    problems_path = folder / PROBLEMS_FILE
    problems = read_problems(problems_path) if problems_path.is_file() else {}
    config_path = folder / CONFIG_FILE
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    return EvalRun(name=name, path=folder, samples=samples, problems=problems, config=config)


def load_runs(specs: Sequence[str], benchmarks: Sequence[str] | None = None) -> list[EvalRun]:
    """`load_run` for each NAME=EVAL_DIR spec, in the order given."""
    return [load_run(name, path, benchmarks) for name, path in parse_run_specs(specs).items()]


def common_problems(runs: Sequence[EvalRun]) -> list[ProblemKey]:
    """Problems present in every run, in the first run's order; warns when runs differ."""
    keys = [list(run.by_problem()) for run in runs]
    shared = set(keys[0]).intersection(*keys[1:]) if keys else set()
    if any(len(k) != len(shared) for k in keys):
        sizes = ", ".join(f"{run.name}: {len(k)}" for run, k in zip(runs, keys, strict=True))
        warnings.warn(f"runs cover different problems ({sizes}); using the {len(shared)} "
                      "they share", stacklevel=2)
    return [k for k in keys[0] if k in shared] if keys else []


def write_json(path: str | Path, obj: Mapping[str, Any] | list[Any]) -> Path:
    """Write `obj` as indented JSON atomically and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
