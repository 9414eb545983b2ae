"""Answer checking (groupwise.rewards.pool): equivalence, hard timeouts, the worker pool."""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time

import pytest

from groupwise.rewards import (
    AnswerChecker,
    Verdict,
    answers_equivalent,
    check_answers,
    is_correct,
    judge,
    summarize,
)

# (completion, gold, expected status): equivalence the way a careful grader judges it.
EQUIVALENCE_CASES = [
    ("\\boxed{0.5}", "\\frac{1}{2}", "correct"),
    ("\\boxed{\\frac12}", "0.5", "correct"),
    ("\\boxed{1/2}", "\\frac{1}{2}", "correct"),
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", "correct"),
    ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}", "correct"),
    ("\\boxed{(-\\infty, 0)}", "(-\\infty,0)", "correct"),
    ("\\boxed{[0, 1)}", "[0,1)", "correct"),
    ("\\boxed{(3, \\frac{\\pi}{2})}", "\\left( 3, \\frac{\\pi}{2} \\right)", "correct"),
    ("\\boxed{-2, 6}", "6, -2", "correct"),
    ("\\boxed{\\{5, 2\\}}", "\\{2,5\\}", "correct"),
    ("\\boxed{5}", "5 \\text{ cm}", "correct"),
    ("\\boxed{5 \\text{ cm}}", "5", "correct"),
    ("\\boxed{30^\\circ}", "30", "correct"),
    ("\\boxed{30}", "30^\\circ", "correct"),
    ("\\boxed{50\\%}", "50", "correct"),
    ("\\boxed{50}", "50\\%", "correct"),
    ("#### 1,000", "1000", "correct"),
    ("\\boxed{1,000}", "1000", "correct"),
    ("\\boxed{007}", "7", "correct"),
    ("\\boxed{x = 3}", "3", "correct"),
    ("\\boxed{3}", "x=3", "correct"),
    ("\\boxed{\\text{Evelyn}}", "\\text{Evelyn}", "correct"),
    ("\\boxed{Evelyn}", "\\text{Evelyn}", "correct"),
    ("\\boxed{-q + p}", "p - q", "correct"),
    ("\\boxed{x^2+2x+1}", "(x+1)^2", "correct"),
    ("\\boxed{4.5 \\times 10^{33}}", "4.5e33", "correct"),
    ("\\boxed{72.0}", "72", "correct"),
    ("\\boxed{0.333333}", "\\frac{1}{3}", "correct"),
    ("\\boxed{\\dfrac{3}{4}}", "0.75", "correct"),
    ("The answer is $\\$18$.", "18", "correct"),
    ("\\boxed{(-\\infty,-1)\\cup(6,\\infty)}", "(-\\infty,-1)\\cup(6,+\\infty)", "correct"),
    ("\\boxed{8+4i}", "8+4i", "correct"),
    ("\\boxed{\\frac{7}{5} + \\frac{1}{5}i}", "\\frac{7}{5} + \\frac{1}{5} i.", "correct"),
    ("\\boxed{2^{1009}}", "2^{1009}", "correct"),
    ("\\boxed{a=3, b=4}", "b=4, a=3", "correct"),
    ("\\boxed{3, 5}", "5, 3", "correct"),
    ("\\boxed{\\pi/3}", "\\frac{\\pi}{3}", "correct"),
    ("\\boxed{60^\\circ}", "\\frac{\\pi}{3}", "wrong"),
    ("\\boxed{2}", "3", "wrong"),
    ("\\boxed{0.333}", "\\frac{1}{3}", "wrong"),
    ("\\boxed{10.5}", "10", "wrong"),
    ("\\boxed{1/n!}", "\\pm 1/n!", "wrong"),
    ("\\boxed{(0, 1)}", "[0,1]", "wrong"),
    ("\\boxed{6}", "6, -2", "wrong"),
    ("\\boxed{x+1}", "x-1", "wrong"),
    ("\\boxed{\\sqrt{3}}", "3", "wrong"),
    ("#### 19", "18", "wrong"),
    ("\\boxed{-5}", "5", "wrong"),
    ("\\boxed{\\text{Monday}}", "\\text{Tuesday}", "wrong"),
    ("\\boxed{2\\pi}", "2", "wrong"),
    ("\\boxed{[1, 2]}", "(1, 2)", "wrong"),
    ("I do not know.", "5", "no_answer"),
    ("<think>it is \\boxed{5}</think>", "5", "no_answer"),
    ("", "5", "no_answer"),
    ("\\boxed{C}", "C", "correct"),
    ("The answer is (C).", "\\text{(C)}", "correct"),
    ("(B) looks tempting, but the answer is (D)", "D", "correct"),
    ("The answer is (B).", "C", "wrong"),
    ("\\boxed{42}", "C", "no_answer"),
]

POWER_TOWER = "\\boxed{9^{9^{9^{9^{9}}}}}"


@pytest.fixture(scope="module")
def equivalence_verdicts() -> list[Verdict]:
    # One batch for the whole table: the shared pool checks the cases two at a time.
    return check_answers(
        [c for c, _, _ in EQUIVALENCE_CASES], [g for _, g, _ in EQUIVALENCE_CASES], workers=2
    )


@pytest.mark.parametrize("case", range(len(EQUIVALENCE_CASES)))
def test_equivalence(case: int, equivalence_verdicts: list[Verdict]) -> None:
    completion, gold, expected = EQUIVALENCE_CASES[case]
    verdict = equivalence_verdicts[case]
    assert verdict.status == expected, (completion, gold, verdict)
    assert verdict.correct == (expected == "correct")


def test_equivalence_table_size() -> None:
    statuses = [expected for _, _, expected in EQUIVALENCE_CASES]
    assert len(EQUIVALENCE_CASES) >= 55
    assert statuses.count("correct") >= 30 and statuses.count("wrong") >= 12


def test_is_correct_returns_a_bool() -> None:
    assert is_correct("so \\boxed{\\frac{6}{4}}", "1.5") is True
    assert is_correct("so \\boxed{1.4}", "1.5") is False
    assert is_correct("nothing", "1.5") is False


def test_judge_in_process_and_how() -> None:
    # The pure decision, reporting which test decided.
    assert judge("#### 18", "18") == Verdict("correct", "18", "identical")
    assert judge("#### 18.0", "18") == Verdict("correct", "18.0", "numeric")
    assert judge("#### 17", "18") == Verdict("wrong", "17", "numeric")
    assert judge("\\boxed{\\frac{1}{2}}", "0.5").detail == "math-verify"
    assert judge("no answer", "18") == Verdict("no_answer", None, "no answer found")
    assert judge("\\boxed{B}", "C") == Verdict("wrong", "B", "choice")


# (completion, gold, expected status, extracted): arithmetic left unevaluated is not an answer
# when the gold is a number (groupwise mode only; math-verify evaluates it and accepts it).
UNEVALUATED_CASES = [
    ("The answer is 8 + 4 - 4.", "8", "wrong", "8 + 4 - 4"),
    ("The answer is \\boxed{8 + 4 - 4}.", "8", "wrong", "8 + 4 - 4"),
    ("so \\boxed{(3 + 1) \\times 2}", "8", "wrong", "(3 + 1) \\times 2"),
    ("The answer is 2 \\cdot 4", "8", "wrong", "2 \\cdot 4"),
    ("The answer is 12 \u2212 4", "8", "wrong", "12 \u2212 4"),
    # the value stated after the arithmetic is the answer
    ("The answer is 8 + 4 - 4, which is 8.", "8", "correct", "8"),
    ("So, the final answer is 8 + 4 - 4 which is 12.", "8", "wrong", "12"),
    ("8 + 4 - 4 = 12 - 4 = 8. So the answer is 8.", "8", "correct", "8"),
    # values, not arithmetic: a signed number, a fraction, a quotient read as a fraction
    ("The answer is \\boxed{-8}", "-8", "correct", "-8"),
    ("so \\boxed{\\frac{16}{2}}", "8", "correct", "\\frac{16}{2}"),
    ("so \\boxed{1/2}", "0.5", "correct", "1/2"),
    # a gold that is not a plain number: math-verify's equivalence as before
    ("so \\boxed{x + 1}", "1 + x", "correct", "x + 1"),
]


@pytest.mark.parametrize(("completion", "gold", "status", "extracted"), UNEVALUATED_CASES)
def test_arithmetic_left_unevaluated_is_not_an_answer(
    completion: str, gold: str, status: str, extracted: str
) -> None:
    verdict = judge(completion, gold)
    assert (verdict.status, verdict.extracted) == (status, extracted)
    assert ("unevaluated" in verdict.detail) == (status == "wrong" and extracted != "12")


@pytest.mark.parametrize("completion", [c for c, *_ in UNEVALUATED_CASES[:3]])
def test_math_verify_accepts_the_arithmetic_groupwise_refuses(completion: str) -> None:
    # the LENS paper's mode is math-verify itself: it evaluates the arithmetic
    assert judge(completion, "8", "math_verify").status == "correct"


def test_unparsed_answers_are_compared_as_text_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # math-verify reads no expression from a repeating decimal: the text comparison decides, and
    # the detail says which side was unparsed so that summarize counts it (a known limitation:
    # 0.\\overline{3} is 1/3, judged wrong here).
    assert answers_equivalent("\\frac{1}{3}", "0.\\overline{3}") == (
        False,
        "unparsed gold: compared as text",
    )
    assert answers_equivalent("0.\\overline{3}", "1/3") == (
        False,
        "unparsed answer: compared as text",
    )
    with caplog.at_level(logging.WARNING, logger="groupwise.rewards.pool"):
        verdicts = check_answers(
            ["\\boxed{0.\\overline{3}}", "\\boxed{Bob wins}", "\\boxed{0.\\overline{3}}"],
            ["1/3", "\\text{Bob wins}", "0.\\overline{3}"],
        )
    assert [v.status for v in verdicts] == ["wrong", "correct", "correct"]
    assert summarize(verdicts) == {
        "correct": 2,
        "wrong": 1,
        "no_answer": 0,
        "timeout": 0,
        "error": 0,
        "unparsed": 1,
    }
    # counted, not warned about: only timeouts and errors print a line
    assert "answer checking" not in caplog.text


def test_pathological_answers_return_within_seconds() -> None:
    huge = "9" * 5000
    completions = [
        f"\\boxed{{{huge}}}",  # 5,000 digits: a plain number, compared exactly
        f"\\boxed{{{huge}}}",
        POWER_TOWER,  # 9^9^9^9^9: sympy would evaluate it for ever
        "\\boxed{" + "(" * 300 + "1" + ")" * 300 + "}",  # 300 nested parentheses
    ]
    golds = [huge, "5", "5", "1"]
    with AnswerChecker(workers=2, timeout=2.0) as checker:
        checker.check(["#### 1"], ["1"])  # start the workers outside the timed part
        start = time.perf_counter()
        verdicts = checker.check(completions, golds)
        elapsed = time.perf_counter() - start
    # Two workers, each answer at most 2 s: about 4 s; the bound leaves room for a busy machine.
    assert elapsed < 12.0
    assert [v.status for v in verdicts[:2]] == ["correct", "wrong"]
    assert verdicts[2].status in ("timeout", "wrong")
    assert verdicts[3].status in ("timeout", "correct")


def test_timeouts_are_surfaced(caplog: pytest.LogCaptureFixture) -> None:
    with AnswerChecker(workers=1, timeout=1.0) as checker:
        with caplog.at_level(logging.WARNING, logger="groupwise.rewards.pool"):
            verdicts = checker.check([POWER_TOWER, "#### 4"], ["5", "4"])
        assert checker.restarts == 1
    assert verdicts[0].status == "timeout"
    assert verdicts[0].extracted == "9^{9^{9^{9^{9}}}}"
    assert "1 s" in verdicts[0].detail
    assert verdicts[1] == Verdict("correct", "4", "identical")  # the replacement worker ran it
    assert summarize(verdicts)["timeout"] == 1
    assert "1 timed out" in caplog.text


def test_check_answers_from_a_non_main_thread() -> None:
    results: list[object] = []

    def work() -> None:
        results.append(check_answers(["\\boxed{0.5}", "#### 7"], ["\\frac{1}{2}", "8"]))
        results.append(is_correct("x = \\boxed{3}", "3"))
        results.append(is_correct("we get $\\frac13$", "1/3", mode="math_verify"))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    verdicts, single, math_verify_mode = results
    assert [v.status for v in verdicts] == ["correct", "wrong"]
    assert single is True
    assert math_verify_mode is True


# (completion, gold, expected status) under mode "math_verify": math-verify's defaults on the
# whole completion, whatever our own rules would say.
MATH_VERIFY_CASES = [
    ("<think>it is \\boxed{3}</think> so it is 5", "3", "correct"),  # reasoning is read too
    ("<think>it is \\boxed{3}</think> so it is 5", "5", "wrong"),  # ...and its box comes first
    ("So the ratio is $\\frac13$.", "1/3", "correct"),
    ("\\boxed{\\sqrt{2}}", "\\sqrt{2}", "correct"),  # a bare gold is read boxed, not as "2"
    ("#### 1,000", "1000", "correct"),
    ("\\boxed{(3,2)}", "$(p,q)=(3,2)$", "correct"),
    ("\\boxed{1},\\boxed{2},\\boxed{3}", "$\\{1,2,3\\}$", "correct"),
    ("The answer is (C).", "C", "no_answer"),  # no multiple-choice rule
    ("<answer>18</answer> <confidence>0.9</confidence>", "18", "no_answer"),  # ">18<": no match
    ("I do not know.", "5", "no_answer"),
]


@pytest.fixture(scope="module")
def math_verify_verdicts() -> list[Verdict]:
    completions = [c for c, _, _ in MATH_VERIFY_CASES]
    return check_answers(completions, [g for _, g, _ in MATH_VERIFY_CASES], mode="math_verify")


@pytest.mark.parametrize("case", range(len(MATH_VERIFY_CASES)))
def test_math_verify_mode(case: int, math_verify_verdicts: list[Verdict]) -> None:
    completion, gold, expected = MATH_VERIFY_CASES[case]
    assert math_verify_verdicts[case].status == expected, (completion, gold)


def test_math_verify_mode_is_math_verify_itself(math_verify_verdicts: list[Verdict]) -> None:
    # The mode's verdict is exactly verify(parse(gold), parse(completion)) with the defaults.
    from math_verify import parse, verify

    for (completion, gold, _), verdict in zip(MATH_VERIFY_CASES, math_verify_verdicts, strict=True):
        gold_parsed = parse(gold if "$" in gold else f"\\boxed{{{gold}}}", parsing_timeout=None)
        answer_parsed = parse(completion, parsing_timeout=None)
        assert verdict.correct == verify(gold_parsed, answer_parsed, timeout_seconds=None)


# (completion, gold, expected status) under mode "amir_eval": the AMIR-GRPO evaluation grader's
# reading (an <answer>...</answer> block is required; the last box after the last <answer>, else
# all the text after it), our equivalence.
AMIR_EVAL_CASES = [
    (
        "<think> 9 * 2 </think> <answer> \\boxed{18} </answer> <confidence> 0.9 </confidence>",
        "18",
        "correct",
    ),
    ("<think> 9 * 2 </think> so \\boxed{18}", "18", "no_answer"),  # no answer block: graded 0
    ("<answer> 18", "18", "no_answer"),  # never closed
    ("<answer> 18 </answer>", "18", "correct"),
    ("<answer> 18 </answer> <confidence> 0.9 </confidence>", "18", "wrong"),  # all of it is read
    ("<answer> \\boxed {18} </answer>", "18", "no_answer"),  # only "\\boxed{" is unboxed
    ("<answer> \\boxed{7} </answer> <answer> \\boxed{8} </answer>", "8", "correct"),
    ("<answer> \\boxed{\\frac{1}{2}} </answer>", "0.5", "correct"),
    ("<answer> \\boxed{C} </answer>", "(C)", "correct"),
    ("<answer> \\boxed{(B)} </answer>", "C", "wrong"),
]


@pytest.mark.parametrize("case", range(len(AMIR_EVAL_CASES)))
def test_amir_eval_mode(case: int) -> None:
    completion, gold, expected = AMIR_EVAL_CASES[case]
    assert judge(completion, gold, "amir_eval").status == expected, (completion, gold)


def test_amir_eval_through_the_pool_with_a_timeout() -> None:
    completions = [f"<answer> {POWER_TOWER} </answer>", AMIR_EVAL_CASES[0][0], "no block"]
    with AnswerChecker(workers=1, timeout=1.0) as checker:
        verdicts = checker.check(completions, ["5", "18", "18"], mode="amir_eval")
    assert verdicts[0].status == "timeout"
    assert verdicts[0].extracted == "9^{9^{9^{9^{9}}}}"  # the official reading, in the parent
    assert [v.status for v in verdicts[1:]] == ["correct", "no_answer"]


def test_unknown_mode_is_named() -> None:
    with pytest.raises(ValueError, match=r"unknown checking mode 'verify'.*'amir_eval'"):
        check_answers(["#### 1"], ["1"], mode="verify")


def test_timeouts_in_the_math_verify_mode() -> None:
    with AnswerChecker(workers=1, timeout=1.0) as checker:
        verdicts = checker.check([POWER_TOWER, "#### 4"], ["5", "4"], mode="math_verify")
        assert checker.restarts == 1
    assert verdicts[0].status == "timeout" and verdicts[0].extracted is None
    assert verdicts[1].correct


def _check_in_child(queue: multiprocessing.Queue) -> None:
    queue.put([v.status for v in check_answers(["\\boxed{2}", "#### 3"], ["2", "4"])])


def test_check_answers_inside_a_daemon_worker_process() -> None:
    # A forked daemon child (as a data-loader worker) cannot start multiprocessing children;
    # the checker's subprocess workers work there, and the child starts its own pool.
    check_answers(["#### 1"], ["1"])  # the parent's pool exists before the fork
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_check_in_child, args=(queue,), daemon=True)
    child.start()
    statuses = queue.get(timeout=60)
    child.join(timeout=10)
    assert statuses == ["correct", "wrong"]


def test_pool_is_reused_and_survives_a_dead_worker() -> None:
    with AnswerChecker(workers=1) as checker:
        checker.check(["#### 1"], ["1"])
        pid = checker._pool[0].process.pid
        checker.check(["#### 2"], ["2"])
        assert checker._pool[0].process.pid == pid  # reused, not restarted
        checker._pool[0].process.kill()
        checker._pool[0].process.wait()
        verdicts = checker.check(["#### 3", "#### 4"], ["3", "4"])
        assert verdicts[0].status == "error" and "worker died" in verdicts[0].detail
        assert verdicts[1].correct
        assert checker.restarts == 1
        processes = [w.process for w in checker._pool]
    assert all(p.poll() is not None for p in processes)  # closed by the context manager


def test_close_then_check_starts_new_workers() -> None:
    checker = AnswerChecker(workers=1)
    assert checker.check(["#### 5"], ["5"])[0].correct
    checker.close()
    assert checker._pool == []
    assert checker.check(["#### 6"], ["5"])[0].status == "wrong"
    checker.close()


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="2 completions but 1 gold"):
        check_answers(["a", "b"], ["1"])
    with pytest.raises(ValueError, match="workers must be >= 1"):
        AnswerChecker(workers=0)
    with pytest.raises(ValueError, match="timeout must be > 0"):
        AnswerChecker(timeout=0)


def test_empty_batch() -> None:
    assert check_answers([], []) == []
