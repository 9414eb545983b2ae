"""An incorrect solution cut into numbered reasoning steps, the unit the judge points at
(docs/algorithms.md, "Analyses of AMIR-GRPO")."""

from __future__ import annotations

import re

_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)
_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.S)
_AFTER_REASONING = re.compile(r"</?(?:answer|analysis|confidence)>")
_BLANK_LINE = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def segment_steps(completion: str, min_steps: int = 3) -> list[str]:
    """Cut a completion into its numbered reasoning steps (the rule, in order):

    1. Reasoning text: the content of the first <think>...</think> block (to the end of the
       text if it is never closed); without <think>, the text before the first
       <answer>/<analysis>/<confidence> tag (all of it when there is none).
    2. Split the reasoning into paragraphs (blank lines). If that gives fewer than `min_steps`
       pieces, split into lines instead; if still fewer, split each line into sentences (after
       '.', '!' or '?' followed by white space). Empty pieces are dropped.
    3. When an <answer> block exists, its content is one last step, "Final answer: ...".
    The <analysis> and <confidence> blocks (self-assessment after the answer) are not steps.

    Returns the steps in order (step k is element k-1); empty for an empty completion.
    """
    think = _THINK.search(completion)
    if think:
        reasoning = think.group(1)
    else:
        tag = _AFTER_REASONING.search(completion)
        reasoning = completion[: tag.start()] if tag else completion
    steps: list[str] = []
    for splitter in (_BLANK_LINE.split, str.splitlines, _sentences):
        steps = [piece.strip() for piece in splitter(reasoning) if piece.strip()]
        if len(steps) >= min_steps:
            break
    answer = _ANSWER.search(completion)
    if answer and answer.group(1).strip():
        steps.append("Final answer: " + answer.group(1).strip())
    return steps


def _sentences(text: str) -> list[str]:
    return [s for line in text.splitlines() for s in _SENTENCE_END.split(line)]
