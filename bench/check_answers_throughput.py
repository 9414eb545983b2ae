"""Throughput of `check_answers` (answers checked per second) with a warm worker pool.

Workloads, N completions each, half of them wrong:
- gsm8k: GSM8K test golds in a short reasoning text ending in `#### N` (the wrong ones end in
  another integer): the integer fast path.
- math500: `The answer is $\\boxed{gold}$` for MATH-500 golds, the wrong ones `\\boxed{gold + 1}`
  (another letter for the three option-letter golds): unequal non-numeric answers go through
  math-verify (sympy).
- unboxed (N/4 completions): MATH-500 reference solutions with their box removed (LaTeX prose
  of about 500 characters, the answer in the last formula): no rule of ours applies, so
  math-verify's extraction reads the whole text (older code took the last number). Its
  verdict counts show how many each version gets right; all are right in principle.

Each measurement runs in a fresh child process (one per mode and round), the modes alternating
round after round under the same load; the load average is recorded before every run. The
table gives the median over rounds (and every round). Writes
bench/results/check_answers_throughput.md (command, machine, date, table).

    python bench/check_answers_throughput.py             # the checker's default mode
    python bench/check_answers_throughput.py --modes     # every checking mode
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, load_average, write_results

# amir_eval is left out: these completions have no <answer> block, so it reads none of them.
MODES = ("groupwise", "math_verify", "amir_official")


def gsm8k_batch(n: int) -> tuple[list[str], list[str]]:
    """n GSM8K-style completions and their golds; odd indices carry a wrong answer."""
    from groupwise.data import load_benchmark

    problems = load_benchmark("gsm8k", "test")
    texts, golds = [], []
    for i in range(n):
        problem = problems[i % len(problems)]
        answer = problem.answer if i % 2 == 0 else str(int(float(problem.answer)) + 1 + i % 7)
        texts.append(
            f"Let me work through this step by step.\n{problem.question[:120]}\n"
            f"Adding up the amounts gives {answer}.\n#### {answer}"
        )
        golds.append(problem.answer)
    return texts, golds


def math500_batch(n: int) -> tuple[list[str], list[str]]:
    """n boxed MATH-500 answers and their golds; odd indices box `gold + 1` (wrong)."""
    from groupwise.data import load_benchmark
    from groupwise.rewards.extract import gold_choice

    problems = load_benchmark("math500")
    texts, golds = [], []
    for i in range(n):
        gold = problems[i % len(problems)].answer
        if i % 2 == 0:
            answer = gold
        elif gold_choice(gold) is not None:  # MATH-500 has three option-letter golds
            answer = "A" if gold_choice(gold) != "A" else "B"
        else:
            answer = f"{gold} + 1"
        texts.append(f"Working it out carefully. The answer is $\\boxed{{{answer}}}$.")
        golds.append(gold)
    return texts, golds


def unboxed_batch(n: int) -> tuple[list[str], list[str]]:
    """n MATH-500 reference solutions without their `\\boxed{}` (its content stays), and golds."""
    from groupwise.data import load_benchmark
    from groupwise.rewards.extract import last_boxed

    problems = load_benchmark("math500")
    texts, golds = [], []
    for i in range(n):
        problem = problems[i % len(problems)]
        solution = problem.meta["solution"]
        content = last_boxed(solution)
        texts.append(solution.replace(f"\\boxed{{{content}}}", content or ""))
        golds.append(problem.answer)
    return texts, golds


def measure(n: int, workers: int, repeats: int, mode: str | None) -> dict:
    """One child run: seconds per batch and the verdict counts of each workload's last batch.
    mode None: the checker's default."""
    from groupwise.rewards import AnswerChecker, summarize

    options = {} if mode is None else {"mode": mode}
    rows, summaries = [], {}
    with AnswerChecker(workers=workers) as checker:
        texts, golds = gsm8k_batch(n)
        start = time.perf_counter()
        checker.check(texts[:1], golds[:1], **options)
        rows.append(["first call: starts the workers, 1 answer", 1, time.perf_counter() - start])
        for repeat in range(repeats):
            start = time.perf_counter()
            verdicts = checker.check(texts, golds, **options)
            elapsed = time.perf_counter() - start
            rows.append([f"gsm8k `#### N`, warm, batch {repeat + 1}", n, elapsed])
        summaries["gsm8k"] = summarize(verdicts)
        texts, golds = math500_batch(n)
        start = time.perf_counter()
        verdicts = checker.check(texts, golds, **options)
        rows.append(["math500 `\\boxed{}`, warm", n, time.perf_counter() - start])
        summaries["math500"] = summarize(verdicts)
        texts, golds = unboxed_batch(n // 4)
        start = time.perf_counter()
        verdicts = checker.check(texts, golds, **options)
        rows.append(["unboxed MATH-500 solutions, warm", n // 4, time.perf_counter() - start])
        summaries["unboxed"] = summarize(verdicts)
    return {"rows": rows, "summaries": summaries}


def run_child(args: argparse.Namespace, mode: str | None) -> dict:
    """`measure` in a fresh interpreter importing this checkout's groupwise; adds the load
    average seen just before it started."""
    load = os.getloadavg()[0]
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), OMP_NUM_THREADS="1")
    command = [sys.executable, __file__, "--child", "--n", str(args.n)]
    command += ["--workers", str(args.workers), "--repeats", str(args.repeats)]
    command += ["--mode", mode] if mode else []
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result["load"] = load
    return result


def _rate(answers: int, seconds: float) -> str:
    return f"{answers / seconds:.0f}" if answers > 1 else "-"


def table(runs: dict[str, list[dict]]) -> str:
    """One row per workload and checking mode: median seconds over rounds, answers per second
    at the median, and every round's seconds."""
    lines = [
        "| run | mode | answers | median s | answers/s | rounds (s) |",
        "|---|---|---|---|---|---|",
    ]
    first = next(iter(runs.values()))[0]["rows"]
    for i, (label, answers, _) in enumerate(first):
        for name, version_runs in runs.items():
            seconds = [run["rows"][i][2] for run in version_runs]
            median = statistics.median(seconds)
            rounds = ", ".join(f"{s:.3f}" for s in seconds)
            lines.append(
                f"| {label} | {name} | {answers} | {median:.3f} | {_rate(answers, median)} "
                f"| {rounds} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="completions per workload")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--repeats", type=int, default=3, help="timed gsm8k batches")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--modes", action="store_true", help="measure every checking mode")
    parser.add_argument("--mode", default=None, choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.n, args.workers, args.repeats, args.mode)))
        return 0

    load_before = load_average()
    modes: tuple[str | None, ...] = MODES if args.modes else (None,)
    runs: dict[str, list[dict]] = {mode or "default": [] for mode in modes}
    for round_ in range(args.rounds):
        for mode in modes:
            name = mode or "default"
            runs[name].append(run_child(args, mode))
            print(f"round {round_ + 1} {name}: load {runs[name][-1]['load']:.2f}", flush=True)
    loads = "; ".join(
        name + ": " + ", ".join(f"{run['load']:.2f}" for run in runs[name]) for name in runs
    )
    verdicts = "\n".join(
        f"- {name}, {workload}: {counts}"
        for name in runs
        for workload, counts in runs[name][-1]["summaries"].items()
    )
    write_results(
        "check_answers_throughput",
        "check_answers throughput",
        [("Seconds per batch", table(runs)), ("Verdicts (last round, last batch)", verdicts)],
        load_before=load_before,
        notes=f"{args.n} completions per workload, half wrong; {args.workers} worker processes, "
        f"one task per worker at a time, 5 s timeout per answer. Each run is a fresh process; "
        f"the modes alternate within each of {args.rounds} rounds.\n\n"
        f"1-minute load average before each run, in round order: {loads}",
    )
    expected = (args.n + 1) // 2
    off = {
        (name, workload): counts["correct"]
        for name in runs
        if name in ("default", "groupwise")  # the other modes read these answers differently
        for workload, counts in runs[name][-1]["summaries"].items()
        if workload != "unboxed" and counts["correct"] != expected
    }
    if off:
        print(f"unexpected correct counts {off}, expected {expected} each")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
