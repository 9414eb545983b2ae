"""Math-Verify's LaTeX parser under the antlr4 runtime that is installed (docs/guides/verl.md,
"Answer checking beside verl").

latex2sympy2_extended (the LaTeX parser of math-verify) ships its grammar's parser generated for
three antlr4 runtimes (4.9.3, 4.11, 4.13.2) and imports the one of the installed runtime. In
latex2sympy2_extended 1.11.0 the 4.9.3 one was generated from an older grammar: its rule `atom`
lacks the alternative FUNC_GAMMA (a bare `\\gamma`), so its `AtomContext` has no `FUNC_GAMMA`
accessor, while the converter (`_Latex2Sympy.convert_atom`) asks every atom for it before
PERCENT_NUMBER. Under 4.9.3, the runtime that hydra-core and omegaconf pin (so in every verl
environment), each percentage (`50\\%`, `28 pct`, `$28$ %`) then raises AttributeError inside
math-verify, which swallows it: the answer is read as no expression and compared as text, and a
correct answer is judged wrong.

`repair_latex_parser` adds the accessor as the generator writes it for the newer grammars
(`getToken(PSParser.FUNC_GAMMA, 0)`: under the old grammar no atom holds that token, so it is
None and the converter goes on to PERCENT_NUMBER, as under 4.13.2). What stays different under
4.9.3 is only the old grammar itself: a bare `\\gamma` atom does not parse.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def antlr_runtime() -> str | None:
    """The installed antlr4-python3-runtime's version, or None when it is not installed."""
    try:
        return version("antlr4-python3-runtime")
    except PackageNotFoundError:
        return None


def repair_latex_parser() -> bool:
    """Give latex2sympy2_extended's antlr4 4.9.3 parser the `AtomContext.FUNC_GAMMA` accessor its
    converter calls, when that runtime is installed and the accessor is missing (module
    docstring). Returns whether it added it. Imports nothing under any other runtime."""
    if not (antlr_runtime() or "").startswith("4.9.3"):
        return False
    from latex2sympy2_extended.gen.antlr4_9_3.PSParser import PSParser

    atom = PSParser.AtomContext
    if hasattr(atom, "FUNC_GAMMA"):
        return False

    def func_gamma(self: PSParser.AtomContext) -> object:
        return self.getToken(PSParser.FUNC_GAMMA, 0)

    atom.FUNC_GAMMA = func_gamma
    return True
