"""The benches' runs (testbed/runs.py): resumable one at a time, their minutes logged, their
held-out results read; and the SmolLM2 bench's report (testbed/smollm2.py) on run folders
written by hand, against hand-computed differences and intervals."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from groupwise.train.config_file import load_config, save_config
from testbed import runs, smollm2

# Stands in for `groupwise train`: logs its last argument (--resume / --overwrite), then fails
# after its first checkpoint while the folder has a file "fail", else finishes (final/).
FAKE_TRAIN = """
import sys, pathlib
folder = pathlib.Path(next(a for a in sys.argv if a.startswith("train.output_dir="))[17:])
folder.mkdir(parents=True, exist_ok=True)
with open(folder.parent / "calls.txt", "a") as log:
    log.write(folder.name + " " + sys.argv[-1] + "\\n")
(folder / "checkpoints").mkdir(exist_ok=True)
if (folder / "fail").exists():
    (folder / "fail").unlink()
    sys.exit(3)
(folder / "final").mkdir()
"""


def fake_run(output: Path, name: str) -> runs.Run:
    return runs.Run(name, output / name, [sys.executable, "-c", FAKE_TRAIN], {})


def test_run_all_resumes_a_failed_run_and_skips_complete_ones(tmp_path: Path) -> None:
    planned = [fake_run(tmp_path, "a"), fake_run(tmp_path, "b")]
    planned[1].folder.mkdir()
    (planned[1].folder / "fail").touch()
    with pytest.raises(subprocess.CalledProcessError):
        runs.run_all(planned, tmp_path, tmp_path)
    # a finished, b failed after its checkpoint: only a's minutes are logged
    assert set(runs.read_wall(tmp_path)) == {"a"}
    wall = runs.run_all(planned, tmp_path, tmp_path)
    runs.run_all(planned, tmp_path, tmp_path)
    calls = (tmp_path / "calls.txt").read_text().split("\n")
    assert calls == ["a --overwrite", "b --overwrite", "b --resume", ""]
    assert set(wall) == {"a", "b"} and all(w["wall"] > 0 for w in wall.values())
    assert wall == runs.read_wall(tmp_path)


def write_run(
    folder: Path,
    before: list[int],
    after: list[int],
    accuracy: list[float],
    lambdas: list[float] | None = None,
) -> None:
    """A complete run folder: held-out correct counts (of n = 4) at step 0 and step S, and S
    metrics lines (S = len(accuracy)) of 32 completions each."""
    (folder / "final").mkdir(parents=True)
    steps = len(accuracy)
    evaluations = [(0, before), (steps, after)]
    (folder / "heldout.jsonl").write_text(
        "".join(
            json.dumps({"step": s, "accuracy": sum(c) / (4 * len(c)), "n": 4, "correct": c}) + "\n"
            for s, c in evaluations
        )
    )
    lines = []
    for step, value in enumerate(accuracy, start=1):
        line = {
            "step": step,
            "accuracy": value,
            "completions_sampled": 32,
            "group_mixed": 0.5,
            "group_all_wrong": 0.25 * (step % 2),
            "group_all_wrong_active": 0.0,
            "pairs_per_group": float(step),
            "completion_length_mean": 100.0 - step,
            "truncated_fraction": 0.5 if step == 1 else 0.0,
            "seconds_step": 30.0,
        }
        if lambdas:
            line["lambda"] = lambdas[step - 1]
        lines.append(json.dumps(line) + "\n")
    (folder / "metrics.jsonl").write_text("".join(lines))


def test_read_run_gives_the_curve_and_per_problem_accuracies(tmp_path: Path) -> None:
    write_run(tmp_path, [0, 1, 2, 0], [1, 2, 2, 4], [0.1, 0.2, 0.3])
    run = runs.read_run(tmp_path)
    assert run["steps"] == 3 and run["completions"] == 96
    assert run["curve"] == [(0, 0.1875), (96, 0.5625)]
    assert run["before"] == 0.1875 and run["final_accuracy"] == 0.5625
    assert run["per_problem"] == [0.25, 0.5, 0.5, 1.0]
    assert run["per_problem_before"] == [0.0, 0.25, 0.5, 0.0]


def test_smollm2_report_pairs_each_method_with_grpo_over_seeds_and_problems(
    tmp_path: Path,
) -> None:
    before = [0, 1, 0, 1]
    # final correct counts (of 4) per seed; AMIR-GRPO is GRPO + 1 on problem 0 at seed 0 and
    # + 1 on problems 0 and 1 at seed 1: differences 1/16 and 2/16 of accuracy
    finals = {
        "GRPO": ([1, 1, 2, 0], [0, 2, 1, 1]),
        "AMIR-GRPO": ([2, 1, 2, 0], [1, 3, 1, 1]),
        "LENS": ([1, 1, 2, 0], [0, 2, 1, 1]),
        "AMIR-GRPO + LENS": ([0, 1, 2, 0], [0, 2, 1, 0]),
    }
    accuracy = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    for method, per_seed in finals.items():
        for seed, final in enumerate(per_seed):
            lambdas = [0.01, 0.008, 0.006, 0.005, 0.005, 0.005] if "AMIR" in method else None
            write_run(smollm2.run_dir(tmp_path, method, seed), before, final, accuracy, lambdas)
    # the page names the settings GRPO's first run saved, not the preset's of today
    saved = load_config(smollm2.CONFIG, ["train.eval_samples=4", "data.heldout.options.size=4"])
    save_config(saved, smollm2.run_dir(tmp_path, "GRPO", 0) / "config.yaml")
    args = smollm2._parser().parse_args(
        ["--output", str(tmp_path), "--report-only", "--seeds", "0", "1"]
    )
    results = smollm2.report(args)
    assert results["seeds"] == [0, 1]
    amir = results["methods"]["AMIR-GRPO"]
    d = amir["difference"]
    # per-seed mean differences 1/16 and 2/16: mean 3/32, t(0.975, 1) = 12.706 x sd / sqrt 2
    half = 12.7062 * float(np.std([1 / 16, 2 / 16], ddof=1)) / math.sqrt(2)
    assert d["mean"] == pytest.approx(3 / 32)
    assert (d["seed_low"], d["seed_high"]) == pytest.approx((3 / 32 - half, 3 / 32 + half), 1e-4)
    # over problems, the differences averaged over seeds are (0.25, 0.125, 0, 0): none is
    # negative, and a quarter of the resamples draw no problem but 2 and 3
    assert d["problem_low"] == 0 and 3 / 32 < d["problem_high"] <= 0.25
    assert results["methods"]["LENS"]["difference"]["mean"] == 0
    assert results["methods"]["AMIR-GRPO + LENS"]["difference"]["mean"] == pytest.approx(-2 / 32)
    # gain of GRPO at seed 0: after - before = (1 - 0 + 1 - 1 + 2 - 0 + 0 - 1) / 16 = 2 / 16
    assert results["methods"]["GRPO"]["gain"][0]["mean"] == pytest.approx(2 / 16)
    assert results["methods"]["GRPO"]["before"] == [0.125, 0.125]
    m = amir["mechanisms"][0]
    assert m["lambda_first_last"] == [0.01, 0.005]
    assert results["methods"]["GRPO"]["mechanisms"][0]["lambda_first_last"] is None
    assert m["length_first_last"] == pytest.approx([97.0, 96.0])
    assert m["truncated_first_last"] == pytest.approx([0.1, 0.0])
    assert m["training_minutes"] == pytest.approx(3.0)
    assert m["pairs_per_group"] == pytest.approx(3.5)
    assert m["group_all_wrong"] == pytest.approx(0.125)
    page = (tmp_path / "smollm2_methods.md").read_text()
    assert "| AMIR-GRPO | 0, 1 | 12.5, 12.5 | 31.2, 37.5 | " in page
    # Δ to GRPO per seed: 5/16 - 4/16 and 6/16 - 4/16 of accuracy, then the mean and its
    # intervals over seeds and over problems
    seeds_interval = f"[{100 * (3 / 32 - half):+.1f}, {100 * (3 / 32 + half):+.1f}]"
    assert f"| +6.2, +12.5 | +9.4 | {seeds_interval} | [+0.0, " in page
    # per-seed differences 1/16 and 2/16 (sd 0.0442): t sd / sqrt S is 0.110 at S = 3, 0.070 at
    # S = 4, the first below the mean 3/32 = 0.094
    assert amir["seeds_needed"] == 4 and page.count(" | 4 |\n") == 1
    assert "| none: Δ is 0 |" in page  # LENS equals GRPO
    assert (
        "| AMIR-GRPO | 50 % | 12 % | 0 % | 3.50 | 0.0100 -> 0.0050 | 97 -> 96; 97 -> 96 "
        "| 10 -> 0 %; 10 -> 0 % | 3.0 |" in page
    )
    held_out = saved.data.heldout["options"]
    assert f"- held-out: 4 `arith` test problems ({held_out['ops']} operation" in page
    assert f"{held_out['form']} form), 4 samples each at temperature" in page
    assert f"prompt `{saved.data.prompt}`" in page
    assert (tmp_path / "smollm2_methods.png").stat().st_size > 0
    assert json.loads((tmp_path / "smollm2_methods.json").read_text())["seeds"] == [0, 1]


def test_smollm2_report_pairs_each_method_over_the_seeds_it_shares_with_grpo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = smollm2._parser().parse_args(["--output", str(tmp_path), "--report-only"])
    write_run(smollm2.run_dir(tmp_path, "LENS", 0), [0], [2], [0.1] * 5)
    assert smollm2.report(args) == {}
    assert "no GRPO run is complete yet" in capsys.readouterr().out
    assert not (tmp_path / "smollm2_methods.md").exists()
    write_run(smollm2.run_dir(tmp_path, "GRPO", 0), [0], [1], [0.1] * 5)
    write_run(smollm2.run_dir(tmp_path, "GRPO", 1), [0], [3], [0.1] * 5)
    write_run(smollm2.run_dir(tmp_path, "LENS", 1), [0], [2], [0.1] * 5)
    write_run(smollm2.run_dir(tmp_path, "AMIR-GRPO", 1), [0], [4], [0.1] * 5)
    results = smollm2.report(args)["methods"]
    assert list(results) == ["GRPO", "AMIR-GRPO", "LENS"]
    assert results["GRPO"]["seeds"] == [0, 1] and "difference" not in results["GRPO"]
    # AMIR-GRPO has seed 1 only: 4/4 against GRPO's 3/4
    assert results["AMIR-GRPO"]["paired_seeds"] == [1]
    assert results["AMIR-GRPO"]["difference"]["mean"] == pytest.approx(0.25)
    assert math.isnan(results["AMIR-GRPO"]["difference"]["seed_low"])
    # LENS: +1/4 at seed 0, -1/4 at seed 1
    assert results["LENS"]["paired_seeds"] == [0, 1]
    assert results["LENS"]["difference"]["mean"] == pytest.approx(0.0)
    page = (tmp_path / "smollm2_methods.md").read_text()
    assert "AMIR-GRPO + LENS none yet" in page and "AMIR-GRPO seeds [1]" in page


def test_smollm2_intervals_are_signed_points_and_a_float_zero_is_plus_zero() -> None:
    # a bootstrap bound of three seeds' quarter-steps that is zero up to float error
    assert smollm2._interval(-1.4e-18, 0.048) == "[+0.0, +4.8]"
    assert smollm2._interval(math.nan, math.nan) == "–"


def test_smollm2_runs_are_the_preset_with_each_method_and_seed(tmp_path: Path) -> None:
    args = smollm2._parser().parse_args(["--output", str(tmp_path), "x.y=1", "--seeds", "3"])
    planned = smollm2.planned_runs(args)
    assert [r.key for r in planned] == [f"{m}|3" for m in smollm2.METHODS]
    grpo, *_, both = planned
    assert grpo.folder == tmp_path / "seed3" / "grpo"
    assert grpo.command[-4:] == [
        "algorithm.amir=false",
        "algorithm.advantage=grpo",
        "train.seed=3",
        "x.y=1",
    ]
    assert both.command[-4:-2] == ["algorithm.amir=true", "algorithm.advantage=lens"]
    assert str(smollm2.CONFIG) in grpo.command
    some = smollm2._parser().parse_args(
        ["--seeds", "2", "3", "--methods", "AMIR-GRPO + LENS", "GRPO", "--output", str(tmp_path)]
    )
    assert [r.key for r in smollm2.planned_runs(some)] == [
        "AMIR-GRPO + LENS|2",
        "GRPO|2",
        "AMIR-GRPO + LENS|3",
        "GRPO|3",
    ]


def test_dynamic_sampling_runs_are_seed_major_nice_and_single_threaded(tmp_path: Path) -> None:
    from testbed import dynamic

    args = argparse.Namespace(
        output=tmp_path,
        seeds=[0, 1],
        level="long",
        budget=64,
        eval_every=2,
        eval_problems=5,
        eval_samples=2,
    )
    planned = dynamic.planned_runs(args)
    assert [r.key for r in planned[:2]] == ["GRPO|0", "GRPO + DS|0"]
    assert len(planned) == 2 * len(dynamic.METHODS) and planned[-1].key.endswith("|1")
    assert all(r.nice and r.environment["OMP_NUM_THREADS"] == "1" for r in planned)
    assert planned[1].folder == tmp_path / "GRPO_DS" / "seed0"
    assert "rollout.dynamic_sampling=true" in planned[1].command
    assert "train.max_completions=64" in planned[0].command
