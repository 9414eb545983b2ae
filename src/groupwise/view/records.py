"""Run and evaluation folders read into the compact JSON model the page shows
(docs/guides/view.md, "What the page reads").

A training run gives its steps (metrics.jsonl: accuracy, group shares, pairs, dynamic
sampling's dropped groups) and, for the steps chosen (`choose_steps`), their groups from
rollouts.jsonl: question, gold, each completion with its reward columns, correctness, advantage,
shaped reward (LENS: the calibrated one, and its confidence relative to D(q)), cut flag and the
sampler's mean log-prob, and AMIR's pairs as (chosen, rejected) indices inside the group. A
run of GroupwiseGRPOTrainer (`log_rollouts=True`) has rollouts.jsonl only: its steps list comes
from the lines, its settings from their "settings". An evaluation folder gives its problems
with their samples and per-problem pass@k.

Keys are short on purpose: a 1,000-step run's page carries every completion of its chosen steps.
Bad input is a ValueError naming the file (and line).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from groupwise.metrics import pass_at_k
from groupwise.records import (
    PROBLEMS_FILE,
    RESULTS_FILE,
    SAMPLES_FILE,
    JsonFileError,
    iter_jsonl,
    read_json,
)
from groupwise.rewards.components import correct_value

ROLLOUTS_FILE = "rollouts.jsonl"
METRICS_FILE = "metrics.jsonl"
RUN_CONFIG = "config.yaml"

STEP_KEYS = {
    "accuracy": "acc",
    "reward_mean": "reward",
    "group_mixed": "mixed",
    "group_all_correct": "right",
    "group_all_wrong": "wrong",
    "pairs": "pairs",
    "truncated_fraction": "cut",
    "completion_length_mean": "len",
    "groups_kept": "kept",
    "groups_dropped_all_correct": "drop_right",
    "groups_dropped_all_wrong": "drop_wrong",
    "groups_dropped_mixed": "drop_mixed",
    "groups_filled": "filled",
}
"""metrics.jsonl key -> the page's key, for the steps list."""


DUMP_NAME = re.compile(r"^\d+\.jsonl$")
"""verl's rollout dump of a step (trainer.rollout_data_dir/N.jsonl)."""


def folder_kind(folder: Path) -> str:
    """ "run" (rollouts.jsonl or metrics.jsonl), "eval" (samples.jsonl), "verl" (verl's rollout
    dumps, N.jsonl) or a ValueError saying what the folder lacks."""
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a folder")
    if (folder / ROLLOUTS_FILE).is_file() or (folder / METRICS_FILE).is_file():
        return "run"
    if (folder / SAMPLES_FILE).is_file():
        return "eval"
    if any(DUMP_NAME.match(path.name) for path in folder.iterdir()):
        return "verl"
    raise ValueError(
        f"{folder}: neither a training run (no {ROLLOUTS_FILE} or {METRICS_FILE}), an "
        f"evaluation folder (no {SAMPLES_FILE}) nor verl's rollout dumps (no N.jsonl)"
    )


def choose_steps(available: list[int], steps: list[int] | None, max_steps: int) -> list[int]:
    """The steps whose groups the page carries: `steps` where given (each must be available),
    else all of them up to `max_steps`, else `max_steps` evenly spaced ones, first and last
    included (docs/guides/view.md, "Large runs")."""
    if steps:
        missing = sorted(set(steps) - set(available))
        if missing:
            raise ValueError(f"steps {missing} are not in {ROLLOUTS_FILE}")
        return sorted(set(steps))
    if max_steps <= 0 or len(available) <= max_steps:
        return list(available)
    if max_steps == 1:
        return [available[-1]]
    span = len(available) - 1
    picks = {available[round(i * span / (max_steps - 1))] for i in range(max_steps)}
    return sorted(picks)


def _rows(path: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    """(line, object) of a JSON-lines file; a line that is not an object names the file:line."""
    for number, row in iter_jsonl(path, on_torn_tail=lambda _: None):
        if not isinstance(row, dict):
            raise JsonFileError(path, number, "not a JSON object")
        yield number, row


def _number(value: Any) -> float | None:
    """A finite number rounded for the page, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return round(float(value), 5)


def read_steps(folder: Path) -> list[dict[str, Any]]:
    """The steps list of a run: one entry per metrics.jsonl line, STEP_KEYS' values."""
    path = folder / METRICS_FILE
    if not path.is_file():
        return []
    steps = []
    for number, row in _rows(path):
        entry = {"step": row.get("step", number)}
        entry.update({short: _number(row.get(key)) for key, short in STEP_KEYS.items()})
        steps.append({k: v for k, v in entry.items() if v is not None})
    return steps


def _lens_settings(folder: Path) -> dict[str, Any]:
    """From config.yaml: the method's name, G, and under LENS the correctness component and what
    it gives a correct answer (to turn a calibrated reward back into p/D)."""
    path = folder / RUN_CONFIG
    if not path.is_file():
        return {}
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML ({err})") from None
    algorithm, reward = config.get("algorithm") or {}, config.get("reward") or {}
    out: dict[str, Any] = {
        "advantage": algorithm.get("advantage", "grpo"),
        "amir": bool(algorithm.get("amir", False)),
        "group_size": (config.get("rollout") or {}).get("group_size"),
        "model": (config.get("model") or {}).get("name"),
    }
    component = reward.get("correctness_component")
    weight = (reward.get("weights") or {}).get(component, 0.0) if component else 0.0
    if out["advantage"] == "lens" and component and weight:
        out["component"], out["correct_reward"] = component, weight * correct_value(component)
        out["weight"] = weight
    return out


LINE_SETTINGS = (
    "source",
    "advantage",
    "amir",
    "group_size",
    "model",
    "component",
    "weight",
    "correct_reward",
)
"""The keys of a rollouts line's "settings" (GroupwiseGRPOTrainer's lines carry it; its folder
has no config.yaml) that the page reads."""


def _line_settings(row: dict[str, Any]) -> dict[str, Any]:
    """A rollouts line's "settings" (method, G, model, LENS's correctness reward), {} where it
    has none."""
    settings = row.get("settings")
    if not isinstance(settings, dict):
        return {}
    out = {key: settings[key] for key in LINE_SETTINGS if key in settings}
    if not all(_number(out.get(key)) for key in ("weight", "correct_reward")):
        for key in ("component", "weight", "correct_reward"):
            out.pop(key, None)
    return out


def _column(row: dict[str, Any], key: str, size: int, path: Path, number: int) -> list[Any]:
    """A whole-batch list of the rollouts line, `size` long (a ValueError naming file:line)."""
    values = row.get(key)
    if not isinstance(values, list) or len(values) != size:
        raise JsonFileError(path, number, f"{key!r} is not a list of {size} values")
    return values


def _optional(row: dict[str, Any], key: str, size: int) -> list[Any] | None:
    values = row.get(key)
    return values if isinstance(values, list) and len(values) == size else None


def _lens_ratios(
    row: dict[str, Any], settings: dict[str, Any], ok: list[int], group_size: int
) -> tuple[list[float | None], list[float | None]] | None:
    """Under LENS, each wrong completion's calibrated correctness rt and its confidence relative
    to the group's D(q), p/D = x / (1 + x) with x = -G rt (docs/algorithms.md §3); None where
    the run is not LENS or the line lacks the rewards before shaping."""
    size = len(ok)
    unshaped, shaped = _optional(row, "unshaped_rewards", size), row.get("rewards")
    if "correct_reward" not in settings or unshaped is None:
        return None
    column = (row.get("reward_columns") or {}).get(settings["component"]) or [0.0] * size
    rts: list[float | None] = []
    ratios: list[float | None] = []
    for i in range(size):
        parts = [v if _number(v) is not None else None for v in (shaped[i], unshaped[i], column[i])]
        if ok[i] or None in parts:  # a TRL row no reward function scored: null
            rts.append(None)
            ratios.append(None)
            continue
        rt = (parts[0] - parts[1] + settings["weight"] * parts[2]) / settings["correct_reward"]
        x = max(-group_size * rt, 0.0)
        rts.append(_number(rt))
        ratios.append(_number(x / (1.0 + x)))
    return rts, ratios


def _step_groups(
    row: dict[str, Any], settings: dict[str, Any], path: Path, number: int
) -> list[dict[str, Any]]:
    """The groups of one rollouts.jsonl line."""
    ids = row.get("problem_ids")
    if not isinstance(ids, list) or not ids:
        raise JsonFileError(path, number, "'problem_ids' is not a non-empty list")
    texts = row.get("completions")
    size = len(texts) if isinstance(texts, list) else -1
    if size <= 0 or size % len(ids):
        raise JsonFileError(path, number, f"'completions' is not {len(ids)} groups of completions")
    columns = {key: _column(row, key, size, path, number) for key in ("rewards", "advantages")}
    for key in ("golds", "correct"):  # null in a TRL run without them: no gold, reward > 0
        columns[key] = (
            [None] * size if row.get(key) is None else _column(row, key, size, path, number)
        )
    group_size = size // len(ids)
    per_row = {
        "t": texts,
        "ok": _correct(columns["correct"], columns["rewards"]),
        "adv": [_number(v) for v in columns["advantages"]],
        "rw": [_number(v) for v in columns["rewards"]],
    }
    for key, short in (("unshaped_rewards", "un"), ("truncated", "cut")):
        values = _optional(row, key, size)
        if values is not None:
            per_row[short] = [_number(v) if short == "un" else int(bool(v)) for v in values]
    logp = _optional(row, "sampler_mean_logp", size)
    if logp is not None:
        per_row["conf"] = [None if v is None else _number(math.exp(v)) for v in logp]
    lens = _lens_ratios(row, settings, per_row["ok"], group_size)
    if lens is not None:
        per_row["rt"], per_row["pd"] = lens
    for name, values in (row.get("reward_columns") or {}).items():
        if isinstance(values, list) and len(values) == size:
            per_row["col:" + name] = [_number(v) for v in values]
    pairs = _pairs(row.get("pairs"), size, path, number)
    questions = _optional(row, "questions", len(ids))
    return [
        _group(q, ids[q], questions, columns["golds"], per_row, pairs, group_size)
        for q in range(len(ids))
    ]


def _correct(correct: list[Any], rewards: list[Any]) -> list[int]:
    """1 / 0 per completion: its logged correctness, else (a TRL run without a correctness
    reward logs null) a reward total above 0, as verl's dumps without "acc"."""
    return [
        int(bool(c)) if c is not None else int((_number(r) or 0.0) > 0)
        for c, r in zip(correct, rewards, strict=True)
    ]


def _line_summary(step: int, row: dict[str, Any]) -> dict[str, Any]:
    """The steps list's entry of a rollouts line, for a run without metrics.jsonl (a
    GroupwiseGRPOTrainer run): accuracy, group shares, AMIR pairs and the cut share, from the
    line; the step alone where the line's lists do not hold whole groups."""
    ids, texts, rewards = row.get("problem_ids"), row.get("completions"), row.get("rewards")
    if not (isinstance(ids, list) and ids and isinstance(texts, list) and texts):
        return {"step": step}
    size = len(texts)
    correct = _optional(row, "correct", size) or [None] * size
    if size % len(ids) or not isinstance(rewards, list) or len(rewards) != size:
        return {"step": step}
    ok, group_size = _correct(correct, rewards), size // len(ids)
    groups = [sum(ok[g : g + group_size]) for g in range(0, size, group_size)]
    entry = {
        "step": step,
        "acc": sum(ok) / size,
        "right": sum(c == group_size for c in groups) / len(groups),
        "wrong": sum(c == 0 for c in groups) / len(groups),
    }
    entry["mixed"] = 1.0 - entry["right"] - entry["wrong"]
    pairs, cut = row.get("pairs"), _optional(row, "truncated", size)
    if isinstance(pairs, list) and len(pairs) == 2 and isinstance(pairs[0], list):
        entry["pairs"] = len(pairs[0])
    if cut is not None:
        entry["cut"] = sum(bool(c) for c in cut) / size
    return {key: value if key == "step" else _number(value) for key, value in entry.items()}


def _pairs(value: Any, size: int, path: Path, number: int) -> list[tuple[int, int]]:
    """AMIR's (chosen, rejected) whole-batch rows of a rollouts line."""
    if value in (None, []):
        return []
    if not (isinstance(value, list) and len(value) == 2 and len(value[0]) == len(value[1])):
        raise JsonFileError(path, number, "'pairs' is not [chosen rows, rejected rows]")
    pairs = list(zip(value[0], value[1], strict=True))
    if any(not (0 <= c < size and 0 <= r < size) for c, r in pairs):
        raise JsonFileError(path, number, f"'pairs' names a row outside 0..{size - 1}")
    return pairs


def _group(
    q: int,
    problem_id: str,
    questions: list[Any] | None,
    golds: list[Any],
    per_row: dict[str, list[Any]],
    pairs: list[tuple[int, int]],
    group_size: int,
) -> dict[str, Any]:
    start, end = q * group_size, (q + 1) * group_size
    group = {
        "id": problem_id,
        "q": questions[q] if questions is not None else None,
        "gold": golds[start],
        "pairs": [[c - start, r - start] for c, r in pairs if start <= c < end],
    }
    group.update({key: values[start:end] for key, values in per_row.items()})
    return group


def read_run(folder: Path, steps: list[int] | None = None, max_steps: int = 50) -> dict[str, Any]:
    """A training run's page model: its settings, steps list and the chosen steps' groups.
    A folder without config.yaml takes its settings from the first rollouts line's "settings"
    (a GroupwiseGRPOTrainer run: docs/guides/view.md, "A TRL run"), and one without
    metrics.jsonl its steps list from the rollouts lines."""
    settings = _lens_settings(folder)
    path = folder / ROLLOUTS_FILE
    lines: dict[int, tuple[int, dict[str, Any]]] = {}
    if path.is_file():
        for number, row in _rows(path):
            step = row.get("step")
            if not isinstance(step, int):
                raise JsonFileError(path, number, "no integer 'step'")
            lines[step] = (number, row)  # a resumed run's later line wins
    chosen = choose_steps(sorted(lines), steps, max_steps)
    if not settings and lines:
        settings = _line_settings(lines[min(lines)][1])
    summaries = read_steps(folder) or [_line_summary(s, lines[s][1]) for s in sorted(lines)]
    return {
        "kind": "run",
        "name": folder.name,
        "path": str(folder),
        "settings": settings,
        "steps": summaries,
        "rollout_steps": sorted(lines),
        "groups": {
            step: _step_groups(lines[step][1], settings, path, lines[step][0]) for step in chosen
        },
    }


SAMPLE_FIELDS = {
    "completion": "t",
    "verdict": "v",
    "extracted": "e",
    "confidence": "conf",
    "tokens": "tok",
    "truncated": "cut",
    "mean_logp": "lp",
}
"""samples.jsonl key -> the page's key, per sample."""


def _eval_ks(folder: Path) -> list[int]:
    """The k of results.json's config (1 where the folder has none)."""
    path = folder / RESULTS_FILE
    if not path.is_file():
        return [1]
    results = read_json(path)
    ks = (results.get("config") or {}).get("ks") if isinstance(results, dict) else None
    return [k for k in ks if isinstance(k, int) and k > 0] if isinstance(ks, list) else [1]


def _questions(folder: Path) -> dict[tuple[str, str], str]:
    """(benchmark, id) -> question, from problems.jsonl where the folder has one."""
    path = folder / PROBLEMS_FILE
    if not path.is_file():
        return {}
    return {(row.get("benchmark"), row.get("id")): row.get("question") for _, row in _rows(path)}


def _sample_rows(folder: Path) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(benchmark, problem id) -> its samples.jsonl lines in sample order."""
    path = folder / SAMPLES_FILE
    problems: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for number, row in _rows(path):
        key = (row.get("benchmark"), row.get("problem_id"))
        if not all(isinstance(part, str) for part in key) or "completion" not in row:
            raise JsonFileError(path, number, "not a sample (benchmark, problem_id, completion)")
        problems.setdefault(key, []).append(row)
    for rows in problems.values():
        rows.sort(key=lambda r: r.get("sample", 0) if isinstance(r.get("sample"), int) else 0)
    return problems


def _problem(
    key: tuple[str, str], rows: list[dict[str, Any]], question: str | None, ks: list[int]
) -> dict[str, Any]:
    n = len(rows)
    c = sum(1 for r in rows if r.get("correct") is True or r.get("verdict") == "correct")
    samples: dict[str, list[Any]] = {short: [] for short in SAMPLE_FIELDS.values()}
    for row in rows:
        for key_name, short in SAMPLE_FIELDS.items():
            value = row.get(key_name)
            samples[short].append(_number(value) if short in ("conf", "lp") else value)
    samples["ok"] = [int(r.get("correct") is True or r.get("verdict") == "correct") for r in rows]
    return {
        "b": key[0],
        "id": key[1],
        "q": question,
        "gold": rows[0].get("gold"),
        "n": n,
        "c": c,
        "pk": {str(k): _number(float(pass_at_k(n, c, k))) for k in ks if k <= n},
        "s": samples,
    }


def read_eval(folder: Path) -> dict[str, Any]:
    """An evaluation folder's page model: its problems with their samples and pass@k."""
    ks = _eval_ks(folder)
    questions = _questions(folder)
    problems = [
        _problem(key, rows, questions.get(key), ks) for key, rows in _sample_rows(folder).items()
    ]
    if not problems:
        raise ValueError(f"{folder / SAMPLES_FILE}: no samples")
    return {
        "kind": "eval",
        "name": folder.name,
        "path": str(folder),
        "ks": ks,
        "benchmarks": sorted({p["b"] for p in problems}),
        "problems": problems,
    }


def run_as_problems(run: dict[str, Any]) -> dict[str, Any]:
    """A run's page model as an evaluation's, for two folders side by side: each problem the run
    trained on with its latest group among the chosen steps (completions as samples)."""
    latest: dict[str, tuple[int, dict[str, Any]]] = {}
    for step in sorted(run["groups"]):
        for group in run["groups"][step]:
            latest[group["id"]] = (step, group)
    problems = []
    for problem_id, (step, group) in latest.items():
        n, c = len(group["t"]), sum(group["ok"])
        samples = {"t": group["t"], "ok": group["ok"], "cut": group.get("cut"), "v": None}
        problems.append(
            {
                "b": f"step {step}",
                "id": problem_id,
                "q": group["q"],
                "gold": group["gold"],
                "n": n,
                "c": c,
                "pk": {"1": _number(c / n)},
                "s": samples,
            }
        )
    return {**run, "kind": "eval", "ks": [1], "benchmarks": [], "problems": problems}


def compare(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two folders' problems side by side, matched by (benchmark, id) (by id for a run): those
    one solves (a correct sample) and the other does not first, then by the difference of
    pass@1, then in the first folder's order."""
    first = run_as_problems(first) if first["kind"] == "run" else first
    second = run_as_problems(second) if second["kind"] == "run" else second
    by_id = first.get("groups") is not None or second.get("groups") is not None

    def key(p: dict[str, Any]) -> Any:
        return p["id"] if by_id else (p["b"], p["id"])

    other = {key(p): p for p in second["problems"]}
    rows = []
    for order, problem in enumerate(first["problems"]):
        match = other.get(key(problem))
        if match is None:
            continue
        flip = (problem["c"] > 0) != (match["c"] > 0)
        gap = abs(problem["c"] / problem["n"] - match["c"] / match["n"])
        rows.append((not flip, -gap, order, problem, match))
    rows.sort(key=lambda r: r[:3])
    if not rows:
        raise ValueError(f"{first['path']} and {second['path']} share no problem")
    return {
        "kind": "compare",
        "names": [first["name"], second["name"]],
        "paths": [first["path"], second["path"]],
        "benchmarks": sorted({r[3]["b"] for r in rows}),
        "pairs": [[r[3], r[4]] for r in rows],
    }
