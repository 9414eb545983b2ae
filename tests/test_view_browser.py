"""groupwise view in a real browser: headless Chromium (the Debian package; scripts/
setup_browser.sh installs it, scripts/test.sh runs this file in the verl lane) loads each page
from disk, and the tests read the page it rendered (--dump-dom) and its console (--enable-logging):
a real 2-step AMIR-GRPO + LENS run's step 1 completions and pair links, a step chosen and a
filter applied through the URL hash, an evaluation's first problem, two evaluations side by side,
no script error; and a screenshot of each page kind (docs/guides/view.md, "Tested in a
browser")."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARITH = "arith:test@level=mid@size=2000@seed=1"
REPO = Path(__file__).resolve().parents[1]


def chromium(profile: Path, url: str, *args: str) -> tuple[str, str]:
    """(stdout, stderr) of headless Chromium on url: the page's console is in stderr."""
    if CHROMIUM is None:
        pytest.fail("no chromium on PATH: bash scripts/setup_browser.sh installs it")
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",  # CI runs as root
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=5000",
            *args,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


def groupwise(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "groupwise", *args], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, f"groupwise {' '.join(args)}:\n{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A real 2-step AMIR-GRPO + LENS run of the tiny arith policy, an evaluation of the base
    policy and of the trained one, and their pages."""
    root = tmp_path_factory.mktemp("view")
    run = root / "run"
    groupwise(
        "train",
        "--config",
        "configs/testbed_arith.yaml",
        "train.max_steps=2",
        "algorithm.advantage=lens",
        "algorithm.amir=true",
        "train.log_rollouts=true",
        "rollout.questions_per_step=4",
        f"train.output_dir={run}",
    )
    sampling = ["--n", "4", "--limit", "6", "--temperature", "1.0", "--max-new-tokens", "96"]
    groupwise("eval", "--model", str(run), *sampling, "--output", str(root / "after"))
    groupwise(
        "eval", "--model", "arith-base", "--prompt", "plain", "--checking", "groupwise",
        "--benchmarks", ARITH, *sampling, "--output", str(root / "before"),
    )  # fmt: skip
    out = {"run": run, "after": root / "after", "profile": root / "profile"}
    for name, folders in (("run", [run]), ("eval", [root / "after"]), ("compare", [
        root / "before", root / "after"
    ])):  # fmt: skip
        out[f"{name}.html"] = root / f"{name}.html"
        groupwise("view", *map(str, folders), "--output", str(out[f"{name}.html"]))
    return out


def dom(pages: dict[str, Path], page: str, hash_: str = "") -> str:
    """The rendered page, asserting that no script error reached the page or the console."""
    url = pages[page].as_uri() + (f"#{hash_}" if hash_ else "")
    text, log = chromium(pages["profile"], url, "--dump-dom")
    assert 'data-ready="1"' in text, "the page's script did not finish rendering"
    assert 'id="gw-errors"' not in text, re.search(r'id="gw-errors".{0,500}', text).group(0)
    console = [line for line in log.splitlines() if ":CONSOLE" in line]
    assert not console, console
    return text


def _shown(text: str) -> int:
    return int(re.search(r'id="count">(\d+) of \d+ shown', text).group(1))


def _steps(run: Path) -> dict[int, dict]:
    lines = (run / "rollouts.jsonl").read_text().splitlines()
    return {row["step"]: row for row in map(json.loads, lines)}


def test_the_run_page_shows_step_1_with_its_pairs(pages: dict[str, Path]) -> None:
    text = dom(pages, "run.html", "step=1")
    step = _steps(pages["run"])[1]
    rows = re.findall(r'<div class="c (?:ok|bad)" id="s1-g\d+-\d+"', text)
    assert len(rows) == len(step["completions"]) == 32  # 4 groups of 8, all on the first screen
    for completion in step["completions"][:8]:
        assert html.escape(completion.strip(), quote=False) in text
    pairs = len(step["pairs"][0])
    assert pairs > 0
    # each pair: a link at each end and one arc between the two rows
    assert text.count('class="pair-link"') == 2 * pairs
    assert len(re.findall(r'<path[^>]*class="arc"', text)) == pairs
    assert "LENS rt" in text and "p / D(q)" in text


def test_the_hash_chooses_a_step_and_filters_change_what_is_shown(pages: dict[str, Path]) -> None:
    steps = _steps(pages["run"])
    text = dom(pages, "run.html", "step=2")
    assert "<b>step 2</b>" in text and re.findall(r'id="s2-g0-0"', text)
    correct = steps[2]["correct"]
    all_wrong = sum(not any(correct[q * 8 : q * 8 + 8]) for q in range(4))
    text = dom(pages, "run.html", "step=2&only=wrong")
    assert _shown(text) == all_wrong == len(re.findall(r'data-kind="wrong"', text))
    assert 'data-kind="mixed"' not in text
    question = steps[1]["questions"][1]
    text = dom(pages, "run.html", "step=1&q=" + question.replace(" ", "%20"))
    assert _shown(text) == sum(q == question for q in steps[1]["questions"]) == 1
    assert 'id="s1-g1"' in text and 'id="s1-g0"' not in text


def test_the_evaluation_page_shows_its_first_problem_and_filters(pages: dict[str, Path]) -> None:
    samples = [json.loads(line) for line in (pages["after"] / "samples.jsonl").open()]
    text = dom(pages, "eval.html")
    first = [s for s in samples if s["problem_id"] == samples[0]["problem_id"]]
    assert len(re.findall(r'<div class="c (?:ok|bad)" id="p0-\d+"', text)) == len(first) == 4
    for sample in first:
        assert html.escape(sample["completion"].strip(), quote=False) in text
    assert "pass@1" in text and "pass@4" in text
    solved = len({s["problem_id"] for s in samples if s["correct"]})
    text = dom(pages, "eval.html", "only=unsolved")
    assert _shown(text) == 6 - solved == text.count('data-solved="0"')
    assert 'data-solved="1"' not in text


def test_two_evaluations_side_by_side(pages: dict[str, Path]) -> None:
    text = dom(pages, "compare.html")
    assert "before vs after" in text
    assert _shown(text) == 6 and text.count('class="side-by-side"') == 6
    flips = [m == "1" for m in re.findall(r'data-flip="(\d)"', text)]
    assert flips == sorted(flips, reverse=True)  # those one solves and the other not first
    text = dom(pages, "compare.html", "only=differ")
    assert _shown(text) == sum(flips)


def test_a_screenshot_of_each_page_kind(pages: dict[str, Path], tmp_path: Path) -> None:
    for page in ("run.html", "eval.html", "compare.html"):
        shot = tmp_path / f"{page}.png"
        url = pages[page].as_uri()
        chromium(pages["profile"], url, f"--screenshot={shot}", "--window-size=1400,1000")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
