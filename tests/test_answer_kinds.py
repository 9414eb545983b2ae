"""Answer checking by kind of answer: the groupwise mode reads what math-verify reads
(unboxed LaTeX, relations, sets, several boxes, golds with delimiters, number formats) and keeps
our own rules where they know more. Hand-written (completion, gold, expected status) cases."""

from __future__ import annotations

import pytest

from groupwise.rewards import Verdict, check_answers

KINDS: dict[str, list[tuple[str, str, str]]] = {
    # Unboxed LaTeX is read as the expression it is, never as its last digit.
    "unboxed_latex": [
        ("So the ratio is $\\frac13$.", "1/3", "correct"),
        ("The value is \\frac{10}{9}", "10/9", "correct"),
        ("Hence the side is $\\sqrt3$", "\\sqrt{3}", "correct"),
        ("We get $\\dfrac{1}{3}$", "\\frac{1}{3}", "correct"),
        ("so it equals $\\left( \\frac{1}{3} \\right)$", "\\frac13", "correct"),
        ("The rope is $\\frac{1}{3} \\text{meters}$ long", "\\frac{1}{3}", "correct"),
        ("Therefore $k = \\frac{1}{3}$", "\\frac{1}{3}", "correct"),
        # read whole, "(9+1)" and not its last digit; arithmetic left unevaluated is no answer
        ("Answer \\( (9+1) \\)", "10", "wrong"),
        ("Answer \\( (9+1) = 10 \\)", "10", "correct"),
        ("\\[ \\frac{7}{2} \\]", "3.5", "correct"),
        ("We find $x = \\sqrt{2}$, so the area is $2\\sqrt{2}$", "2\\sqrt{2}", "correct"),
        ("Thus the sum is $\\frac{1}{3}$", "3", "wrong"),
        ("The answer is $\\sqrt{3}$", "3", "wrong"),
        ("So the side is $\\sqrt{5}$.", "5", "wrong"),
        ("$-[0,1)$", "1", "wrong"),
    ],
    # Relations, intervals, sets and matrices stated in prose.
    "relations_sets_matrices": [
        ("Therefore $x \\geq 5$ is the solution set.", "x >= 5", "correct"),
        ("So $5 \\leq x$.", "x \\geq 5", "correct"),
        ("We need $x < 3$.", "x < 3", "correct"),
        ("The solutions satisfy $x \\in [-2, 7]$.", "[-2, 7]", "correct"),
        ("Hence the range is $(1, +\\infty)$.", "(1, \\infty)", "correct"),
        ("the set is $\\{1,2,3\\}$", "\\{3, 2, 1\\}", "correct"),
        (
            "The product is $\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}$.",
            "\\left[\\begin{array}{cc} 1 & 2 \\\\ 3 & 4 \\end{array}\\right]",
            "correct",
        ),
        ("Therefore $x > 5$.", "x \\geq 5", "wrong"),
        ("So $x \\in (-2, 7]$.", "[-2, 7]", "wrong"),
        ("Hence the range is $(1, +\\infty)$.", "[1, \\infty)", "wrong"),
        ("the set is $\\{1,2\\}$", "\\{1, 2, 3\\}", "wrong"),
        (
            "The product is $\\begin{pmatrix} 1 & 2 \\\\ 3 & 5 \\end{pmatrix}$",
            "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
            "wrong",
        ),
    ],
    # Boxes that only a connector separates (or one display span holds) are one answer, a set.
    "several_boxes": [
        ("\\boxed{(1, 2)}, \\boxed{(2, 1)}", "(2,1),(1,2)", "correct"),
        ("The roots are \\boxed{1}, \\boxed{2} and \\boxed{3}.", "{1,2,3}", "correct"),
        ("$\\boxed{-2}$ and $\\boxed{5}$", "5, -2", "correct"),
        ("\\boxed{k = 45} \\quad \\text{and} \\quad \\boxed{n = 2}", "k = 45, n = 2", "correct"),
        (
            "$$\\boxed{(2, 2)} \\quad \\text{and} \\quad \\boxed{(6, 2)}$$",
            "(2, 2), (6, 2)",
            "correct",
        ),
        ("$$\\boxed{2} \\text{ for the first part, then } \\boxed{9}$$", "2, 9", "correct"),
        ("First \\boxed{3}. Then, adding the rest, the total is \\boxed{5}.", "5", "correct"),
        ("\\boxed{7}\n\n\\boxed{7}", "7", "correct"),
        ("\\boxed{1},\\boxed{2}", "{1,2,3}", "wrong"),
        ("\\boxed{(1, 2)}, \\boxed{(2, 1)}", "(1, 2)", "wrong"),
        ("First \\boxed{3}. Then the total is \\boxed{5}.", "3, 5", "wrong"),
    ],
    # Golds given as equations, with delimiters, or as \\text{}.
    "gold_forms": [
        ("\\boxed{(3,2)}", "$(p,q)=(3,2)$", "correct"),
        ("The pair is $(3, 2)$.", "(p, q) = (3, 2)", "correct"),
        ("$$(1, +\\infty)$$", "$$(1, +\\infty)$$", "correct"),
        ("\\boxed{odd}", "\\text{odd}", "correct"),
        ("\\boxed{\\frac{1}{\\sqrt{6}}}", "$\\frac{NO}{BO}=\\frac{1}{\\sqrt{6}}$", "correct"),
        ("\\boxed{21, 16, 11}", "$21,16$ or $11$", "correct"),
        ("\\boxed{x = 4}", "$x=4$", "correct"),
        ("\\boxed{5}", "\\[ 5 \\]", "correct"),
        ("\\boxed{2, 9}", "$\\boxed{2}, \\boxed{9}$", "correct"),
        ("\\boxed{\\frac{3}{2}}", "\\[ \\boxed{\\dfrac{3}{2}} \\]", "correct"),
        ("\\boxed{-9, 9}", "$x = 9$ or $x = -9$", "correct"),
        ("\\boxed{(2,3)}", "$(p,q)=(3,2)$", "wrong"),
        ("\\boxed{9}", "$x = 9$ or $x = -9$", "wrong"),
        ("\\boxed{even}", "\\text{odd}", "wrong"),
        ("\\boxed{21, 16}", "$21,16$ or $11$", "wrong"),
    ],
    # Thousands separators (commas, spaces) and decimal commas where the gold makes them plain.
    "number_formats": [
        ("The total is 1 000", "1000", "correct"),
        ("\\boxed{1 000}", "1000", "correct"),
        ("#### 7,425,000", "7425000", "correct"),
        ("The answer is 1,22", "1.22", "correct"),
        ("\\boxed{1,22}", "1.22", "correct"),
        ("\\boxed{0,111}", "0.111", "correct"),
        ("Soit 2,74 litres au total.", "2.74", "correct"),
        ("\\boxed{1,22}", "1, 22", "correct"),
        ("\\boxed{3,5}", "3.5", "correct"),
        ("\\boxed{1,000}", "1", "wrong"),
        ("The answer is 1 000", "1", "wrong"),
        ("The answer is 12,5", "125", "wrong"),
        ("\\boxed{3, 5}", "3.5", "wrong"),
    ],
    # Our rules where they know more than math-verify: the answer block, reasoning, `#### N`,
    # "the answer is", option letters, the Minerva "Final Answer" line, the last number.
    "our_rules": [
        ("<think>maybe $\\frac{1}{2}$</think><answer>7</answer>", "7", "correct"),
        ("<answer>$\\frac{1}{3}$</answer> <confidence>0.9</confidence>", "1/3", "correct"),
        ("<answer> The largest $n$ is 34 </answer>", "34", "correct"),
        ("Work: 3 + 4 = 7.\n#### 7", "7", "correct"),
        ("The answer is 18 dollars.", "18", "correct"),
        ("Final Answer: The largest $n$ is 34.", "34", "correct"),
        ("The answer is (C).", "C", "correct"),
        ("She has 5 apples and then 7 apples.", "7", "correct"),
        ("Final Answer: The final answer is $\\frac{3}{4}$. I hope so.", "0.75", "correct"),
        ("So \\boxed{12}.\nFinal Answer: The final answer is $15$. I hope so.", "15", "correct"),
        ("<think>it is \\boxed{5}</think> no idea", "5", "no_answer"),
        ("<answer> \\boxed{12 ", "12", "no_answer"),
        ("The answer is (B).", "C", "wrong"),
    ],
}

CASES = [(kind, *case) for kind, cases in KINDS.items() for case in cases]


@pytest.fixture(scope="module")
def kind_verdicts() -> list[Verdict]:
    return check_answers([c for _, c, _, _ in CASES], [g for _, _, g, _ in CASES], workers=2)


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{c[0]}{i}" for i, c in enumerate(CASES)])
def test_answer_kind(case: int, kind_verdicts: list[Verdict]) -> None:
    kind, completion, gold, expected = CASES[case]
    verdict = kind_verdicts[case]
    assert verdict.status == expected, (kind, completion, gold, verdict)


def test_every_kind_has_right_and_wrong_cases() -> None:
    for kind, cases in KINDS.items():
        statuses = [expected for _, _, expected in cases]
        assert statuses.count("correct") >= 5 and statuses.count("wrong") >= 1, kind
