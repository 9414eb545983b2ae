"""Where and how incorrect solutions go wrong (docs/algorithms.md, "Analyses of AMIR-GRPO"; paper
Figures 5-6): `groupwise analyze errors`.

Each incorrect completion is cut into numbered steps (segmentation), a judge names the first
erroneous step k and an error type from a taxonomy (YAML, default `error_taxonomy.yaml`), and
the relative error position is k / (number of steps). Per run: the histogram of error types
and a Gaussian-KDE density of the relative positions.

Modules, one job each: taxonomy (the error types), segmentation (the steps), protocol (the
question asked and the reply read), judges (an OpenAI-compatible endpoint or a local model,
and asking until the answer is usable), cache (judgements.jsonl, so a rerun resumes), judging
(the solutions to judge, all of them judged), figures (the numbers per run and their
figures), command (the command line).
"""

from __future__ import annotations

from groupwise.analysis.error_position.cache import JudgeCache
from groupwise.analysis.error_position.figures import ERROR_FIGURES, plot_errors, summarize_run
from groupwise.analysis.error_position.judges import (
    Judge,
    JudgeOutcome,
    JudgeTransportError,
    LocalModelJudge,
    OpenAIChatJudge,
    judge_solution,
)
from groupwise.analysis.error_position.judging import ErrorItem, judge_items, select_items
from groupwise.analysis.error_position.protocol import (
    JudgeAnswerError,
    Judgement,
    judge_messages,
    parse_judgement,
)
from groupwise.analysis.error_position.segmentation import segment_steps
from groupwise.analysis.error_position.taxonomy import DEFAULT_TAXONOMY, ErrorType, load_taxonomy

__all__ = [
    "DEFAULT_TAXONOMY",
    "ERROR_FIGURES",
    "ErrorItem",
    "ErrorType",
    "Judge",
    "JudgeAnswerError",
    "JudgeCache",
    "JudgeOutcome",
    "JudgeTransportError",
    "Judgement",
    "LocalModelJudge",
    "OpenAIChatJudge",
    "judge_items",
    "judge_messages",
    "judge_solution",
    "load_taxonomy",
    "parse_judgement",
    "plot_errors",
    "segment_steps",
    "select_items",
    "summarize_run",
]
