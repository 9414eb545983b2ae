"""Agreement with Math-Verify's own test expectations: how often a checker says what Math-Verify's
test suite says a (gold, answer) pair should get.

The cases are the parametrized (gold, prediction, expected) rows of Math-Verify's regression
tests (tests/test_all.py, test_boxed.py, test_numina_cases.py, test_open_thoughts.py of
github.com/huggingface/Math-Verify; point --tests at that folder of a checkout: they are not
shipped with groupwise). Each row is judged by

- `math-verify`: plain `math_verify.parse` + `verify` with their defaults, the reference;
- each of groupwise's checking modes (`groupwise.rewards.judge`, `--modes`).

Every checker runs in its own child process, with a 10 s alarm per case (a timeout counts as a
disagreement). Writes bench/results/math_verify_agreement.md: agreement per test file and
checker, and the rows each checker gets wrong.

    git clone https://github.com/huggingface/Math-Verify /tmp/Math-Verify
    python bench/math_verify_agreement.py --tests /tmp/Math-Verify/tests
    .venv-verl/bin/python bench/math_verify_agreement.py --tests /tmp/Math-Verify/tests \\
        --results math_verify_agreement_verl     # verl's antlr4 4.9.3
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, load_average, markdown_table, write_results

FILES = ("test_all.py", "test_boxed.py", "test_numina_cases.py", "test_open_thoughts.py")
MODES = ("groupwise", "math_verify", "amir_official")


def collect_cases(tests: Path) -> list[dict[str, Any]]:
    """The (gold, prediction, expected) rows of every `pytest.mark.parametrize` in FILES whose
    third value is a bool or 0/1 (Math-Verify's convention), with their file and test name."""
    cases = []
    sys.path.insert(0, str(tests.parent))  # its files import one another as tests.test_all
    for name in FILES:
        path = tests / name
        if not path.is_file() or tests.name != "tests":
            raise SystemExit(f"{path}: not found; --tests must be Math-Verify's tests folder")
        module = importlib.import_module(f"tests.{path.stem}")
        for test_name in dir(module):
            for mark in getattr(getattr(module, test_name), "pytestmark", []):
                if mark.name != "parametrize":
                    continue
                for row in mark.args[1]:
                    values = list(getattr(row, "values", row))
                    if len(values) < 3 or values[2] not in (0, 1, True, False):
                        continue
                    gold, prediction, expected = values[:3]
                    cases.append(
                        {
                            "file": name,
                            "test": test_name,
                            "gold": str(gold),
                            "prediction": str(prediction),
                            "expected": bool(expected),
                        }
                    )
    return cases


class _Timeout(Exception):
    pass


def _raise_timeout(*_: Any) -> None:
    raise _Timeout


def judge_cases(checker: str, cases: list[dict[str, Any]]) -> list[str]:
    """'correct' / 'wrong' / 'timeout' / 'error: ...' for every case, by `checker`
    ("math-verify", or a groupwise checking mode)."""
    import logging

    logging.disable(logging.WARNING)
    sys.setrecursionlimit(10_000)
    if checker == "math-verify":
        from math_verify import parse, verify

        def decide(gold: str, prediction: str) -> bool:
            return bool(
                verify(
                    parse(gold, parsing_timeout=None),
                    parse(prediction, parsing_timeout=None),
                    timeout_seconds=None,
                )
            )
    else:
        from groupwise.rewards import checking

        judge = checking.judge

        def decide(gold: str, prediction: str) -> bool:
            return judge(prediction, gold, mode=checker).correct

    signal.signal(signal.SIGALRM, _raise_timeout)
    verdicts = []
    for case in cases:
        signal.alarm(10)
        try:
            verdicts.append("correct" if decide(case["gold"], case["prediction"]) else "wrong")
        except _Timeout:
            verdicts.append("timeout")
        except Exception as error:  # a checker that raises disagrees, and the table says why
            verdicts.append(f"error: {type(error).__name__}")
        finally:
            signal.alarm(0)
    return verdicts


def run_child(checker: str, tests: Path) -> list[str]:
    """judge_cases in a child process importing this checkout's groupwise."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    command = [sys.executable, __file__, "--tests", str(tests), "--child", checker]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=Path, required=True, help="Math-Verify's tests folder")
    parser.add_argument("--modes", default=",".join(MODES), help="groupwise modes to judge")
    parser.add_argument(
        "--results", default="math_verify_agreement", help="bench/results/NAME.md (per environment)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cases = collect_cases(args.tests)
    if args.child:
        print(json.dumps(judge_cases(args.child, cases)))
        return

    load_before = load_average()
    checkers: dict[str, list[str]] = {"math-verify": run_child("math-verify", args.tests)}
    for mode in args.modes.split(","):
        checkers[f"groupwise, {mode}"] = run_child(mode, args.tests)

    per_file = Counter(case["file"] for case in cases)
    rows, wrong_rows = [], []
    for name, verdicts in checkers.items():
        agree = Counter()
        accepted_wrong = 0
        for case, verdict in zip(cases, verdicts, strict=True):
            said = verdict == "correct"
            agree[case["file"]] += said == case["expected"]
            accepted_wrong += said and not case["expected"]
            if said != case["expected"]:
                wrong_rows.append(
                    [
                        name,
                        case["file"],
                        case["gold"][:60],
                        case["prediction"][-80:],
                        case["expected"],
                        verdict,
                    ]
                )
        total = sum(agree.values())
        rows.append(
            [
                name,
                *(f"{agree[f]}/{per_file[f]}" for f in FILES),
                f"{total}/{len(cases)}",
                accepted_wrong,
            ]
        )
    table = markdown_table(["checker", *FILES, "all", "accepted, expected wrong"], rows)
    cells = [
        [c if isinstance(c, bool) else str(c).replace("|", "\\|").replace("\n", " ") for c in row]
        for row in wrong_rows
    ]
    disagreements = markdown_table(
        ["checker", "file", "gold", "prediction (end)", "expected", "verdict"], cells
    )
    write_results(
        args.results,
        "Agreement with Math-Verify's test expectations",
        [("Agreement per test file", table), ("Every disagreement", disagreements)],
        load_before=load_before,
        notes="\n\n".join(__doc__.split("\n\n")[1:4]),
    )


if __name__ == "__main__":
    main()
