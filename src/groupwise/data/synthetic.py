"""Synthetic verifiable arithmetic tasks: the learning testbed's benchmark "arith".

A problem is a chain of integer operations applied left to right to a start value::

    question: "Start with 47, add 38, multiply by 6, subtract 72. What is the result?"
    solution: "47+38=85\\n85*6=510\\n510-72=438\\n#### 438"
    answer:   "438"

The worked solution has one line per operation and ends with ``#### N``, the GSM8K form that
``groupwise.rewards.extract_answer`` reads. Every value stays a non-negative integer:
a subtraction never takes more than the current value (when the current value is below the
smallest operand of the level, the step becomes an addition instead).

Difficulty levels (``level=``); ``ops=`` and ``digits=`` override the level's numbers:

    =====  ===  ======  ==========  ====================================================
    level  ops  digits  operations  values
    =====  ===  ======  ==========  ====================================================
    easy   3    1       + -         start and operands 1..9; results up to 36
    mid    5    1       + -         start and operands 1..9; results up to 54
    long   6    1       + -         as mid, one operation more; results up to 63
    hard   6    1       + - *       as long, plus at most one multiplication by 2..9
    =====  ===  ======  ==========  ====================================================

``ops`` is the number of operations and ``digits`` the digit count of the start value and of
the addition/subtraction operands (``digits=2``: 10..99); a multiplier is always one digit,
2..9. ``form`` is how the question is written: "words" (the default, above) or "expression",
the same chain as one expression computed left to right ("What is 7 + 5 - 3?", with brackets
where a multiplication follows: "What is (7 + 5) * 3?"), the form a chat model reads best.

The levels are sized for the testbed's tiny character-level policy (``groupwise.sft``):
a chain of one-digit steps is what it can learn in minutes on a CPU, each extra operation is
one more chance to slip, and multiplication is a skill it barely learns, so accuracy falls
from easy to hard (the default base policy: pass@1 about 70, 22, 10 and 6 %). ``long`` is
the regime of LENS: most groups of 8 samples are all-wrong at the start, yet GRPO still lifts
pass@1 (``hard`` barely moves: its multiplications are out of the policy's reach). Question
spaces: easy about 30,000 questions, mid, long and hard millions.

Splits: the question space is partitioned by a stable hash of the question text (20 % test,
80 % train), so the train and test splits never share a question whatever their seeds and
sizes. Inside one split the problems are deduplicated. The same (split, level, ops, digits,
seed, size) gives the same problems on every machine and Python version (``random.Random``
seeded with a string).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from groupwise.data.benchmarks import Problem, register_benchmark

SPLITS = ("train", "test")
FORMS = ("words", "expression")
TEST_PERCENT = 20
MAX_MISSES = 20_000
_MULTIPLIERS = (2, 9)
_OP_WORDS = {"+": "add", "-": "subtract", "*": "multiply by"}


@dataclass(frozen=True)
class LevelSpec:
    """Difficulty knobs of one level: number of operations, operand digits, allowed operators,
    and the most multiplications one problem may hold."""

    ops: int
    digits: int
    operators: str
    max_multiplications: int


LEVELS: dict[str, LevelSpec] = {
    "easy": LevelSpec(ops=3, digits=1, operators="+-", max_multiplications=0),
    "mid": LevelSpec(ops=5, digits=1, operators="+-", max_multiplications=0),
    "long": LevelSpec(ops=6, digits=1, operators="+-", max_multiplications=0),
    "hard": LevelSpec(ops=6, digits=1, operators="+-*", max_multiplications=1),
}


@dataclass(frozen=True)
class Step:
    """One operation of a chain: ``operator`` in "+-*" and its operand."""

    operator: str
    operand: int


def apply_step(value: int, step: Step) -> int:
    """The value after applying ``step`` to ``value``."""
    if step.operator == "+":
        return value + step.operand
    if step.operator == "-":
        return value - step.operand
    if step.operator == "*":
        return value * step.operand
    raise ValueError(f"unknown operator {step.operator!r}; valid: + - *")


def render_question(start: int, steps: list[Step], form: str = "words") -> str:
    """The question text: form "words", e.g. "Start with 7, add 5, subtract 3. What is the
    result?"; form "expression", e.g. "What is 7 + 5 - 3?" (the chain computed left to right:
    what precedes a multiplication is bracketed when it holds a + or -)."""
    if form == "words":
        clauses = [f"Start with {start}"]
        clauses += [f"{_OP_WORDS[s.operator]} {s.operand}" for s in steps]
        return ", ".join(clauses) + ". What is the result?"
    if form != "expression":
        raise ValueError(f"arith: unknown form {form!r}; valid forms: {list(FORMS)}")
    expression = str(start)
    for step in steps:
        if step.operator == "*" and any(op in expression for op in "+-"):
            expression = f"({expression})"
        expression += f" {step.operator} {step.operand}"
    return f"What is {expression}?"


def worked_solution(start: int, steps: list[Step]) -> tuple[str, int]:
    """The step-by-step computation ending in ``#### N`` and the final value N."""
    lines = []
    value = start
    for step in steps:
        new_value = apply_step(value, step)
        lines.append(f"{value}{step.operator}{step.operand}={new_value}")
        value = new_value
    lines.append(f"#### {value}")
    return "\n".join(lines), value


def split_of(question: str) -> str:
    """The split a question belongs to: a stable hash of its text puts TEST_PERCENT % in "test"."""
    digest = hashlib.sha256(question.encode("utf-8")).digest()
    return "test" if int.from_bytes(digest[:8], "big") % 100 < TEST_PERCENT else "train"


def resolve_level(level: str, ops: int | None = None, digits: int | None = None) -> LevelSpec:
    """The LevelSpec of ``level`` with ``ops``/``digits`` overrides applied and checked."""
    if level not in LEVELS:
        raise ValueError(f"arith: unknown level {level!r}; valid levels: {sorted(LEVELS)}")
    spec = LEVELS[level]
    ops = spec.ops if ops is None else ops
    digits = spec.digits if digits is None else digits
    if not isinstance(ops, int) or ops < 1:
        raise ValueError(f"arith: ops must be an integer >= 1, got {ops!r}")
    if not isinstance(digits, int) or not 1 <= digits <= 9:
        raise ValueError(f"arith: digits must be an integer in 1..9, got {digits!r}")
    return LevelSpec(ops, digits, spec.operators, spec.max_multiplications)


def _draw_chain(rng: random.Random, spec: LevelSpec) -> tuple[int, list[Step]]:
    low = 1 if spec.digits == 1 else 10 ** (spec.digits - 1)
    high = 10**spec.digits - 1
    value = rng.randint(low, high)
    start = value
    steps: list[Step] = []
    multiplications = 0
    for _ in range(spec.ops):
        allowed = [
            op for op in spec.operators if op != "*" or multiplications < spec.max_multiplications
        ]
        operator = rng.choice(allowed)
        if operator == "-" and value < low:
            operator = "+"
        if operator == "*":
            step = Step("*", rng.randint(*_MULTIPLIERS))
            multiplications += 1
        elif operator == "-":
            step = Step("-", rng.randint(low, min(high, value)))
        else:
            step = Step("+", rng.randint(low, high))
        steps.append(step)
        value = apply_step(value, step)
    return start, steps


def generate_problems(
    split: str = "test",
    *,
    level: str = "mid",
    size: int = 500,
    seed: int = 0,
    ops: int | None = None,
    digits: int | None = None,
    form: str = "words",
) -> list[Problem]:
    """``size`` distinct arithmetic problems of ``split`` at ``level``, deterministic in ``seed``,
    their questions written in ``form`` (module docstring).

    Each ``Problem`` has ``answer`` the final integer as a string and ``meta`` with "level",
    "solution" (the worked solution), "ops", "digits", "split", "seed". Raises ValueError when
    the split of this level holds fewer than ``size`` distinct questions.
    """
    if split not in SPLITS:
        raise ValueError(f"arith: unknown split {split!r}; valid splits: {list(SPLITS)}")
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"arith: size must be an integer >= 1, got {size!r}")
    spec = resolve_level(level, ops, digits)
    if form not in FORMS:
        raise ValueError(f"arith: unknown form {form!r}; valid forms: {list(FORMS)}")
    rng = random.Random(f"arith|{split}|{level}|{spec.ops}|{spec.digits}|{seed}")
    # The default form keeps the ids problems had before forms existed.
    tag = "" if form == "words" else f"-{form}"
    problems: list[Problem] = []
    seen: set[str] = set()
    misses = 0
    # Rejection sampling. A small question space (few ops and digits) runs dry: after
    # MAX_MISSES draws in a row without a new question of this split, report it.
    while len(problems) < size and misses < MAX_MISSES:
        start, steps = _draw_chain(rng, spec)
        question = render_question(start, steps, form)
        if question in seen or split_of(question) != split:
            misses += 1
            continue
        misses = 0
        seen.add(question)
        solution, answer = worked_solution(start, steps)
        problems.append(
            Problem(
                id=f"arith-{level}-o{spec.ops}d{spec.digits}{tag}-{split}-s{seed}-{len(problems):05d}",
                question=question,
                answer=str(answer),
                meta={
                    "level": level,
                    "solution": solution,
                    "ops": spec.ops,
                    "digits": spec.digits,
                    "form": form,
                    "split": split,
                    "seed": seed,
                },
            )
        )
    if len(problems) < size:
        raise ValueError(
            f"arith: found only {len(problems)} distinct {split} questions at level {level!r} "
            f"(ops={spec.ops}, digits={spec.digits}) for size={size}; ask for fewer or raise "
            f"ops/digits"
        )
    return problems


@register_benchmark("arith", splits=SPLITS)
def load_arith(
    split: str = "test",
    data_dir: object = None,
    *,
    level: str = "mid",
    size: int = 500,
    seed: int = 0,
    ops: int | None = None,
    digits: int | None = None,
    form: str = "words",
) -> list[Problem]:
    """Loader of the "arith" benchmark; needs no files (``data_dir`` is ignored)."""
    del data_dir
    return generate_problems(
        split, level=level, size=size, seed=seed, ops=ops, digits=digits, form=form
    )
