"""`groupwise report` and the end-of-run summary say what each run is and did, truly: every
option that changes the method is in its name, the completions sampled are in the table, runs
whose step-0 samples differ are not paired, each summary line holds for its method, counts
have their singular, evaluation folders are compared, and the figures keep runs, scales and
legends apart (groupwise.report)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from groupwise.cli import main as cli
from groupwise.report import (
    comparison_table,
    load_record,
    method_label,
    plot_run,
    plot_runs,
    summarize,
    summary_text,
    versus,
)
from groupwise.report.methods import plural, reward_name
from groupwise.report.plots import smoothing_note, smoothing_window
from groupwise.report.summary import NOT_PAIRED, not_paired, unpaired_warning

BINARY = {"weights": {"binary": 1.0}, "correctness_component": "binary", "overlong_buffer": 0}


def make_run(
    folder: Path,
    config: dict[str, Any],
    rows: list[dict[str, Any]],
    heldout: list[dict[str, Any]] = (),
) -> Path:
    """A run folder as `groupwise train` leaves it: config.yaml (the sections given),
    metrics.jsonl (each row over a GRPO-like default) and heldout.jsonl."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    base = {
        "reward_mean": 0.5,
        "seconds_step": 60.0,
        "group_mixed": 0.5,
        "group_all_correct": 0.25,
        "group_all_wrong": 0.25,
        "group_all_wrong_active": 0.0,
    }
    lines = [json.dumps({"step": i, **base, **row}) for i, row in enumerate(rows, start=1)]
    (folder / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    (folder / "heldout.jsonl").write_text("".join(json.dumps(h) + "\n" for h in heldout))
    return folder


def evaluation(step: int, correct: list[int], n: int = 4, **more: Any) -> dict[str, Any]:
    ids = [f"p{i}" for i in range(len(correct))]
    return {"step": step, "n": n, "correct": correct, "problem_ids": ids, **more}


@pytest.mark.parametrize(
    ("config", "label"),
    [
        ({}, "GRPO"),
        ({"algorithm": {"advantage": "rloo"}}, "RLOO"),
        ({"algorithm": {"advantage": "rloo", "amir": True}}, "RLOO + AMIR preferences"),
        ({"algorithm": {"advantage": "lens", "lens_mode": "mixed_only"}}, "LENS (mixed_only)"),
        (
            {"algorithm": {"advantage": "lens", "loss_level": "sequence"}},
            "LENS + GSPO sequence ratio",
        ),
        ({"algorithm": {"advantage": "my_estimator"}}, "my_estimator"),
        ({"rollout": {"dynamic_sampling": True}}, "GRPO + dynamic sampling"),
        ({"reward": {"overlong_buffer": 32}}, "GRPO + overlong penalty"),
        ({"reward": {"overlong_buffer": 32, "overlong_penalty": 0.0}}, "GRPO"),
        ({"algorithm": {"mask_truncated": True}}, "GRPO + overlong filtering"),
        ({"algorithm": {"aggregation": "dapo"}}, "GRPO + token-mean loss"),
        ({"algorithm": {"scale_rewards": "none"}}, "GRPO + no std (Dr. GRPO)"),
        ({"algorithm": {"scale_rewards": "none", "aggregation": "dr_grpo"}}, "Dr. GRPO"),
        ({"algorithm": {"eps_high": 0.28}}, "GRPO + clip-higher"),
        # GSPO's own clip range (3e-4, 4e-4) is not clip-higher
        ({"algorithm": {"loss_level": "sequence", "eps_low": 3e-4, "eps_high": 4e-4}}, "GSPO"),
        ({"algorithm": {"kl_coef": 0.05}}, "GRPO + KL 0.05"),
        ({"rollout": {"importance_correction": True}}, "GRPO + importance correction"),
        (
            {"algorithm": {"amir": True, "advantage": "lens"}, "rollout": {"dynamic_sampling": 1}},
            "AMIR-GRPO + LENS + dynamic sampling",
        ),
        (
            {
                "algorithm": {"aggregation": "dapo", "eps_high": 0.28, "kl_coef": 0.01},
                "rollout": {"dynamic_sampling": True},
                "reward": {"overlong_buffer": 32},
            },
            "DAPO + KL 0.01",
        ),
    ],
)
def test_every_option_that_changes_the_method_is_named(config: dict, label: str) -> None:
    assert method_label(config) == label


def test_runs_are_named_for_what_they_are_in_the_summary_table_and_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.figure import Figure

    rloo = make_run(tmp_path / "rloo", {"algorithm": {"advantage": "rloo"}}, [{}])
    dyn = make_run(tmp_path / "dyn", {"rollout": {"dynamic_sampling": True}}, [{}])
    titles: list[str] = []
    real = Figure.savefig
    monkeypatch.setattr(
        Figure,
        "savefig",
        lambda fig, *a, **k: titles.append(fig.get_suptitle()) or real(fig, *a, **k),
    )
    assert summary_text(summarize(rloo)).startswith("RLOO: 1 step,")
    table = comparison_table([summarize(rloo), summarize(dyn)]).splitlines()
    assert table[2].startswith("| RLOO |") and table[3].startswith("| GRPO + dynamic sampling |")
    plot_run(rloo)
    assert titles == [f"RLOO: {rloo}"]


def test_the_table_shows_the_completions_each_run_sampled(tmp_path: Path) -> None:
    # GRPO: 8 x 12 per step, from the config (no completions_sampled logged); dynamic sampling:
    # 96 + 128 logged, 28 groups of 8, of which 4 all-correct and 12 all-wrong were dropped
    grpo = make_run(
        tmp_path / "grpo",
        {"rollout": {"group_size": 8, "questions_per_step": 12}},
        [{}],
        [evaluation(0, [0, 4, 2, 2, 1]), evaluation(1, [0, 4, 2, 2, 1])],
    )
    kept = {"group_mixed": 1.0, "group_all_correct": 0.0, "group_all_wrong": 0.0}
    dyn = make_run(
        tmp_path / "dyn",
        {"rollout": {"group_size": 8, "questions_per_step": 12, "dynamic_sampling": True}},
        [
            {**kept, "completions_sampled": 96, "groups_dropped_all_wrong": 4},
            {**kept, "completions_sampled": 128, "groups_dropped_all_wrong": 8}
            | {"groups_dropped_all_correct": 4, "groups_dropped_mixed": 0},
        ],
        [evaluation(0, [0, 4, 2, 2, 1]), evaluation(2, [4, 4, 2, 2, 1])],
    )
    table = comparison_table([summarize(grpo), summarize(dyn)]).splitlines()
    assert "| after vs GRPO [95 % CI] | completions sampled | groups mixed" in table[0]
    assert table[2].split(" | ")[5:7] == ["96", "50% / 25% / 25%"]
    assert table[3].split(" | ")[4].startswith("+20.0 [")
    assert table[3].split(" | ")[5:7] == ["224", "100% / 0% / 0% (kept)"]
    # runs that sampled as many: no column, one line under the table
    same = make_run(
        tmp_path / "same",
        {"rollout": {"group_size": 8, "questions_per_step": 12}},
        [{}],
        [evaluation(0, [0, 4, 2, 2, 1]), evaluation(1, [0, 4, 2, 2, 2])],
    )
    alike = comparison_table([summarize(grpo), summarize(same)]).splitlines()
    assert "completions sampled |" not in alike[0] and alike[-2:] == [
        "",
        "completions sampled: 96 by each run",
    ]
    s = summarize(dyn)
    assert (s.completions_sampled, s.dropped_all_correct, s.dropped_all_wrong) == (
        224,
        pytest.approx(4 / 28),
        pytest.approx(12 / 28),
    )
    text = summary_text(s)
    assert text.startswith("GRPO + dynamic sampling: 2 steps, 224 completions sampled, 2.0 min")
    assert (
        "groups trained on (kept), mean over steps: mixed 100%, all-correct 0%, all-wrong 0%; "
        "of the groups sampled, dynamic sampling dropped 57% (all-correct 14%, all-wrong 43%)"
        in text
    )


def test_runs_whose_step_0_samples_differ_are_marked_not_paired(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 5 problems x 4 samples: step 0 at 3/20 = 15.0 % (transformers) and 2/20 = 10.0 % (vllm)
    def run(name: str, engine: str, first: list[int], last: list[int]) -> Path:
        config = {"algorithm": {"amir": name == "amir"}, "rollout": {"engine": engine}}
        return make_run(tmp_path / name, config, [{}], [evaluation(0, first), evaluation(4, last)])

    grpo = run("grpo", "transformers", [1, 1, 1, 0, 0], [2, 1, 1, 0, 0])
    amir = run("amir", "vllm", [1, 1, 0, 0, 0], [1, 1, 1, 0, 0])
    twin = run("twin", "transformers", [1, 1, 1, 0, 0], [1, 1, 1, 0, 0])
    a, b, c = summarize(grpo), summarize(amir), summarize(twin)
    assert not_paired(a, b) == "step 0 15.0 % vs 10.0 %, rollout.engine transformers vs vllm"
    assert versus(a, b) is None and not_paired(a, c) is None
    assert versus(a, c).delta == pytest.approx(-0.05)
    assert cli(["report", str(grpo), str(amir), str(twin)]) == 0
    out, err = capsys.readouterr()
    rows = out.splitlines()
    assert rows[3].startswith("| AMIR-GRPO | 10.0 % | 15.0 % | +5.0 [") and NOT_PAIRED in rows[3]
    assert f"| {NOT_PAIRED} |" in rows[3]
    assert rows[4].startswith("| GRPO (twin) |") and "| -5.0 [" in rows[4]
    assert err == (
        "warning: not paired with GRPO (grpo), whose step-0 held-out evaluation differs, so the "
        "runs did not sample alike ('after vs GRPO (grpo)' left out): AMIR-GRPO: step 0 15.0 % "
        "vs 10.0 %, rollout.engine transformers vs vllm\n"
    )
    assert unpaired_warning([a, c]) is None
    # the page says so above its held-out table
    page = tmp_path / "page.md"
    assert cli(["report", str(grpo), str(amir), str(twin), "--output", str(page)]) == 0
    assert (
        "Not paired: the step-0 evaluation of amir differs from grpo's on the same problems"
        in page.read_text()
    )
    assert "twin differs" not in page.read_text()


@pytest.mark.parametrize(
    ("config", "active", "groups", "all_wrong"),
    [
        (
            {"reward": BINARY},
            0.0,
            "(GRPO learns from mixed groups only)",
            "0.0% of them (their advantages were all 0)",
        ),
        (
            {"algorithm": {"advantage": "rloo"}, "reward": BINARY},
            0.0,
            "(RLOO learns from mixed groups only)",
            "0.0% of them (their advantages were all 0)",
        ),
        (
            # overlong-penalised all-wrong groups differ in reward: their advantages are not 0
            {"reward": {**BINARY, "overlong_buffer": 32}},
            0.25,
            "(GRPO learns from groups whose rewards differ: mixed ones, and others through the "
            "overlong penalty)",
            "100.0% of them (their rewards differed: the overlong penalty)",
        ),
        (
            {"algorithm": {"advantage": "lens"}, "reward": BINARY},
            0.25,
            "(LENS learns from all-wrong groups too: calibrated negative rewards)",
            "100.0% of them (LENS's calibrated negatives)",
        ),
        (
            {"algorithm": {"advantage": "lens", "lens_mode": "mixed_only"}, "reward": BINARY},
            0.0,
            "(LENS mixed_only gives all-wrong groups advantage 0)",
            "0.0% of them (their advantages were all 0)",
        ),
    ],
)
def test_each_summary_line_holds_for_its_method(
    tmp_path: Path, config: dict, active: float, groups: str, all_wrong: str
) -> None:
    run = make_run(tmp_path / "run", config, [{"group_all_wrong_active": active}])
    text = summary_text(summarize(run))
    assert groups in text.splitlines()[2]
    assert text.splitlines()[3] == (
        f"  all-wrong groups that got a gradient (a non-zero advantage): {all_wrong}"
    )
    if "LENS" in text.splitlines()[0]:
        assert "GRPO" not in text


def test_the_held_out_time_includes_the_step_0_evaluation_where_it_was_logged(
    tmp_path: Path,
) -> None:
    timed = make_run(
        tmp_path / "timed",
        {},
        [{}, {"seconds_heldout": 12.0}],
        [evaluation(0, [1, 2], seconds=30.0), evaluation(2, [2, 2], seconds=12.0)],
    )
    s = summarize(timed)
    assert (s.seconds_heldout, s.heldout_timed_from_start) == (42.0, True)
    assert summary_text(s).splitlines()[0] == (
        "GRPO: 2 steps, 2.0 min of training + 0.7 min of held-out evaluation (step 0 included)"
    )
    # a run that logged only the evaluations after a step says that it leaves step 0 out
    untimed = make_run(
        tmp_path / "untimed",
        {},
        [{}, {"seconds_heldout": 12.0}],
        [evaluation(0, [1, 2]), evaluation(2, [2, 2])],
    )
    s = summarize(untimed)
    assert (s.seconds_heldout, s.heldout_timed_from_start) == (12.0, False)
    assert (
        summary_text(s)
        .splitlines()[0]
        .endswith(
            "+ 0.2 min of held-out evaluation (after steps only: the run did not log the step-0 "
            "evaluation's time)"
        )
    )


def test_counts_have_their_singular(tmp_path: Path) -> None:
    assert (plural(1, "step"), plural(3, "step"), plural(6400, "completion")) == (
        "1 step",
        "3 steps",
        "6,400 completions",
    )
    one = make_run(
        tmp_path / "one",
        {"rollout": {"group_size": 2, "questions_per_step": 1}},
        [{"answers_unparsed": 1}],
        [evaluation(0, [1], n=1), evaluation(1, [1], n=1)],
    )
    from groupwise.report.tables import runs_rows

    record = load_record("one", one)
    record.heldout = record.heldout[:1]
    assert runs_rows([record])[0][-1] == "held-out at step 0"
    lines = summary_text(summarize(one)).splitlines()
    assert lines[0].startswith("GRPO: 1 step, 2 completions sampled,")
    assert lines[1].startswith("  held-out accuracy (1 problem x 1 sample): 100.0 % -> 100.0 %")
    assert lines[-1].startswith("  answer checking: 1 answer compared as text")


def _eval_folder(folder: Path, pass1: float) -> Path:
    folder.mkdir(parents=True)
    results = {
        "gsm8k": {"pass@1": pass1, "pass@1_ci": [pass1 - 0.1, pass1 + 0.1]},
        "config": {"model": "tiny-random", "n": 1, "temperature": 1.0},
    }
    (folder / "results.json").write_text(json.dumps(results))
    return folder


def test_evaluation_folders_are_compared_without_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _eval_folder(tmp_path / "eval-grpo-n1", 0.5)
    b = _eval_folder(tmp_path / "eval-lens-n1", 0.25)
    assert cli(["report", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "### pass@1" in out and "| benchmark | eval-grpo-n1 | eval-lens-n1 |" in out
    assert "| gsm8k | 50.0 [40.0, 60.0] | 25.0 [15.0, 35.0] |" in out
    # beside a training run: what to do instead, in one line
    run = make_run(tmp_path / "grpo", {}, [{}])
    assert cli(["report", str(run), str(a)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "training runs" in err and "--output report.md" in err
    # on a page, each evaluation folder is named once (not eval-grpo-n1/eval-grpo-n1)
    page = tmp_path / "page.md"
    assert cli(["report", str(a), str(b), "--output", str(page)]) == 0
    assert "| benchmark | eval-grpo-n1 | eval-lens-n1 |" in page.read_text()
    assert "eval-grpo-n1/eval-grpo-n1" not in page.read_text()


def test_one_smoothing_rule_is_drawn_and_said_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.figure import Figure

    assert [smoothing_window(n) for n in (3, 20, 21, 50, 1000)] == [1, 1, 10, 10, 40]
    assert smoothing_note([3]) == "per step"
    assert smoothing_note([50]) == "faint: per step; solid: trailing mean of the last 10 steps"
    assert smoothing_note([3, 1000, 50]) == (
        "faint: per step; solid: trailing mean of the last 10 to 40 steps "
        "(runs of up to 20 steps: per step)"
    )
    titles: list[list[str]] = []
    real = Figure.savefig
    monkeypatch.setattr(
        Figure,
        "savefig",
        lambda fig, *a, **k: (
            titles.append([ax.get_title() for ax in fig.axes]) or real(fig, *a, **k)
        ),
    )
    plot_run(make_run(tmp_path / "short", {}, [{}] * 3))
    plot_run(make_run(tmp_path / "long", {}, [{}] * 60))
    assert titles[0][0] == "training reward (per step)"
    assert titles[1][0].replace("\n", " ") == (
        "training reward (faint: per step; solid: trailing mean of the last 10 steps)"
    )
    page = tmp_path / "page.md"
    assert cli(["report", str(tmp_path / "long"), "--output", str(page)]) == 0
    assert (
        "From each run's metrics.jsonl (faint: per step; solid: trailing mean of the last 10 "
        "steps)" in page.read_text()
    )


def _drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures save_figure is given, kept open (nothing written)."""
    from groupwise import figures

    drawn: list[Any] = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, path: drawn.append(fig) or Path(path))
    return drawn


def test_the_report_figure_keeps_scales_runs_and_legend_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.collections import PolyCollection

    drawn = _drawn(monkeypatch)
    held = [evaluation(0, [1, 2, 3]), evaluation(2, [2, 2, 3])]
    plain = make_run(tmp_path / "grpo", {"reward": BINARY}, [{}, {}], held)
    over = make_run(
        tmp_path / "overlong",
        {"reward": {**BINARY, "overlong_buffer": 32}},
        [{"reward_mean": -0.4}, {"reward_mean": -0.3}],
        held,
    )
    assert reward_name({"reward": {**BINARY, "overlong_buffer": 32}}) == "binary + overlong penalty"
    plot_runs([plain, over], tmp_path / "two.png")
    fig = drawn.pop()
    titles = [ax.get_title().replace("\n", " ") for ax in fig.axes]
    assert titles[0].startswith("training reward (reward: binary);")
    assert titles[1].startswith("training reward (reward: binary + overlong penalty);")
    assert fig.axes[1].get_lines()[0].get_label() == "GRPO + overlong penalty"
    assert titles[2].startswith("held-out accuracy (band: 95 % CI")
    # the legend is the figure's, below the panels, never on the data
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    bands = [c for c in fig.axes[2].collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2 and all(band.get_alpha() == pytest.approx(0.12) for band in bands)
    # seven runs: error bars side by side, no bands that merge into one block
    runs = [make_run(tmp_path / f"run{i}", {"reward": BINARY}, [{}, {}], held) for i in range(7)]
    plot_runs(runs, tmp_path / "seven.png")
    fig = drawn.pop()
    heldout = fig.axes[-1]
    assert heldout.get_title().startswith("held-out accuracy (bars: 95 % CI")
    assert not [c for c in heldout.collections if isinstance(c, PolyCollection)]
    xs = sorted(
        float(line.get_xdata()[0]) for line in heldout.get_lines() if line.get_marker() == "o"
    )
    assert len(xs) == 7 and len(set(xs)) == 7 and xs[0] < 0 < xs[-1]


def test_a_dynamic_sampling_run_draws_its_dropped_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn = _drawn(monkeypatch)
    kept = {"group_mixed": 1.0, "group_all_correct": 0.0, "group_all_wrong": 0.0}
    row = {**kept, "completions_sampled": 128, "groups_kept": 12, "groups_dropped_all_wrong": 4}
    dyn = make_run(tmp_path / "dyn", {"rollout": {"dynamic_sampling": True}}, [row, row])
    plot_run(dyn)
    groups = drawn.pop().axes[-1]
    assert groups.get_title() == "groups trained on; --: dropped, of sampled"
    lines = {line.get_label(): line for line in groups.get_lines()}
    assert list(lines) == ["mixed", "all-correct", "all-wrong", "all-wrong dropped"]
    assert lines["all-wrong dropped"].get_ydata().tolist() == [25.0, 25.0]  # 4 of 16 groups
    plain = make_run(tmp_path / "grpo", {}, [{}])
    plot_run(plain)
    assert drawn.pop().axes[-1].get_title() == "groups"
    # an overlong-penalised run whose all-wrong groups got a gradient draws that share too
    over = make_run(tmp_path / "over", {}, [{"group_all_wrong_active": 0.125}])
    plot_run(over)
    assert drawn.pop().axes[-1].get_title() == "all-wrong groups with a gradient"
