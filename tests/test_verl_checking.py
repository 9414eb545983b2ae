"""Answer checking beside verl (docs/guides/verl.md, "Answer checking beside verl"): verl brings
hydra-core and omegaconf, which pin antlr4-python3-runtime 4.9.3, and latex2sympy2_extended
1.11.0's parser for that runtime is older than its 4.13.2 one (groupwise.rewards.latex_parser).
Run in .venv-verl (scripts/setup_verl.sh), beside tests/test_checking.py there."""

from __future__ import annotations

from importlib.metadata import version

import pytest
import sympy

from groupwise.rewards.checking import UNPARSED, judge
from groupwise.rewards.latex_parser import antlr_runtime, repair_latex_parser

# Math-Verify's own cases (tests/test_all.py, test_numina_cases.py) that antlr4 4.9.3 turned from
# correct into "unparsed answer: compared as text" before the repair; all expected correct.
PERCENTAGES = [
    ("\\boxed{50\\%}", "50"),
    ("28 percent", "$28\\%$"),
    ("28 pct", "$28\\%$"),
    ("28 %", "$28\\%$"),
    ("$28$ %", "$28\\%$"),
    ("$28$ percent", "$28\\%$"),
    ("$\\boxed{28}$ pct", "$28\\%$"),
    ("$\\boxed{28 pct}", "$28\\%$"),
    ("$\\boxed{28 percent}", "$28\\%$"),
    ("$\\boxed{28 percentage}", "$28\\%$"),
    ("a total loss of $\\boxed{28\\%}$.", "28\\%"),
]


def test_this_environment_has_the_runtime_and_parser_the_repair_is_for() -> None:
    # hydra-core 1.3 / omegaconf 2.3 pin the runtime; the repair targets latex2sympy2_extended
    # 1.x's shipped antlr4_9_3 parser (generated before FUNC_GAMMA joined the rule `atom`)
    assert antlr_runtime() == "4.9.3"
    assert version("latex2sympy2_extended").startswith("1.")


def test_the_4_9_3_parser_gets_the_accessor_its_converter_calls() -> None:
    from latex2sympy2_extended import latex2sympy
    from latex2sympy2_extended.gen.antlr4_9_3.PSParser import PSParser

    # importing checking repaired it; a second call finds nothing to do
    assert PSParser.AtomContext.FUNC_GAMMA.__module__ == "groupwise.rewards.latex_parser"
    assert repair_latex_parser() is False
    assert sympy.nsimplify(latex2sympy("50\\%").doit()) == sympy.Rational(1, 2)


@pytest.mark.parametrize(("completion", "gold"), PERCENTAGES)
def test_percentages_are_checked_as_in_groupwise_own_environment(completion, gold) -> None:
    verdict = judge(completion, gold)
    assert verdict.correct, verdict
    assert not verdict.detail.startswith(UNPARSED), verdict


def test_what_the_old_grammar_still_lacks_is_a_bare_gamma() -> None:
    # Under 4.13.2 `\gamma` alone parses (EulerGamma); the 4.9.3 grammar has no such atom, so
    # an answer that is a bare gamma expression is compared as text here (docs/guides/verl.md).
    verdict = judge("\\boxed{2\\gamma}", "\\gamma \\cdot 2")
    assert verdict.status == "wrong" and verdict.detail.startswith(UNPARSED)
