"""Throughput of `check_answers` (answers checked per second) with a warm worker pool.

Workloads, N completions each, half of them wrong:
- gsm8k: GSM8K test golds in a short reasoning text ending in `#### N` (the wrong ones end in
  another integer): the integer fast path.
- math500: `The answer is $\\boxed{gold}$` for MATH-500 golds, the wrong ones `\\boxed{gold + 1}`
  (another letter for the three option-letter golds): unequal non-numeric answers go through
  math-verify (sympy).

Prints a table and writes bench/results/check_answers_throughput.md (command, machine, date).

    python bench/check_answers_throughput.py --n 1000 --workers 2
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

from groupwise.data import load_benchmark
from groupwise.rewards import AnswerChecker, summarize
from groupwise.rewards.extract import gold_choice

RESULTS = Path(__file__).resolve().parent / "results" / "check_answers_throughput.md"


def gsm8k_batch(n: int, data_dir: str | None) -> tuple[list[str], list[str]]:
    """n GSM8K-style completions and their golds; odd indices carry a wrong answer."""
    problems = load_benchmark("gsm8k", "test", data_dir=data_dir)
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


def math500_batch(n: int, data_dir: str | None) -> tuple[list[str], list[str]]:
    """n boxed MATH-500 answers and their golds; odd indices box `gold + 1` (wrong)."""
    problems = load_benchmark("math500", data_dir=data_dir)
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="completions per workload")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--repeats", type=int, default=3, help="timed gsm8k batches")
    parser.add_argument("--data-dir", default=None, help="benchmark folder (default: env)")
    args = parser.parse_args()

    rows = []
    summaries = {}
    with AnswerChecker(workers=args.workers) as checker:
        texts, golds = gsm8k_batch(args.n, args.data_dir)
        start = time.perf_counter()
        checker.check(texts[:1], golds[:1])
        rows.append(("first call: starts the workers, 1 answer", 1, time.perf_counter() - start))
        for repeat in range(args.repeats):
            start = time.perf_counter()
            verdicts = checker.check(texts, golds)
            rows.append(
                (f"gsm8k `#### N`, warm, batch {repeat + 1}", args.n, time.perf_counter() - start)
            )
        summaries["gsm8k"] = summarize(verdicts)
        texts, golds = math500_batch(args.n, args.data_dir)
        start = time.perf_counter()
        verdicts = checker.check(texts, golds, progress=True)
        rows.append(
            (
                "math500 `\\boxed{}`, warm (wrong half: math-verify)",
                args.n,
                time.perf_counter() - start,
            )
        )
        summaries["math500"] = summarize(verdicts)

    lines = [
        "| run | answers | seconds | answers/s |",
        "|---|---|---|---|",
        *(
            f"| {name} | {k} | {s:.3f} | {k / s:.0f} |"
            if k > 1
            else f"| {name} | {k} | {s:.3f} | - |"
            for name, k, s in rows
        ),
    ]
    table = "\n".join(lines)
    verdict_lines = "\n".join(f"- {name}: {counts}" for name, counts in summaries.items())
    print(table)
    print(verdict_lines)
    machine = (
        f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}, "
        f"Python {platform.python_version()}; load average at the end "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} (other jobs share the CPUs)"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        "# check_answers throughput\n\n"
        f"Command: `python {' '.join(['bench/check_answers_throughput.py', *sys.argv[1:]])}`\n\n"
        f"Machine: {machine}\n\n"
        f"Date: {datetime.datetime.now().isoformat(timespec='seconds')}\n\n"
        f"{args.n} completions per workload, half wrong; {args.workers} worker processes, one "
        f"task per worker at a time, 5 s timeout per answer.\n\n"
        f"{table}\n\nVerdicts (last batch of each workload):\n\n{verdict_lines}\n"
    )
    print(f"wrote {RESULTS}")
    expected = (args.n + 1) // 2
    wrong_counts = {k: c["correct"] for k, c in summaries.items() if c["correct"] != expected}
    if wrong_counts:
        print(f"unexpected correct counts {wrong_counts}, expected {expected} each")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
