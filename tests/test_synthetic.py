"""The synthetic "arith" task: determinism, disjoint splits, correct worked solutions, levels."""

from __future__ import annotations

import re

import pytest

from groupwise.data import Problem, load_benchmark
from groupwise.data.synthetic import (
    LEVELS,
    Step,
    generate_problems,
    render_question,
    split_of,
    worked_solution,
)
from groupwise.rewards import extract_answer

CLAUSE = re.compile(r"(add|subtract|multiply by) (\d+)")
LINE = re.compile(r"(\d+)([+\-*])(\d+)=(\d+)")
WORD_OF = {"add": "+", "subtract": "-", "multiply by": "*"}


def parse_question(question: str) -> tuple[int, list[Step]]:
    match = re.fullmatch(r"Start with (\d+), (.*)\. What is the result\?", question)
    assert match, question
    clauses = match.group(2).split(", ")
    steps = []
    for clause in clauses:
        parsed = CLAUSE.fullmatch(clause)
        assert parsed, clause
        steps.append(Step(WORD_OF[parsed.group(1)], int(parsed.group(2))))
    return int(match.group(1)), steps


def test_hand_computed_example() -> None:
    steps = [Step("+", 5), Step("-", 3), Step("*", 2)]
    assert render_question(7, steps) == (
        "Start with 7, add 5, subtract 3, multiply by 2. What is the result?"
    )
    # 7+5 = 12, 12-3 = 9, 9*2 = 18
    assert worked_solution(7, steps) == ("7+5=12\n12-3=9\n9*2=18\n#### 18", 18)


def test_expression_form_by_hand() -> None:
    steps = [Step("+", 5), Step("-", 3), Step("*", 2), Step("+", 4)]
    # Left to right: (7 + 5 - 3) * 2 + 4 = 22, the worked solution's value.
    assert render_question(7, steps, "expression") == "What is (7 + 5 - 3) * 2 + 4?"
    assert worked_solution(7, steps)[1] == 22
    assert render_question(3, [Step("*", 4), Step("-", 2)], "expression") == "What is 3 * 4 - 2?"
    assert render_question(3, [Step("-", 1), Step("+", 2)], "expression") == "What is 3 - 1 + 2?"


@pytest.mark.parametrize("level", sorted(LEVELS))
def test_expression_form_evaluates_to_the_answer(level: str) -> None:
    """Python's own precedence on the written expression gives the gold answer: the brackets make
    the left-to-right chain and the usual reading agree."""
    problems = generate_problems("test", level=level, size=200, form="expression")
    for problem in problems:
        expression = problem.question.removeprefix("What is ").removesuffix("?")
        assert eval(expression) == int(problem.answer), problem.question  # digits and +-*() only
        assert problem.meta["form"] == "expression" and "-expression-" in problem.id
        assert split_of(problem.question) == "test"
    words = generate_problems("test", level=level, size=5)
    assert words[0].id.startswith(f"arith-{level}-o") and "-expression" not in words[0].id


def test_registered_and_deterministic_from_seed() -> None:
    first = load_benchmark("arith", split="test", level="mid", size=50, seed=3)
    again = load_benchmark("arith", split="test", level="mid", size=50, seed=3)
    other = load_benchmark("arith", split="test", level="mid", size=50, seed=4)
    assert first == again
    assert all(isinstance(p, Problem) for p in first)
    assert [p.question for p in first] != [p.question for p in other]
    # A larger size extends the same stream: the first problems do not change.
    assert load_benchmark("arith", split="test", level="mid", size=80, seed=3)[:50] == first
    # Pinned text: the stream must not change across machines or Python versions
    # (random.Random seeded with a string, no hash randomisation involved).
    pinned = generate_problems("test", level="easy", size=1, seed=0)[0]
    assert (pinned.question, pinned.answer) == (PINNED_EASY_QUESTION, PINNED_EASY_ANSWER)
    assert load_benchmark("arith")[0].id.startswith("arith-mid-")  # default split and level


PINNED_EASY_QUESTION = "Start with 8, subtract 1, add 8, subtract 6. What is the result?"
PINNED_EASY_ANSWER = "9"


@pytest.mark.parametrize("level", sorted(LEVELS))
def test_train_and_test_never_share_a_question(level: str) -> None:
    train = {
        p.question
        for seed in (0, 1)
        for p in generate_problems("train", level=level, size=2000, seed=seed)
    }
    test = {
        p.question
        for seed in (0, 1)
        for p in generate_problems("test", level=level, size=500, seed=seed)
    }
    assert not train & test
    assert {split_of(q) for q in train} == {"train"}
    assert {split_of(q) for q in test} == {"test"}


@pytest.mark.parametrize("split", ["train", "test"])
def test_no_duplicates_within_a_split(split: str) -> None:
    problems = generate_problems(split, level="easy", size=1000, seed=0)
    assert len({p.question for p in problems}) == len(problems)
    assert len({p.id for p in problems}) == len(problems)


@pytest.mark.parametrize("level", sorted(LEVELS))
def test_worked_solutions_are_correct_and_follow_the_level(level: str) -> None:
    spec = LEVELS[level]
    low = 1 if spec.digits == 1 else 10 ** (spec.digits - 1)
    high = 10**spec.digits - 1
    for problem in generate_problems("test", level=level, size=300, seed=7):
        start, steps = parse_question(problem.question)
        assert len(steps) == spec.ops
        assert low <= start <= high
        multiplications = [s for s in steps if s.operator == "*"]
        assert len(multiplications) <= spec.max_multiplications
        assert all(2 <= s.operand <= 9 for s in multiplications)
        assert all(low <= s.operand <= high for s in steps if s.operator != "*")
        assert {s.operator for s in steps} <= set(spec.operators)

        *lines, final = problem.meta["solution"].split("\n")
        assert len(lines) == spec.ops
        value = start
        for line, step in zip(lines, steps, strict=True):
            parsed = LINE.fullmatch(line)
            assert parsed, line
            left, operator, operand, result = parsed.groups()
            assert (int(left), operator, int(operand)) == (value, step.operator, step.operand)
            recomputed = eval(f"{left}{operator}{operand}")  # digits and one operator only
            assert int(result) == recomputed >= 0
            value = recomputed
        assert final == f"#### {value}"
        assert problem.answer == str(value)
        assert problem.meta["level"] == level
        assert (problem.meta["ops"], problem.meta["digits"]) == (spec.ops, spec.digits)


def test_levels_as_documented() -> None:
    easy, mid, long, hard = (LEVELS[name] for name in ("easy", "mid", "long", "hard"))
    assert (easy.ops, easy.digits, easy.operators, easy.max_multiplications) == (3, 1, "+-", 0)
    assert (mid.ops, mid.digits, mid.operators, mid.max_multiplications) == (5, 1, "+-", 0)
    assert (long.ops, long.digits, long.operators, long.max_multiplications) == (6, 1, "+-", 0)
    assert (hard.ops, hard.digits, hard.operators, hard.max_multiplications) == (6, 1, "+-*", 1)
    # hard really holds multiplications: most 6-step chains draw at least one
    hard_problems = generate_problems("test", level="hard", size=100, seed=0)
    assert sum("*" in p.meta["solution"] for p in hard_problems) > 50


def test_ops_and_digits_options_override_the_level() -> None:
    for problem in generate_problems("train", level="mid", size=100, seed=0, ops=5, digits=3):
        start, steps = parse_question(problem.question)
        assert len(steps) == 5
        assert 100 <= start <= 999
        assert all(100 <= s.operand <= 999 for s in steps if s.operator != "*")
        assert (problem.meta["ops"], problem.meta["digits"]) == (5, 3)


def test_the_answer_checker_extracts_the_answer() -> None:
    for level in LEVELS:
        for problem in generate_problems("test", level=level, size=100, seed=0):
            assert extract_answer(problem.meta["solution"]) == problem.answer
            assert extract_answer("\n" + problem.meta["solution"]) == problem.answer


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"level": "medium"}, "valid levels: ['easy', 'hard', 'long', 'mid']"),
        ({"size": 0}, "size must be an integer >= 1"),
        ({"ops": 0}, "ops must be an integer >= 1"),
        ({"digits": 12}, "digits must be an integer in 1..9"),
        # ops=1, digits=1: 9 starts x (9 additions + up to 9 subtractions) < 200 questions.
        ({"ops": 1, "digits": 1, "size": 200}, "found only"),
        ({"form": "latex"}, "valid forms: ['words', 'expression']"),
    ],
)
def test_bad_options_raise_clear_errors(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        load_benchmark("arith", split="test", **options)


def test_unknown_split_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=re.escape("valid splits: ['train', 'test']")):
        load_benchmark("arith", split="validation")
    with pytest.raises(ValueError, match=re.escape("valid splits: ['train', 'test']")):
        generate_problems("validation")
