"""Prompt templates (groupwise.data.prompts)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from groupwise.data import TEMPLATES, Problem, build_messages, load_benchmark, render_prompt
from groupwise.data.prompts import AMIR_GROUPWISE_SYSTEM_PROMPT, AMIR_SYSTEM_PROMPT, get_template

QUESTION = "What is 2 + 3?"
PROBLEM = Problem("toy/0", QUESTION, "5")
CHOICE = Problem("toy/1", "Which is prime?", "B", choices=["4", "5", "6"])

# A minimal jinja chat template: role tags, then the assistant turn when asked for.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="module")
def chat_tokenizer() -> PreTrainedTokenizerFast:
    vocabulary = models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(vocabulary))
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def test_template_names() -> None:
    assert set(TEMPLATES) == {"amir", "amir_groupwise", "boxed", "brief", "gsm8k", "plain"}


@pytest.mark.parametrize(
    ("name", "system", "box"),
    [
        ("amir", AMIR_SYSTEM_PROMPT, "\\boxed{{final answer here}}"),
        ("amir_groupwise", AMIR_GROUPWISE_SYSTEM_PROMPT, "\\boxed{final answer here}"),
    ],
)
def test_amir_system_prompt_asks_for_the_four_blocks_in_order(
    name: str, system: str, box: str
) -> None:
    messages = build_messages(PROBLEM, name)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == system
    assert messages[1]["content"] == QUESTION
    format_lines = re.split(r"format(?: that must be followed is)?:\n", system)[1].splitlines()
    assert [line.split(" ", 1)[0] for line in format_lines] == [
        "<think>",
        "<answer>",
        "<analysis>",
        "<confidence>",
    ]
    assert box in format_lines[1]
    assert "between 0 and 1" in format_lines[3]
    assert TEMPLATES[name].asks_confidence


def test_amir_prompt_is_the_official_text_to_the_letter() -> None:
    """`_CALIBRATED_TEMPLATE` of the official Data/data.py, never passed through .format():
    doubled braces, a blank before the newline of its first seven lines, a final newline."""
    lines = AMIR_SYSTEM_PROMPT.split("\n")
    assert len(lines) == 13 and lines[-1] == ""
    assert lines[0] == (
        "A conversation between User and Assistant. The user asks a question, and the "
        "Assistant solves it. "
    )
    assert all(line.endswith(". ") or line.endswith(", ") for line in lines[:7])
    assert lines[7] == "The final format that must be followed is:"
    assert lines[9] == "<answer> \\boxed{{final answer here}} </answer>"
    digest = hashlib.sha256(AMIR_SYSTEM_PROMPT.encode()).hexdigest()
    assert digest == "525d6770df74a610ce9b483b42c7cabf3a4e7197a230f7c6559c123aefd533fa"


def test_boxed_and_gsm8k_have_no_system_prompt() -> None:
    assert build_messages(PROBLEM, "boxed") == [
        {
            "role": "user",
            "content": QUESTION
            + "\n\nPlease reason step by step, and put your final answer within \\boxed{}.",
        }
    ]
    [gsm8k] = build_messages(PROBLEM, "gsm8k")
    assert gsm8k["content"].startswith(QUESTION + "\n\n")
    assert "'#### N'" in gsm8k["content"]


def test_brief_asks_for_a_short_solution_and_a_box() -> None:
    assert build_messages(PROBLEM, "brief") == [
        {
            "role": "user",
            "content": QUESTION
            + "\n\nCompute it in one or two short steps, then put your final answer within "
            "\\boxed{}.",
        }
    ]
    [user] = build_messages(CHOICE, "brief")
    assert user["content"].endswith(
        "C) 6\n\nCompute it in one or two short steps, then put the letter of the correct "
        "option within \\boxed{}."
    )


def test_render_with_a_chat_template(chat_tokenizer: PreTrainedTokenizerFast) -> None:
    assert render_prompt(PROBLEM, "amir", chat_tokenizer) == (
        f"<|system|>{AMIR_SYSTEM_PROMPT}\n<|user|>{QUESTION}\n<|assistant|>"
    )


def test_render_without_a_chat_template() -> None:
    assert render_prompt(PROBLEM, "amir", None) == f"{AMIR_SYSTEM_PROMPT}\n\n{QUESTION}\n\n"

    class NoTemplate:
        chat_template = None

    assert render_prompt(PROBLEM, "boxed", NoTemplate()) == (
        f"{QUESTION}\n\nPlease reason step by step, and put your final answer within "
        "\\boxed{}.\n\n"
    )


def test_plain_is_the_question_alone(chat_tokenizer: PreTrainedTokenizerFast) -> None:
    assert build_messages(PROBLEM, "plain") == [{"role": "user", "content": QUESTION}]
    assert render_prompt(PROBLEM, "plain", chat_tokenizer) == QUESTION
    assert render_prompt(PROBLEM, "plain") == QUESTION


def test_multiple_choice_lists_the_options() -> None:
    [user] = build_messages(CHOICE, "boxed")
    assert user["content"] == (
        "Which is prime?\n\nA) 4\nB) 5\nC) 6\n\n"
        "Please reason step by step, and put the letter of the correct option within \\boxed{}."
    )
    assert build_messages(CHOICE, "amir")[1]["content"].endswith(
        "C) 6\n\nAnswer with the letter of the correct option."
    )
    assert render_prompt(CHOICE, "plain") == "Which is prime?\n\nA) 4\nB) 5\nC) 6"


def test_aqua_prompt(data_dir: Path, chat_tokenizer: PreTrainedTokenizerFast) -> None:
    problem = load_benchmark("aqua", data_dir=data_dir)[2]
    prompt = render_prompt(problem, "boxed", chat_tokenizer)
    assert "A) 36\nB) 15\nC) 17\nD) 5\nE) 7" in prompt
    assert prompt.endswith("<|assistant|>")


def test_unknown_template() -> None:
    with pytest.raises(
        ValueError,
        match=r"unknown prompt template 'amri'; "
        r"valid templates: \['amir', 'amir_groupwise', 'boxed', 'brief', 'gsm8k', 'plain'\]",
    ):
        render_prompt(PROBLEM, "amri")
    with pytest.raises(ValueError, match="valid templates"):
        get_template("")
