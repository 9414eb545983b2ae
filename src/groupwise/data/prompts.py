"""Prompt templates: a `Problem` turned into chat messages or a prompt string.

Templates (`TEMPLATES`):

- "amir": the AMIR-GRPO calibrated format (docs/algorithms.md §2), the official system prompt
  to the letter (`AMIR_SYSTEM_PROMPT`: `\\boxed{{final answer here}}` with the doubled braces
  the official model sees). It asks for `<think> ... </think> <answer> \\boxed{...} </answer>
  <analysis> ... </analysis> <confidence> p </confidence>` with p in [0, 1]; the user message
  is the question.
- "amir_groupwise": the same format in groupwise's wording (`AMIR_GROUPWISE_SYSTEM_PROMPT`,
  single braces; a named deviation, the prompt of groupwise before 0.x kept under its name).
- "boxed": no system prompt; the question, then "Please reason step by step, and put your final
  answer within \\boxed{}." (the usual Qwen2.5-Math / LENS style).
- "brief": no system prompt; the question, then "Compute it in one or two short steps, then put
  your final answer within \\boxed{}." (ours: SmolLM2-135M's completions about half as long as
  under "boxed", docs/guides/train.md, "A real model: SmolLM2 on arithmetic").
- "gsm8k": no system prompt; the question, then a request to end with a line `#### N`.
- "plain": the question text alone, no chat template (the synthetic testbed's tiny model).

A multiple-choice problem (`choices` not None) lists its options as "A) ..." lines after the
question, and the chat templates ask for the letter of the correct option.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from groupwise.data.benchmarks import Problem

__all__ = [
    "TEMPLATES",
    "Template",
    "build_messages",
    "get_template",
    "render_prompt",
    "template_digest",
    "user_text",
]

_LETTERS = "ABCDEFGHIJ"


@dataclass(frozen=True)
class Template:
    """system: the system prompt, or None. instruction: appended to the user message after the
    question (and options). choice_instruction: appended for multiple-choice problems instead.
    chat: False means the prompt is the user text itself, never wrapped in a chat template.
    asks_confidence: the prompt asks for a verbalized `<confidence>`, so evaluations report its
    calibration (docs/guides/calibration.md)."""

    name: str
    system: str | None
    instruction: str | None
    choice_instruction: str | None
    chat: bool = True
    asks_confidence: bool = False


AMIR_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant "
    "solves it. \n"
    "The Assistant first thinks about the reasoning process in the mind, provides the user with "
    "the final answer, \n"
    "then analyzes its confidence about the solution and provides the user with its confidence "
    "level. \n"
    "The confidence level is a number between 0 and 1 (inclusive) enclosed within <confidence> "
    "</confidence> tags. \n"
    "The final answer is enclosed between <answer> </answer> tags. \n"
    "The analysis about confidence and uncertainty is enclosed within <analysis> </analysis> "
    "tags. \n"
    "The Assistant should reason about its confidence in the solution and its uncertainty in the "
    "solution within these tags. \n"
    "The final format that must be followed is:\n"
    "<think> reasoning process here </think>\n"
    "<answer> \\boxed{{final answer here}} </answer>\n"
    "<analysis> analysis about confidence and uncertainty here </analysis>\n"
    "<confidence> confidence level here (number between 0 and 1) </confidence>\n"
)
"""The AMIR-GRPO official system prompt, to the letter: `_CALIBRATED_TEMPLATE` of the official
`Data/data.py` as the official model sees it. That string is never passed through
`.format()`, so its `\\boxed{{final answer here}}` keeps both doubled braces; the trailing
blanks of its lines and its final newline are kept too."""

AMIR_GROUPWISE_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The User asks a question and the Assistant "
    "solves it. The Assistant first reasons about the problem, then gives the final answer, "
    "then analyzes how confident it is in its solution and states that confidence as a number "
    "between 0 and 1 (inclusive).\n"
    "The reasoning goes inside <think> </think> tags. The final answer goes inside "
    "<answer> </answer> tags, written within \\boxed{}. The analysis of confidence and "
    "uncertainty goes inside <analysis> </analysis> tags. The confidence level goes inside "
    "<confidence> </confidence> tags.\n"
    "The response must follow exactly this format:\n"
    "<think> reasoning process here </think>\n"
    "<answer> \\boxed{final answer here} </answer>\n"
    "<analysis> analysis of confidence and uncertainty here </analysis>\n"
    "<confidence> confidence level here (a number between 0 and 1) </confidence>"
)
"""groupwise's rewording of `AMIR_SYSTEM_PROMPT` (the `amir_groupwise` prompt, a named
deviation): the same four blocks in the same order, with single braces in `\\boxed{}`, the
box asked for in words, and no trailing blanks."""

_BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
_BOXED_CHOICE = (
    "Please reason step by step, and put the letter of the correct option within \\boxed{}."
)
_BRIEF_INSTRUCTION = (
    "Compute it in one or two short steps, then put your final answer within \\boxed{}."
)
_BRIEF_CHOICE = (
    "Compute it in one or two short steps, then put the letter of the correct option within "
    "\\boxed{}."
)

TEMPLATES: dict[str, Template] = {
    "amir": Template(
        "amir",
        AMIR_SYSTEM_PROMPT,
        None,
        "Answer with the letter of the correct option.",
        asks_confidence=True,
    ),
    "amir_groupwise": Template(
        "amir_groupwise",
        AMIR_GROUPWISE_SYSTEM_PROMPT,
        None,
        "Answer with the letter of the correct option.",
        asks_confidence=True,
    ),
    "boxed": Template("boxed", None, _BOXED_INSTRUCTION, _BOXED_CHOICE),
    "brief": Template("brief", None, _BRIEF_INSTRUCTION, _BRIEF_CHOICE),
    "gsm8k": Template(
        "gsm8k",
        None,
        "Solve the problem step by step. End your response with a line of the form "
        "'#### N', where N is the final answer as a number.",
        "Solve the problem step by step. End your response with a line of the form "
        "'#### X', where X is the letter of the correct option.",
    ),
    "plain": Template("plain", None, None, None, chat=False),
}


def template_digest(name: str) -> str:
    """sha256 (hex) of what template `name` shows the model: its system prompt, instructions
    and whether it is a chat; it changes when a template's text does, its name kept."""
    spec = get_template(name)
    text = json.dumps([spec.system, spec.instruction, spec.choice_instruction, spec.chat])
    return hashlib.sha256(text.encode()).hexdigest()


def get_template(name: str) -> Template:
    """The template `name`; unknown names raise naming the valid ones."""
    if name not in TEMPLATES:
        raise ValueError(f"unknown prompt template {name!r}; valid templates: {sorted(TEMPLATES)}")
    return TEMPLATES[name]


def user_text(problem: Problem, template: str) -> str:
    """The user message: question, options ("A) ..." lines) if any, then the instruction."""
    spec = get_template(template)
    parts = [problem.question.strip()]
    if problem.choices is not None:
        if len(problem.choices) > len(_LETTERS):
            raise ValueError(
                f"problem {problem.id}: {len(problem.choices)} options, at most {len(_LETTERS)}"
            )
        parts.append("\n".join(f"{_LETTERS[i]}) {c}" for i, c in enumerate(problem.choices)))
    instruction = spec.instruction if problem.choices is None else spec.choice_instruction
    if instruction:
        parts.append(instruction)
    return "\n\n".join(parts)


def build_messages(problem: Problem, template: str) -> list[dict[str, str]]:
    """Chat messages [{"role", "content"}]: the system prompt (if the template has one), then
    the user message."""
    spec = get_template(template)
    messages = [{"role": "system", "content": spec.system}] if spec.system else []
    messages.append({"role": "user", "content": user_text(problem, template)})
    return messages


def render_prompt(problem: Problem, template: str, tokenizer: Any = None) -> str:
    """The prompt string for `problem` under `template`.

    With a tokenizer that has a chat template: `apply_chat_template(messages, tokenize=False,
    add_generation_prompt=True)`. Without one (or tokenizer None): the message contents joined
    as "system\\n\\nuser\\n\\n". The "plain" template always gives the user text alone.
    """
    spec = get_template(template)
    if not spec.chat:
        return user_text(problem, template)
    messages = build_messages(problem, template)
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return "".join(f"{m['content']}\n\n" for m in messages)
