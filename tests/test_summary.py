"""Run summaries (groupwise.report.summary) on hand-written run folders: the numbers, the method
labels, the comparison table, the figure, the command (`groupwise report RUN...`) and its former
name (`groupwise summary`, groupwise.train.summary)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from groupwise.cli import main as cli
from groupwise.figures import moving_average
from groupwise.report import (
    comparison_table,
    method_label,
    plot_run,
    plot_runs,
    summarize,
    summary_text,
    versus,
)
from groupwise.report.summary import signed_points


def write_run(
    folder: Path,
    algorithm: dict,
    rows: list[dict],
    evaluations: list[tuple[int, list[int]]] = (),
    n: int = 4,
) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"algorithm": algorithm}))
    base = {"reward_mean": 0.5, "seconds_step": 2.0}
    with (folder / "metrics.jsonl").open("w") as f:
        for step, row in enumerate(rows, start=1):
            f.write(json.dumps({"step": step, **base, **row}) + "\n")
    with (folder / "heldout.jsonl").open("w") as f:
        for step, correct in evaluations:
            f.write(json.dumps({"step": step, "n": n, "correct": correct}) + "\n")
    return folder


def groups(mixed: float, right: float, wrong: float, active: float) -> dict:
    return {
        "group_mixed": mixed,
        "group_all_correct": right,
        "group_all_wrong": wrong,
        "group_all_wrong_active": active,
        "pairs_per_group": 0.0,
    }


@pytest.fixture
def lens(tmp_path: Path) -> Path:
    rows = [groups(0.5, 0.0, 0.5, 0.5), {**groups(0.75, 0.0, 0.25, 0.25), "seconds_heldout": 3.0}]
    return write_run(
        tmp_path / "lens", {"advantage": "lens"}, rows, [(0, [0, 4, 2]), (2, [4, 4, 2])]
    )


@pytest.fixture
def amir(tmp_path: Path) -> Path:
    rows = [
        {**groups(1.0, 0.0, 0.0, 0.0), "pairs_per_group": 8.0, "lambda": 0.008},
        {**groups(0.5, 0.0, 0.5, 0.0), "pairs_per_group": 4.0, "lambda": 0.005},
        {**groups(0.5, 0.5, 0.0, 0.0), "pairs_per_group": 3.0, "lambda": 0.005},
    ]
    return write_run(tmp_path / "amir", {"amir": True, "lambda_min": 0.005}, rows)


def test_method_labels() -> None:
    def label(**algorithm: object) -> str:
        return method_label({"algorithm": algorithm})

    assert method_label({}) == "GRPO"
    assert label(amir=True) == "AMIR-GRPO"
    assert label(advantage="lens") == "LENS"
    assert label(advantage="lens", amir=True) == "AMIR-GRPO + LENS"
    assert label(loss_level="sequence") == "GSPO"


def test_summary_of_a_lens_run(lens: Path) -> None:
    s = summarize(lens)
    assert (s.label, s.steps, s.seconds_training, s.seconds_heldout) == ("LENS", 2, 4.0, 3.0)
    assert (s.heldout_problems, s.heldout_samples) == (3, 4)
    assert s.heldout.before == pytest.approx(0.5) and s.heldout.after == pytest.approx(5 / 6)
    assert (s.mixed, s.all_correct, s.all_wrong) == (0.625, 0.0, 0.375)
    assert s.all_wrong_with_gradient == 1.0  # (0.5 + 0.25) of (0.5 + 0.25)
    assert s.pairs_per_group is None and s.lambda_first is None
    text = summary_text(s)
    assert "held-out accuracy (3 problems x 4 samples): 50.0 % -> 83.3 %, +33.3 points" in text
    assert (
        "all-wrong groups that got a gradient (a non-zero advantage): 100.0% of them "
        "(LENS's calibrated negatives)" in text
    )
    assert "AMIR" not in text


def test_summary_of_an_amir_run_without_heldout(amir: Path) -> None:
    s = summarize(amir)
    assert s.label == "AMIR-GRPO" and s.heldout is None
    assert s.pairs_per_group == pytest.approx(5.0)
    assert (s.lambda_first, s.lambda_last, s.lambda_at_floor) == (
        0.008,
        0.005,
        pytest.approx(2 / 3),
    )
    assert s.all_wrong_with_gradient == 0.0
    text = summary_text(s)
    assert "no held-out evaluation before and after training" in text
    assert "5.0 preference pairs per group; lambda 0.0080 -> 0.0050, at its floor in 67%" in text
    assert "0.0% of them (their advantages were all 0)" in text


def test_comparison_table_has_a_row_per_run(lens: Path, amir: Path) -> None:
    table = comparison_table([summarize(lens), summarize(amir)]).splitlines()
    assert len(table) == 4 and table[1].count("---") == table[0].count(" | ") + 1
    assert "| after vs LENS [95 % CI] |" in table[0]
    assert table[2].startswith("| LENS | 50.0 % | 83.3 % | +33.3 [")
    # no completions_sampled logged and no rollout section: no count, no column of counts
    assert table[2].endswith("| – | 62% / 0% / 38% | 100.0% | – | – |")
    assert table[3] == (
        "| AMIR-GRPO | – | – | – | – | 67% / 17% / 17% | 0.0% | 5.0 | 0.0080 -> 0.0050 |"
    )
    single = comparison_table([summarize(lens)]).splitlines()
    assert "after vs" not in single[0] and single[2].count(" | ") == table[2].count(" | ") - 1


def test_runs_are_compared_with_the_first_problem_by_problem(lens: Path, tmp_path: Path) -> None:
    # lens ends at [4, 4, 2] of 4; this run at [2, 4, 0]: 6/12 against 10/12, -33.3 points
    rows = [groups(0.5, 0.0, 0.5, 0.0)]
    grpo = write_run(tmp_path / "grpo", {}, rows, [(0, [0, 4, 2]), (1, [2, 4, 0])])
    d = versus(summarize(lens), summarize(grpo))
    assert (d.before, d.after) == (pytest.approx(10 / 12), pytest.approx(6 / 12))
    # every problem lost or kept: each resample's mean difference is at most 0
    assert d.low <= d.delta == pytest.approx(-1 / 3) and d.high <= 0
    table = comparison_table([summarize(lens), summarize(grpo)]).splitlines()
    assert "| -33.3 [" in table[3]
    # other problems, or another number of samples: no pairing
    other = write_run(tmp_path / "n8", {}, rows, [(0, [0, 4, 2]), (1, [2, 4, 0])], n=8)
    assert versus(summarize(lens), summarize(other)) is None
    fewer = write_run(tmp_path / "two", {}, rows, [(0, [0, 4]), (1, [2, 4])])
    assert versus(summarize(lens), summarize(fewer)) is None


def test_moving_average() -> None:
    import numpy as np

    values = np.array([1.0, 3.0, 5.0, 7.0])
    assert moving_average(values, 2).tolist() == [1.0, 2.0, 4.0, 6.0]
    assert moving_average(values, 10).tolist() == [1.0, 2.0, 3.0, 4.0]
    # NaNs are left out of each window; a window of NaNs only is NaN
    with_gaps = moving_average([np.nan, 1.0, np.nan, 3.0, np.nan, np.nan], 2)
    assert with_gaps[1:5].tolist() == [1.0, 1.0, 3.0, 3.0]
    assert np.isnan(with_gaps[0]) and np.isnan(with_gaps[5])


def test_figure_and_command(lens: Path, amir: Path, tmp_path: Path, capsys) -> None:
    png = plot_runs([summarize(lens), amir], tmp_path / "fig" / "runs.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    argv = [str(lens), str(amir), "--each", "--png", str(tmp_path / "again.png")]
    assert cli(["report", *argv]) == 0
    out = capsys.readouterr().out
    assert f"{lens}: LENS: 2 steps" in out and "| AMIR-GRPO |" in out
    assert out.endswith(f"figure: {tmp_path / 'again.png'}\n")
    assert (tmp_path / "again.png").is_file()
    assert cli(["report", str(tmp_path / "nothing")]) == 2
    assert "no such file; is" in capsys.readouterr().err
    # a run given as NAME=RUN is named so in the table
    assert cli(["report", f"mine={lens}", str(amir)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[2].startswith("| mine | 50.0 %") and rows[3].startswith("| AMIR-GRPO |")
    assert cli(["report", str(lens), "--each", "--output", str(tmp_path / "p.md")]) == 2
    assert "--each go with the printed table" in capsys.readouterr().err


def test_the_former_summary_command_and_names_still_work(
    lens: Path, amir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import groupwise.train.summary as former

    assert cli(["report", str(lens), str(amir)]) == 0
    table = capsys.readouterr().out
    assert cli(["summary", str(lens), str(amir)]) == 0
    out, err = capsys.readouterr()
    assert out == table
    assert err == f"note: {former.NOTE}\n" and "use groupwise report RUN..." in former.NOTE
    assert former.main([str(lens), str(amir)]) == 0 and capsys.readouterr().out == table
    with pytest.warns(DeprecationWarning, match="use groupwise.report.summary.summarize"):
        assert former.summarize is summarize
    with pytest.warns(DeprecationWarning, match="use groupwise.report.plots.plot_run"):
        assert former.plot_run is plot_run


def test_answer_checks_are_one_summary_line_only_when_there_were_some(
    lens: Path, tmp_path: Path
) -> None:
    assert "answer checking" not in summary_text(summarize(lens))  # no such counts logged
    rows = [
        {**groups(0.5, 0.0, 0.5, 0.0), "answers_unparsed": 1, "answers_timeout": 0},
        {**groups(0.5, 0.0, 0.5, 0.0), "answers_unparsed": 2, "answers_timeout": 1},
    ]
    s = summarize(write_run(tmp_path / "checks", {}, rows))
    assert (s.answers_unparsed, s.answers_timeout, s.answers_error) == (3, 1, 0)
    assert (
        "answer checking: 3 answers compared as text (math-verify could not parse them), "
        "1 timed out, 0 errored" in summary_text(s)
    )


def test_a_null_optional_number_is_read_as_not_logged(tmp_path: Path) -> None:
    rows = [
        {**groups(0.5, 0.0, 0.5, 0.0), "seconds_heldout": None, "lambda": 0.01},
        {**groups(0.5, 0.0, 0.5, 0.0), "lambda": None, "pairs_per_group": None},
    ]
    s = summarize(write_run(tmp_path / "nulls", {"amir": True}, rows))
    assert (s.seconds_heldout, s.lambda_first, s.lambda_last, s.pairs_per_group) == (
        0.0,
        0.01,
        0.01,
        0.0,
    )
    bad = [{**groups(0.5, 0.0, 0.5, 0.0), "lambda": "high"}]
    with pytest.raises(ValueError, match=r"metrics.jsonl:1: lambda must be a finite number"):
        summarize(write_run(tmp_path / "bad", {"amir": True}, bad))


def test_two_runs_of_one_method_are_named_by_folder(lens: Path, tmp_path: Path) -> None:
    other = write_run(tmp_path / "lens-b", {"advantage": "lens"}, [groups(0.5, 0.0, 0.5, 0.5)])
    table = comparison_table([summarize(lens), summarize(other)])
    assert "| LENS (lens) |" in table and "| LENS (lens-b) |" in table


def test_a_run_draws_only_the_panels_of_its_method(lens: Path, amir: Path, monkeypatch) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    drawn: list[list[str]] = []
    real = Figure.savefig

    def titles(fig, *args, **kwargs):
        drawn.append([ax.get_title() for ax in fig.axes])
        return real(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", titles)
    assert plot_run(lens) == lens / "run.png" and (lens / "run.png").is_file()
    plot_run(amir)
    lens_panels, amir_panels = drawn
    assert lens_panels[1] == "held-out accuracy (95 % CI)"
    assert "all-wrong groups with a gradient" in lens_panels
    assert not any("AMIR" in t for t in lens_panels)
    assert "AMIR-GRPO lambda_reg" in amir_panels and "AMIR-GRPO pairs per group" in amir_panels
    assert not any("held-out" in t or "all-wrong groups" in t for t in amir_panels)


def test_signed_points_are_one_decimal_and_a_float_zero_is_plus_zero() -> None:
    assert signed_points(0.05) == "+5.0"
    assert signed_points(-0.002) == "-0.2"
    # a bootstrap bound of three seeds' quarter-steps that is zero up to float error
    assert signed_points(-1.4e-18) == "+0.0"
