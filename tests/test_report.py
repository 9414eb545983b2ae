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
    assert "| benchmark | amir/final | GRPO/final | base/base-eval |" in text
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
