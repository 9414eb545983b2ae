"""groupwise view without a browser: the page model read from run and evaluation folders (LENS's
p/D recovered from the logged rewards, AMIR pairs inside their group, steps sampled evenly), two
folders side by side with the problems one solves and the other does not first, the JSON blocks
that no completion can break out of, and one clear error for a folder or line that is not what
the command reads (docs/guides/view.md). The page in a real browser: tests/test_view_browser.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from groupwise.cli import main
from groupwise.view.page import render_page
from groupwise.view.records import choose_steps, compare, folder_kind, read_eval, read_run
from groupwise.view.verl_dumps import read_verl_dumps


def _rollout_line(step: int, texts: list[str], correct: list[bool]) -> dict:
    """A rollouts.jsonl line of two groups of 2 under LENS with binary rewards: a wrong answer's
    calibrated reward rt in rewards, its 0 in unshaped_rewards."""
    return {
        "step": step,
        "problem_ids": [f"p{step}a", f"p{step}b"],
        "questions": ["1+1?", "2+2?"],
        "completions": texts,
        "golds": ["2", "2", "4", "4"],
        "correct": correct,
        "reward_columns": {"binary": [float(c) for c in correct]},
        "rewards": [1.0 if c else -0.25 for c in correct],  # x = -G rt = 0.5: p/D = 1/3
        "unshaped_rewards": [float(c) for c in correct],
        "advantages": [0.7 if c else -0.7 for c in correct],
        "pairs": [[0], [1]],
        "truncated": [False, True, False, False],
        "sampler_mean_logp": None,
    }


def make_run(folder: Path, steps: int = 3) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(
        "algorithm: {advantage: lens, amir: true}\nrollout: {group_size: 2}\n"
        "reward: {weights: {binary: 1.0}, correctness_component: binary}\nmodel: {name: m}\n"
    )
    lines = [
        _rollout_line(s, ["#### 2", "#### 3 </script><b>", "#### 5", "#### 6"], [1, 0, 0, 0])
        for s in range(1, steps + 1)
    ]
    (folder / "rollouts.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    metrics = [{"step": s, "accuracy": 0.25, "pairs": 1, "groups_kept": 2} for s in range(1, 4)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return folder


def make_eval(folder: Path, solved: dict[str, int], n: int = 2) -> Path:
    """An evaluation folder: problem id -> correct samples of n."""
    folder.mkdir(parents=True)
    rows, problems = [], []
    for problem, right in solved.items():
        problems.append({"benchmark": "b", "id": problem, "question": f"Q{problem}", "answer": "1"})
        for i in range(n):
            ok = i < right
            rows.append(
                {
                    "benchmark": "b",
                    "problem_id": problem,
                    "sample": i,
                    "completion": f"{problem} sample {i}",
                    "extracted": "1" if ok else "0",
                    "verdict": "correct" if ok else "wrong",
                    "tokens": 5,
                    "truncated": False,
                    "mean_logp": -0.5,
                    "confidence": None,
                    "gold": "1",
                    "correct": ok,
                }
            )
    (folder / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "problems.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    (folder / "results.json").write_text(json.dumps({"config": {"ks": [1, 2]}}))
    return folder


def test_a_run_reads_into_groups_with_pairs_and_lens_ratios(tmp_path: Path) -> None:
    model = read_run(make_run(tmp_path / "run"))
    assert model["settings"]["advantage"] == "lens" and model["rollout_steps"] == [1, 2, 3]
    first, second = model["groups"][1]
    assert first["q"] == "1+1?" and first["gold"] == "2" and first["ok"] == [1, 0]
    assert first["pairs"] == [[0, 1]] and second["pairs"] == []
    assert first["cut"] == [0, 1]
    # rt = -0.25, x = -G rt = 0.5, p/D = x / (1 + x) = 1/3; none for the correct answer
    assert first["rt"] == [None, -0.25] and first["pd"][1] == pytest.approx(1 / 3, abs=1e-4)
    assert model["steps"][0] == {"step": 1, "acc": 0.25, "pairs": 1.0, "kept": 2.0}


def test_steps_are_sampled_evenly_first_and_last_included() -> None:
    steps = list(range(1, 1001))
    assert choose_steps(steps, None, 5) == [1, 251, 501, 750, 1000]
    assert choose_steps(steps, None, 0) == steps
    assert choose_steps([1, 2], None, 50) == [1, 2]
    assert choose_steps(steps, [7, 3], 5) == [3, 7]
    with pytest.raises(ValueError, match=r"steps \[2000\] are not in rollouts.jsonl"):
        choose_steps(steps, [2000], 5)


def test_two_folders_list_the_problems_one_solves_first(tmp_path: Path) -> None:
    before = read_eval(make_eval(tmp_path / "before", {"a": 2, "b": 0, "c": 1, "d": 0}))
    after = read_eval(make_eval(tmp_path / "after", {"a": 2, "b": 1, "c": 0, "d": 0}))
    assert before["problems"][2]["pk"] == {"1": 0.5, "2": 1.0}
    model = compare(before, after)
    assert [a["id"] for a, _ in model["pairs"]] == ["b", "c", "a", "d"]
    assert model["names"] == ["before", "after"]


def test_no_completion_can_close_the_json_block(tmp_path: Path) -> None:
    page = render_page(read_run(make_run(tmp_path / "run")))
    assert page.count("</script>") == page.count("<script")  # each block closes once
    block = re.search(r'id="gw-step-1">(.*?)</script>', page).group(1)
    assert json.loads(block)[0]["t"][1] == "#### 3 </script><b>"
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")  # nothing to fetch


def test_the_command_writes_a_page_and_names_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(tmp_path / "run")
    page = tmp_path / "page.html"
    assert main(["view", str(run), "--output", str(page), "--max-steps", "2"]) == 0
    assert 'id="gw-step-1"' in page.read_text() and 'id="gw-step-3"' in page.read_text()
    assert 'id="gw-step-2"' not in page.read_text()
    assert main(["view", str(tmp_path), "--output", str(page)]) == 2
    assert "neither a training run" in capsys.readouterr().err
    with open(run / "rollouts.jsonl", "a") as f:
        f.write('{"step": 4, "problem_ids": ["x"], "completions": "oops"}\n')
    assert main(["view", str(run), "--output", str(page)]) == 2
    err = capsys.readouterr().err
    assert f"{run / 'rollouts.jsonl'}:4:" in err and "'completions'" in err
    (run / "rollouts.jsonl").write_text("not json\n{}\n")
    assert main(["view", str(run), "--output", str(page)]) == 2
    assert f"{run / 'rollouts.jsonl'}:1: not valid JSON" in capsys.readouterr().err
    assert folder_kind(make_eval(tmp_path / "eval", {"a": 1})) == "eval"


def test_verl_rollout_dumps_read_as_a_run(tmp_path: Path) -> None:
    """verl's trainer.rollout_data_dir/N.jsonl, as its _write_generations writes them (rows of a
    group need not be next to each other: balance_batch reorders the batch)."""
    dumps = tmp_path / "rollouts"
    dumps.mkdir()
    for step in (1, 2):
        rows = [
            {"input": f"user: {q}?", "output": f"answer {q}{i}", "gts": q, "score": float(ok),
             "step": step, "acc": bool(ok), "request_id": f"r{q}{i}", "pred": "x"}
            for q, i, ok in [("a", 0, 1), ("b", 0, 0), ("a", 1, 0), ("b", 1, 0)]
        ]  # fmt: skip
        (dumps / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = tmp_path / "verl.html"
    assert main(["view", str(dumps), "--output", str(page)]) == 0
    text = page.read_text()
    groups = json.loads(re.search(r'id="gw-step-2">(.*?)</script>', text).group(1))
    assert [g["q"] for g in groups] == ["user: a?", "user: b?"]
    assert groups[0]["t"] == ["answer a0", "answer a1"] and groups[0]["ok"] == [1, 0]
    assert groups[0]["gold"] == "a" and groups[0]["rw"] == [1.0, 0.0] and "adv" not in groups[0]
    meta = json.loads(re.search(r'id="gw-meta">(.*?)</script>', text).group(1))
    assert meta["steps"][0] == {"step": 1, "acc": 0.25, "wrong": 0.5, "right": 0.0, "mixed": 0.5}
    (dumps / "3.jsonl").write_text('{"output": "no input"}\n')
    with pytest.raises(ValueError, match=r"3.jsonl:1: not a verl rollout line"):
        read_verl_dumps(dumps, None, 50)
