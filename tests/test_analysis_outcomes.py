"""An analysis that produced nothing it was asked for ends non-zero with its first cause on one
line, and a figure is drawn only from data enough to mean something, else the reason is printed
and written beside it (groupwise.figures.figure_not_drawn)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_analysis import sample, write_run

from groupwise.cli import main as cli


def last_error(capsys: pytest.CaptureFixture[str], analysis: str) -> str:
    """The one line an analysis that produced nothing prints on stderr."""
    lines = [
        line
        for line in capsys.readouterr().err.splitlines()
        if line.startswith(f"groupwise analyze {analysis}: ")
    ]
    assert len(lines) == 1, lines
    return lines[0]


def wrong_runs(tmp_path: Path) -> list[str]:
    """One run with two incorrect, judgeable solutions (4 paragraphs each)."""
    steps = "First.\n\nSecond.\n\nThird.\n\nFourth."
    samples = [sample("A", i, False, completion=steps + f" {i}") for i in range(2)]
    return [f"grpo={write_run(tmp_path / 'grpo', samples)}"]


def test_errors_against_an_unreachable_judge_ends_non_zero_with_the_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "err"
    argv = ["analyze", "errors", *wrong_runs(tmp_path), "--judge-base-url"]
    argv += ["http://127.0.0.1:9/v1", "--judge-model", "m", "--judge-attempts", "1"]
    assert cli([*argv, "--judge-backoff", "0", "--quiet", "--output", str(out)]) == 1
    line = last_error(capsys, "errors")
    assert line.startswith("groupwise analyze errors: no solution was judged: 2 of 2 failed;")
    assert "(grpo, A, sample 0): transport: URLError from http://127.0.0.1:9/v1/chat" in line
    assert "Connection refused" in line
    # what was asked is kept (a rerun asks the failures again); no empty figure is left
    assert (out / "judgements.jsonl").is_file() and (out / "errors.json").is_file()
    for figure in ("errors_types", "errors_position"):
        assert not (out / f"{figure}.png").exists()
        note = (out / f"{figure}.not-drawn.txt").read_text()
        assert note.startswith(f"{figure}.png not drawn: no solution was judged")


def test_errors_with_no_incorrect_completion_ends_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path / "right", [sample("A", i, True) for i in range(2)])
    argv = ["analyze", "errors", f"right={run}", "--judge-local", "tiny-random"]
    assert cli([*argv, "--output", str(tmp_path / "out")]) == 1
    assert last_error(capsys, "errors") == (
        "groupwise analyze errors: no incorrect completion to judge in right"
    )
    assert not (tmp_path / "out").exists()


def mixed(pid: str, good: float, bad: float) -> list[Any]:
    """A problem with one correct (mean_logp `good`) and one incorrect (`bad`) completion."""
    return [sample(pid, 0, True, good), sample(pid, 1, False, bad)]


def test_margin_draws_only_runs_with_enough_margins_and_names_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    many = write_run(tmp_path / "many", [s for i in range(6) for s in mixed(f"p{i}", -0.1, -i)])
    none = write_run(tmp_path / "none", [sample("p0", i, True) for i in range(2)])
    out = tmp_path / "out"
    argv = ["analyze", "margin", f"many={many}", f"none={none}", "--output", str(out)]
    assert cli(argv) == 0
    printed = capsys.readouterr().out
    assert "margin.png: run 'none' has 0 problems with a margin" in printed
    assert "left out of it" in printed and "run 'many'" not in printed.split("ratio")[-1]
    assert (out / "margin.png").stat().st_size > 0
    assert not (out / "margin.not-drawn.txt").exists()
    # the same folder, now from a run of one margin: the old figure goes, the reason stays
    one = write_run(tmp_path / "one", mixed("p0", -0.1, -1.0))
    assert cli(["analyze", "margin", f"one={one}", "--output", str(out)]) == 0
    assert not (out / "margin.png").exists()
    assert (out / "margin.not-drawn.txt").read_text() == (
        "margin.png not drawn: no run has enough margins for a density\n"
    )


def test_margin_with_no_usable_pair_in_any_run_ends_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    right = write_run(tmp_path / "right", [sample("p0", i, True) for i in range(2)])
    wrong = write_run(tmp_path / "wrong", [sample("p0", i, False) for i in range(2)])
    argv = ["analyze", "margin", f"right={right}", f"wrong={wrong}"]
    assert cli([*argv, "--output", str(tmp_path / "out")]) == 1
    line = last_error(capsys, "margin")
    assert line.startswith("groupwise analyze margin: no problem has both a correct and an")
    assert "in any run (right, wrong)" in line
    assert not (tmp_path / "out" / "margin.png").exists()


def test_perplexity_and_coverage_with_no_problem_in_common_end_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write_run(tmp_path / "a", [sample("p0", i, i == 0) for i in range(2)])
    b = write_run(tmp_path / "b", [sample("p1", i, i == 0) for i in range(2)])
    for analysis in ("perplexity", "coverage"):
        out = tmp_path / analysis
        with pytest.warns(UserWarning):  # fewer samples than the paper's protocol
            assert cli(["analyze", analysis, f"a={a}", f"b={b}", "--output", str(out)]) == 1
        assert last_error(capsys, analysis) == (
            f"groupwise analyze {analysis}: the runs (a, b) have no problem in common "
            "(benchmark and problem id): evaluate them on the same problems"
        )
        assert not out.exists()


def test_perplexity_with_no_stratum_ends_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    half = write_run(tmp_path / "half", [sample("p0", i, i == 0) for i in range(2)])
    with pytest.warns(UserWarning):
        assert cli(["analyze", "perplexity", f"half={half}", "--output", str(tmp_path)]) == 1
    line = last_error(capsys, "perplexity")
    assert "no shared problem is jointly solvable" in line and "--solvable-fraction" in line


def test_perplexity_panels_each_have_their_own_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    from groupwise import figures
    from groupwise.analysis.perplexity import plot_perplexity

    drawn = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, path: drawn.append(fig) or path)
    solvable, unsolved = [1.02, 1.05, 1.08, 1.1], [6.0, 8.0, 12.0, 30.0]
    ppl = {"jointly solvable": {"a": solvable}, "jointly unsolved": {"a": unsolved}}
    plot_perplexity(ppl, Path("unused.png"))
    low, high = drawn[0].axes[0].get_ylim()
    # the solvable boxes fill their panel instead of a sliver at the bottom of 1..30
    assert low > 0.9 and high < 1.2
    assert drawn[0].axes[1].get_ylim()[1] > 29


def test_analyze_takes_quiet_and_prints_a_percent_sign_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        cli(["analyze", "coverage", "--help"])
    text = capsys.readouterr().out
    assert "% of the union" in text and "%%" not in text and "--quiet" in text
    with pytest.raises(SystemExit):
        cli(["analyze", "--help"])
    text = capsys.readouterr().out
    assert "% of the union" in " ".join(text.split()) and "%%" not in text
