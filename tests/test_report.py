"""Tests of `groupwise report`: a page from fake run folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from groupwise.cli import main as cli
from groupwise.report import eval_tables, load_record, read_metrics


def _results(p1: float, p2: float) -> dict:
    return {
        "gsm8k": {
            "n": 2,
            "problems": 4,
            "pass@1": p1,
            "pass@1_ci": [p1 - 0.1, p1 + 0.1],
            "pass@2": p2,
            "pass@2_ci": [p2 - 0.1, p2 + 0.1],
            "timeouts": 0,
            "no_answer": 1,
        },
        "config": {"model": "tiny-random", "n": 2, "ks": [1, 2]},
    }


def _fake_run(folder: Path, steps: int, with_lambda: bool) -> Path:
    folder.mkdir(parents=True)
    lines = []
    for step in range(1, steps + 1):
        row = {
            "step": step,
            "reward_mean": 0.1 * step,
            "accuracy": step / steps,
            "group_all_correct": 0.1,
            "group_all_wrong": 0.5,
            "group_mixed": 0.4,
        }
        if with_lambda:
            row["lambda"] = 0.01
        if step == 2:
            del row["accuracy"]  # a missing key is tolerated
        lines.append(json.dumps(row))
    # a run still writing: torn last line
    (folder / "metrics.jsonl").write_text("\n".join(lines) + '\n{"step": 9')
    (folder / "eval" / "final").mkdir(parents=True)
    (folder / "eval" / "final" / "results.json").write_text(json.dumps(_results(0.25, 0.5)))
    return folder


def test_report_markdown_and_html(tmp_path: Path) -> None:
    amir = _fake_run(tmp_path / "amir", steps=60, with_lambda=True)
    grpo = _fake_run(tmp_path / "grpo", steps=5, with_lambda=False)
    eval_only = tmp_path / "base-eval"
    eval_only.mkdir()
    (eval_only / "results.json").write_text(json.dumps(_results(0.125, 0.375)))

    rows = read_metrics(amir / "metrics.jsonl")
    assert len(rows) == 60 and "accuracy" not in rows[1]

    page = tmp_path / "page" / "report.md"
    assert (
        cli(["report", str(amir), f"GRPO={grpo}", f"base={eval_only}", "--output", str(page)]) == 0
    )
    text = page.read_text()
    assert "![training curves](report-training.png)" in text
    assert (page.parent / "report-training.png").stat().st_size > 0
    assert (page.parent / "report-pass1.png").stat().st_size > 0
    assert "| amir | " in text and "| GRPO | " in text
    # one table per k, a column per evaluation, percent with the interval
    # an evaluation folder given itself is named once: base, not base/base-eval
    assert "| benchmark | amir/final | GRPO/final | base |" in text
    assert "| gsm8k | 25.0 [15.0, 35.0] | 25.0 [15.0, 35.0] | 12.5 [2.5, 22.5] |" in text
    assert "### pass@2" in text and "| gsm8k | 50.0 [40.0, 60.0] |" in text

    html_page = tmp_path / "page" / "report.html"
    assert (
        cli(["report", str(amir), str(grpo), "--output", str(html_page), "--title", "A <b> test"])
        == 0
    )
    html = html_page.read_text()
    assert html.startswith("<!doctype html>") and "<title>A &lt;b&gt; test</title>" in html
    assert '<img src="report-training.png"' in html and "<td>25.0 [15.0, 35.0]</td>" in html


def test_report_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no metrics.jsonl, results.json"):
        load_record("empty", empty)
    assert cli(["report", str(empty), "--output", str(tmp_path / "page.pdf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "groupwise report: --output" in err and "use a .md" in err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metrics.jsonl").write_text('{"step": 1}\n[1, 2]\n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: expected a JSON object"):
        read_metrics(bad / "metrics.jsonl")


def test_report_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli(["report", "--help"])
    assert exit_info.value.code == 0 and "usage: groupwise report" in capsys.readouterr().out


def test_eval_tables_missing_cells() -> None:
    tables = eval_tables(
        {"a": _results(0.5, 0.75), "b": {"aime25": {"pass@1": 0.0, "pass@1_ci": [0.0, 0.0]}}}
    )
    (k1, header, rows), (k2, _, rows2) = tables
    assert (k1, k2) == (1, 2) and header == ["benchmark", "a", "b"]
    assert rows == [["gsm8k", "50.0 [40.0, 60.0]", "-"], ["aime25", "-", "0.0 [0.0, 0.0]"]]
    assert rows2[1] == ["aime25", "-", "-"]


def _training_run(folder: Path, algorithm: dict, finished: bool = True) -> Path:
    """A run folder of `groupwise train` with held-out evaluations at steps 0, 2 and 4 (3
    problems x 4 samples); its metrics log 0 for the terms it has not, as the trainer does."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(json.dumps({"algorithm": algorithm}))
    rows = [
        {"step": s, "reward_mean": 0.1 * s, "preference_loss": 0.5 / s, "kl": 0.01 * s}
        if algorithm.get("amir")
        else {"step": s, "reward_mean": 0.1 * s, "preference_loss": 0.0, "kl": 0.0}
        for s in range(1, 5)
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    written = {"pass@1": 0.25, "pass@1_ci": [0.0, 0.5], "pass@2": 0.5, "pass@2_ci": [0.1, 0.9]}
    lines = [
        {"step": 0, "n": 4, "correct": [0, 1, 2], "pass_at_k": written},
        {"step": 2, "n": 4, "correct": [0, 2, 4]},  # no table: computed from the counts
        {"step": 4, "n": 4, "correct": [4, 4, 4], "pass_at_k": {"pass@1": 1.0}},
    ]
    (folder / "heldout.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    if finished:
        (folder / "final").mkdir()
    return folder


def test_report_shows_the_held_out_evaluations_of_training_runs(tmp_path: Path) -> None:
    grpo = _training_run(tmp_path / "grpo", {"amir": False, "kl_coef": 0.0})
    going = _training_run(tmp_path / "going", {"amir": True, "kl_coef": 0.1}, finished=False)
    page = tmp_path / "report.md"
    assert cli(["report", str(grpo), str(going), "--output", str(page)]) == 0
    text = page.read_text()
    assert "| grpo | " in text and "| held-out at steps 0, 2, 4 |" in text
    assert "## Held-out evaluations during training" in text
    assert "| run | step | when | problems | samples | pass@1 | pass@2 | pass@4 |" in text
    # as training wrote it; k a line lacks is '-'
    assert "| grpo | 0 | before | 3 | 4 | 25.0 [0.0, 50.0] | 50.0 [10.0, 90.0] | - |" in text
    # computed from [0, 2, 4] of 4: pass@1 (0 + 1/2 + 1) / 3, pass@2 (0 + 5/6 + 1) / 3, pass@4 2/3
    row = next(line for line in text.splitlines() if line.startswith("| grpo | 2 | during |"))
    cells = [c.split(" [")[0] for c in row.strip("| ").split(" | ")[5:]]
    assert cells == ["50.0", "61.1", "66.7"]
    assert "| grpo | 4 | after | 3 | 4 | 100.0 | - | - |" in text
    assert "| going | 4 | during |" in text  # no final/: the run has not ended
    assert "![held-out pass@1 over training](report-heldout.png)" in text
    assert (tmp_path / "report-heldout.png").stat().st_size > 0


def test_report_leaves_out_terms_a_run_does_not_have(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from groupwise import figures
    from groupwise.report import plot_curves

    drawn = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, path: drawn.append(fig) or path)
    grpo = load_record("grpo", _training_run(tmp_path / "grpo", {"amir": False, "kl_coef": 0}))
    amir = load_record("amir", _training_run(tmp_path / "amir", {"amir": True, "kl_coef": 0.1}))

    def panels(*records: object) -> dict[str, list[str]]:
        plot_curves(records, tmp_path / "curves.png")
        axes = [ax for ax in drawn.pop().axes if ax.get_visible()]
        return {ax.get_title(): [line.get_label() for line in ax.get_lines()] for ax in axes}

    assert panels(grpo) == {"mean reward": ["grpo"]}
    both = panels(grpo, amir)
    assert both["preference loss"] == ["amir"] and both["KL to reference"] == ["amir"]
    assert both["mean reward"] == ["grpo", "amir"]
