"""`groupwise view` on a large run: page size and time to first render in headless Chromium.

    .venv/bin/python bench/view_page.py                      # writes bench/results/view_page.md
    .venv/bin/python bench/view_page.py --figures docs/guides/figures   # the guide's screenshots

A synthetic run of 1,000 steps x 32 completions (4 groups of 8) of about 1,000 tokens each
(4,000 characters of arithmetic-like text; AMIR pairs and LENS rewards in every group), written
as `groupwise train` writes rollouts.jsonl and metrics.jsonl. For each --max-steps the page
carries (50, the default, 200, and every step), it measures the command's seconds, the page's
bytes, and in headless Chromium (--dump-dom from disk, a fresh profile, 3 rounds): the page's own
time to first render (performance.now() when its script has drawn the first screen: reading and
parsing the file, the steps list, step 1's groups; data-render-ms), and the wall time of the
whole browser call beside that of an empty page (Chromium's start). docs/guides/view.md, "Large
runs".

--figures DIR instead makes a real 20-step AMIR-GRPO + LENS run of the tiny arith policy (4
questions x 8 completions a step), an evaluation of the base and of the trained policy (12
problems, n = 4), their three pages, and a screenshot of each (DIR/view_run.png on step 1,
view_eval.png, view_compare.png).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, load_average, markdown_table, median, write_results

STEPS, QUESTIONS, GROUP = 1000, 4, 8
CHARS = 4000  # about 1,000 tokens of arithmetic at ~4 characters a token


def chromium(profile: Path, url: str, *args: str) -> tuple[str, float]:
    """Headless Chromium's stdout on url and the call's wall seconds."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        raise SystemExit("no chromium on PATH: bash scripts/setup_browser.sh installs it")
    start = time.perf_counter()
    done = subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
         "--virtual-time-budget=10000", *args, url],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    return done.stdout, time.perf_counter() - start


def screenshot(profile: Path, page: Path) -> float:
    """Wall seconds of a headless Chromium call that loads the page and takes a screenshot."""
    shot = profile.with_suffix(".png")
    return chromium(profile, page.as_uri(), f"--screenshot={shot}", "--window-size=1400,1000")[1]


def _texts(rng: random.Random, count: int) -> list[str]:
    """`count` distinct completions of about CHARS characters."""
    out = []
    for _ in range(count):
        lines, size = [], 0
        while size < CHARS:
            a, b = rng.randrange(100), rng.randrange(100)
            line = f"Step: {a} + {b} = {a + b}, so the running total is {a + b}."
            lines.append(line)
            size += len(line) + 1
        out.append("\n".join(lines) + f"\n#### {rng.randrange(100)}")
    return out


def synthetic_run(folder: Path) -> None:
    """rollouts.jsonl and metrics.jsonl of STEPS steps, as the trainer writes them."""
    rng = random.Random(0)
    pool = _texts(rng, 256)
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(
        "model: {name: synthetic}\nrollout: {group_size: 8}\nalgorithm: {advantage: lens, "
        "amir: true}\nreward: {weights: {binary: 1.0}, correctness_component: binary}\n"
    )
    size = QUESTIONS * GROUP
    with open(folder / "rollouts.jsonl", "w") as rollouts, open(folder / "metrics.jsonl", "w") as m:
        for step in range(1, STEPS + 1):
            correct = [rng.random() < 0.4 for _ in range(size)]
            shaped = [1.0 if c else -rng.random() / GROUP for c in correct]
            chosen, rejected = [], []
            for q in range(QUESTIONS):
                rows = range(q * GROUP, q * GROUP + GROUP)
                for i in rows:
                    for j in rows:
                        if correct[i] and not correct[j]:
                            chosen.append(i)
                            rejected.append(j)
            line = {
                "step": step,
                "problem_ids": [f"synthetic-{step}-{q}" for q in range(QUESTIONS)],
                "questions": [f"Question {q} of step {step}: add the numbers." for q in range(4)],
                "truncated": [rng.random() < 0.05 for _ in range(size)],
                "unshaped_rewards": [float(c) for c in correct],
                "sampler_mean_logp": None,
                "completions": [f"(step {step}) " + rng.choice(pool) for _ in range(size)],
                "golds": ["42"] * size,
                "correct": correct,
                "reward_columns": {"binary": [float(c) for c in correct]},
                "rewards": shaped,
                "advantages": [rng.gauss(0, 1) for _ in range(size)],
                "pairs": [chosen, rejected],
            }
            rollouts.write(json.dumps(line) + "\n")
            accuracy = sum(correct) / size
            m.write(json.dumps({"step": step, "accuracy": accuracy, "pairs": len(chosen)}) + "\n")


def measure(run: Path, work: Path, max_steps: int, rounds: int) -> list[object]:
    """One row: steps carried, command seconds, page MB, render ms (median), browser s."""
    page = work / f"page-{max_steps}.html"
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "groupwise", "view", str(run), "--output", str(page),
         "--max-steps", str(max_steps)],
        check=True, capture_output=True,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    renders, walls = [], []
    for r in range(rounds):
        profile = work / f"profile-{max_steps}-{r}"
        text, _ = chromium(profile, page.as_uri() + "#step=1", "--dump-dom")
        found = re.search(r'data-render-ms="(\d+)"', text)
        if found is None or 'id="gw-errors"' in text:
            raise SystemExit(f"{page}: the page did not render")
        renders.append(float(found.group(1)))
        walls.append(screenshot(work / f"shot-{max_steps}-{r}", page))
    carried = STEPS if max_steps == 0 else max_steps
    return [carried, f"{seconds:.1f}", f"{page.stat().st_size / 1e6:.1f}",
            f"{median(renders):.0f}", f"{median(walls):.1f}"]  # fmt: skip


def bench(rounds: int, variants: list[int]) -> None:
    load_before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        synthetic_run(work / "run")
        made = time.perf_counter() - start
        empty = work / "empty.html"
        empty.write_text("<!DOCTYPE html><title>empty</title>")
        baseline = median([screenshot(work / f"p{r}", empty) for r in range(rounds)])
        rows = [measure(work / "run", work, n, rounds) for n in variants]
        rollouts_mb = (work / "run" / "rollouts.jsonl").stat().st_size / 1e6
    table = markdown_table(
        ["steps with groups in the page", "`groupwise view` (s)", "page (MB)",
         "first render in the page (ms, median)", "Chromium: load and screenshot (s, median)"],
        rows,
    )  # fmt: skip
    notes = (
        f"The synthetic run: {STEPS} steps x {QUESTIONS * GROUP} completions of about {CHARS} "
        f"characters (~1,000 tokens), rollouts.jsonl {rollouts_mb:.0f} MB, written in "
        f"{made:.1f} s. Each page has the steps list of all {STEPS} steps; --max-steps chooses "
        "the steps whose groups it carries (0: every step). First render: the page's own "
        "performance.now() once its script has drawn the first screen (file read and parsed, "
        f"steps list, step 1's groups), read from the page Chromium rendered (--dump-dom), "
        f"{rounds} rounds in a fresh profile each. Load and screenshot: the wall time of the "
        "whole `chromium --headless --screenshot` process on the page (the dump's own wall "
        "time is not given: it serializes every JSON block of the page); on an empty page it "
        f"takes {baseline:.1f} s (Chromium's start)."
    )
    write_results(
        "view_page",
        "`groupwise view` of a 1,000-step run: page size and time to first render",
        [("Pages", table)],
        load_before=load_before,
        notes=notes,
    )


def figures(out: Path) -> None:
    """Screenshots of the three page kinds from a real 20-step AMIR-GRPO + LENS run."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)

        def groupwise(*args: str) -> None:
            subprocess.run([sys.executable, "-m", "groupwise", *args], check=True, cwd=REPO)

        groupwise(
            "train", "--config", "configs/testbed_arith.yaml", "train.max_steps=20",
            "algorithm.advantage=lens", "algorithm.amir=true", "train.log_rollouts=true",
            "rollout.questions_per_step=4", f"train.output_dir={work / 'amir_lens'}",
        )  # fmt: skip
        sampling = ["--n", "4", "--limit", "12", "--temperature", "1.0", "--max-new-tokens", "96"]
        groupwise(
            "eval", "--model", str(work / "amir_lens"), *sampling, "--output", str(work / "trained")
        )
        groupwise(
            "eval", "--model", "arith-base", "--prompt", "plain", "--checking", "groupwise",
            "--benchmarks", "arith:test@level=mid@size=2000@seed=1", *sampling,
            "--output", str(work / "base"),
        )  # fmt: skip
        kinds = {"run": [work / "amir_lens"], "eval": [work / "trained"],
                 "compare": [work / "base", work / "trained"]}  # fmt: skip
        for kind, folders in kinds.items():
            page = work / f"{kind}.html"
            groupwise("view", *map(str, folders), "--output", str(page))
            shot = out / f"view_{kind}.png"
            url = page.as_uri() + ("#step=1" if kind == "run" else "")
            chromium(work / f"profile-{kind}", url, f"--screenshot={shot}",
                     "--window-size=1400,1000", "--hide-scrollbars")  # fmt: skip
            print(f"written: {shot}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-steps", default="50,200,0", help="the variants, comma-separated")
    parser.add_argument("--figures", type=Path, default=None, help="write the screenshots here")
    args = parser.parse_args()
    if args.figures is not None:
        figures(args.figures)
        return
    bench(args.rounds, [int(n) for n in args.max_steps.split(",")])


if __name__ == "__main__":
    main()
