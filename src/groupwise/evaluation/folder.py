"""The output folder of an evaluation: what it holds, whether it may be resumed, what is done.

Files (see groupwise.records):
- config.json: the settings; a rerun into the same folder resumes, and refuses if a setting
  that changes the samples differs (`EvalConfig.SAMPLE_KEYS`, the prompt template's text
  among them: `prompt_digest`), unless no sample was saved yet.
- samples.jsonl: one line per completion, appended and flushed after every generate call, so a
  crash loses at most the batch in flight. A problem is done when all n of its samples are
  there; a rerun samples only the others, each with the seed it had (sampling.problem_seed), so
  the resumed folder holds the samples an uninterrupted run would have.
- problems.jsonl: question and gold of every evaluated problem (for the analyses).
- results.json / results.md / results.png: written by groupwise.evaluation.results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from groupwise.evaluation.config import (
    ADDED_SETTINGS,
    FORMER_GRADINGS,
    MEAN_LOGP_NOTES,
    EvalConfig,
)
from groupwise.records import (
    CONFIG_FILE,
    PROBLEMS_FILE,
    SAMPLES_FILE,
    ProblemKey,
    Sample,
    SavedProblem,
    ends_with_newline,
    group_by_problem,
    iter_jsonl,
    read_json,
    read_jsonl,
    read_problems,
    samples_from_rows,
    write_json,
    write_problems,
)

if TYPE_CHECKING:
    from groupwise.data import Problem


class ResumeMismatch(ValueError):
    """An output folder holds samples made with settings that differ from the requested ones."""


def _holds_samples(output_dir: Path) -> bool:
    """Whether output_dir/samples.jsonl has at least one whole line (read up to the first)."""
    path = output_dir / SAMPLES_FILE
    if not path.is_file():
        return False
    rows = iter_jsonl(path, on_torn_tail=lambda line: None)
    try:
        return next(rows, None) is not None
    finally:
        rows.close()


def check_folder(config: EvalConfig, output_dir: Path) -> None:
    """Raise ResumeMismatch unless output_dir is new, holds no sample yet, or holds samples
    made with `config`'s sample-changing settings (naming every one that differs)."""
    config_path = output_dir / CONFIG_FILE
    if not _holds_samples(output_dir):
        return  # nothing sampled yet (e.g. a crash before the first sample): any settings do
    if not config_path.is_file():
        raise ResumeMismatch(
            f"{output_dir} has {SAMPLES_FILE} but no {CONFIG_FILE}: cannot "
            "tell how its samples were made; use a new --output folder"
        )
    saved = read_json(config_path)
    mine = config.to_dict()
    # a setting added since the folder was written: the folder was made with its old value
    saved = {**ADDED_SETTINGS, **saved}
    if "grading" in saved and "checking" not in saved:  # the setting's former name and values
        saved["checking"] = FORMER_GRADINGS.get(saved["grading"], saved["grading"])
    if "prompt_digest" not in saved:  # written before the digest: the texts of then
        saved["prompt_digest"] = _former_prompt_digest(saved.get("prompt"))
    diffs = [
        f"{k}: saved {saved.get(k)!r}, now {mine[k]!r}"
        for k in config.SAMPLE_KEYS
        if saved.get(k) != mine[k]
    ]
    if diffs:
        raise ResumeMismatch(
            f"{output_dir} holds samples made with other settings ("
            + "; ".join(diffs)
            + "); use a new --output folder or the same "
            "settings to resume"
        )


def _former_prompt_digest(prompt: str | None) -> str | None:
    """The digest of prompt `prompt` as folders written before config.json had one show it:
    "amir" then was the wording kept as "amir_groupwise" (the official text came later)."""
    from groupwise.data.prompts import TEMPLATES, template_digest

    former = "amir_groupwise" if prompt == "amir" else prompt
    return template_digest(former) if former in TEMPLATES else None


def _complete_problems(output_dir: Path, n: int) -> tuple[dict[ProblemKey, list[Sample]], bool]:
    """The complete problems of output_dir/samples.jsonl (exactly the sample indices 0..n-1),
    and whether the file holds anything else: incomplete problems, a torn last line, or a last
    line without its newline (the next append would be glued to it)."""
    path = output_dir / SAMPLES_FILE
    if not path.is_file():
        return {}, False
    rows, torn = read_jsonl(path)
    groups = group_by_problem(samples_from_rows(rows, path))
    done = {k: g for k, g in groups.items() if [s.sample for s in g] == list(range(n))}
    stray = sum(len(g) for g in done.values()) != len(rows)
    return done, torn or stray or not ends_with_newline(path)


def load_done(output_dir: Path, n: int) -> dict[ProblemKey, list[Sample]]:
    """Samples of the problems already complete in output_dir/samples.jsonl.

    A problem is complete when it has exactly the sample indices 0..n-1. Anything else
    (incomplete problems, a torn last line) is dropped by rewriting the file atomically.
    """
    done, stray = _complete_problems(output_dir, n)
    if stray:
        path = output_dir / SAMPLES_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(
            "".join(s.to_json() + "\n" for g in done.values() for s in g), encoding="utf-8"
        )
        tmp.replace(path)
    return done


def count_pending(
    config: EvalConfig, problems: Mapping[str, Sequence[Problem]], output_dir: Path
) -> int:
    """How many problems still need sampling in output_dir (checks the folder first)."""
    check_folder(config, output_dir)
    done, _ = _complete_problems(output_dir, config.n)
    return sum((b, p.id) not in done for b, items in problems.items() for p in items)


def prepare_folder(
    config: EvalConfig, output_dir: Path, problems: Mapping[str, Sequence[Problem]]
) -> None:
    """Check the folder, then write config.json and add `problems` to problems.jsonl."""
    from groupwise.data import difficulty_level

    check_folder(config, output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_json(
        output_dir / CONFIG_FILE, {**config.to_dict(), "note": MEAN_LOGP_NOTES[config.engine]}
    )
    saved = (
        read_problems(output_dir / PROBLEMS_FILE) if (output_dir / PROBLEMS_FILE).is_file() else {}
    )
    for bench, items in problems.items():
        for p in items:
            saved[(bench, p.id)] = SavedProblem(
                bench,
                p.id,
                p.question,
                p.answer,
                list(p.choices) if p.choices else None,
                difficulty_level(p),
            )
    write_problems(output_dir / PROBLEMS_FILE, saved.values())
