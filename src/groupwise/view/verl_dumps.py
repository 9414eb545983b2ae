"""verl's rollout dumps read into the page model of a training run (docs/guides/view.md,
"verl's rollout dumps").

verl's trainer with `trainer.rollout_data_dir=DIR` writes DIR/N.jsonl at step N: one line per
completion, {"input": the rendered prompt, "output", "gts": the gold, "score": the reward
total, "step", and each reward extra info of the step (groupwise's reward function adds
"acc")}. A group is the completions of one prompt within a step (in verl's batch order, which
`balance_batch` may have shuffled: they are gathered by prompt). Correct: "acc" where the dump
has it, else a score above 0. The dumps hold no advantages or pairs; where a line carries
numeric "advantages" (or "advantage") it is shown.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from groupwise.records import JsonFileError, iter_jsonl
from groupwise.view.records import DUMP_NAME, choose_steps

SKIP = {"input", "output", "gts", "score", "step", "acc", "request_id"}


def dump_steps(folder: Path) -> dict[int, Path]:
    """step -> DIR/step.jsonl of verl's rollout dumps in `folder` (empty where it has none)."""
    found = {}
    for path in folder.iterdir():
        if DUMP_NAME.match(path.name) and path.is_file():
            found[int(path.stem)] = path
    return dict(sorted(found.items()))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _lines(path: Path) -> list[dict[str, Any]]:
    rows = []
    for number, row in iter_jsonl(path, on_torn_tail=lambda _: None):
        if not isinstance(row, dict) or not isinstance(row.get("output"), str):
            raise JsonFileError(path, number, "not a verl rollout line (no 'output' text)")
        if not isinstance(row.get("input"), str) or not _is_number(row.get("score")):
            raise JsonFileError(path, number, "not a verl rollout line ('input', 'score')")
        rows.append(row)
    return rows


def _correct(row: dict[str, Any]) -> int:
    acc = row.get("acc")
    if isinstance(acc, bool | int | float):
        return int(bool(acc))
    return int(row["score"] > 0)


def _groups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The completions of each prompt, in the order the prompts first appear."""
    by_prompt: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_prompt.setdefault(row["input"], []).append(row)
    groups = []
    for index, (prompt, members) in enumerate(by_prompt.items()):
        group: dict[str, Any] = {
            "id": f"prompt {index}",
            "q": prompt,
            "gold": members[0].get("gts"),
            "pairs": [],
            "t": [m["output"] for m in members],
            "ok": [_correct(m) for m in members],
            "rw": [round(float(m["score"]), 5) for m in members],
        }
        for key in ("advantages", "advantage"):
            if all(_is_number(m.get(key)) for m in members):
                group["adv"] = [round(float(m[key]), 5) for m in members]
                break
        extra = [k for k, v in members[0].items() if k not in SKIP and _is_number(v)]
        for key in extra:
            if key not in ("advantages", "advantage") and all(
                _is_number(m.get(key)) for m in members
            ):
                group["col:" + key] = [round(float(m[key]), 5) for m in members]
        groups.append(group)
    return groups


def _summary(step: int, groups: list[dict[str, Any]]) -> dict[str, Any]:
    """The steps list's entry of a step: accuracy and group shares from its dump."""
    oks = [ok for g in groups for ok in g["ok"]]
    kinds = [sum(g["ok"]) == 0 for g in groups], [sum(g["ok"]) == len(g["ok"]) for g in groups]
    wrong, right = (sum(k) / len(groups) for k in kinds)
    return {
        "step": step,
        "acc": round(sum(oks) / len(oks), 5),
        "wrong": round(wrong, 5),
        "right": round(right, 5),
        "mixed": round(1 - wrong - right, 5),
    }


def read_verl_dumps(folder: Path, steps: list[int] | None, max_steps: int) -> dict[str, Any]:
    """A folder of verl rollout dumps as a training run's page model."""
    files = dump_steps(folder)
    chosen = set(choose_steps(list(files), steps, max_steps))
    summaries, kept = [], {}
    for step, path in files.items():
        groups = _groups(_lines(path))
        if groups:
            summaries.append(_summary(step, groups))
        if step in chosen:
            kept[step] = groups
    return {
        "kind": "run",
        "name": folder.name,
        "path": str(folder),
        "settings": {"source": "verl rollout dumps"},
        "steps": summaries,
        "rollout_steps": list(files),
        "groups": kept,
    }
