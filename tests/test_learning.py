"""The trainer learns: GRPO on the easy `arith` level raises the held-out accuracy of the tiny SFT
base policy (groupwise.sft) by a clear margin, with fixed seeds, on a CPU in under 2 minutes.

Accuracy is pass@1 at temperature 1.0 (the mean correctness of SAMPLES_PER_PROBLEM samples) on
the first HELD_OUT `arith` test problems of the easy level, which share no question with the
train split the policy is trained on. Before and after are measured on the same problems with
the same sampling seed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from groupwise.data import load_benchmark
from groupwise.models import load_model, register_model_alias
from groupwise.rewards import check_answers
from groupwise.rollout import SamplingParams, TransformersGenerator
from groupwise.sft import SFTSettings, load_base_policy
from groupwise.train.config import load_config
from groupwise.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "testbed_arith.yaml"

# The base policy, spelled out so that the test does not move when presets are retuned: the
# quick preset's model (2 layers, hidden 64) trained longer than the preset, until its samples
# at temperature 1 are right about 3 times in 4 while its greedy answers are right about 9 in
# 10. RL lifts such a policy quickly, by making it surer of what it already gets right; a base
# whose greedy answers are wrong as often as its samples barely moves in a CPU-sized budget
# (bench/results/learning.md).
BASE = SFTSettings(
    levels=("easy",),
    examples=2000,
    steps=600,
    lr=5e-3,
    warmup_steps=30,
    batch_size=32,
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    intermediate_size=192,
    seed=0,
)
BASE_ALIAS = "arith-base-learning-test"
HELD_OUT = 200
SAMPLES_PER_PROBLEM = 8
RL_OVERRIDES = [
    f"model.name={BASE_ALIAS}",
    "data.options.level=easy",
    "rollout.questions_per_step=16",
    "rollout.group_size=8",
    "rollout.batch_size=128",
    "train.micro_batch_size=128",
    "rollout.max_new_tokens=64",
    "optim.lr=1e-4",
    "train.max_steps=120",
    "train.seed=0",
    "train.progress=false",
]
MARGIN = 0.03


@pytest.fixture()
def one_thread() -> Iterator[None]:
    # The policy is tiny: one thread per process is fastest, and far faster than two threads
    # when other processes share the two cores.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def base_alias() -> str:
    """BASE_ALIAS registered; the policy is trained on first use and cached (groupwise.sft)."""
    register_model_alias(BASE_ALIAS, lambda *, dtype, seed: load_base_policy(settings=BASE))
    return BASE_ALIAS


def held_out_accuracy(model: torch.nn.Module, tokenizer, problems: list) -> float:
    """Mean correctness of SAMPLES_PER_PROBLEM samples per problem at temperature 1.0."""
    generator = TransformersGenerator(model, tokenizer, batch_size=512)
    rollouts = generator.generate(
        [p.question for p in problems],
        SAMPLES_PER_PROBLEM,
        SamplingParams(temperature=1.0, max_new_tokens=64, seed=1234),
    )
    golds = [p.answer for p in problems for _ in range(SAMPLES_PER_PROBLEM)]
    verdicts = check_answers(rollouts.texts, golds)
    return sum(v.correct for v in verdicts) / len(verdicts)


def test_grpo_on_easy_raises_held_out_accuracy(
    tmp_path: Path, base_alias: str, one_thread: None
) -> None:
    problems = load_benchmark("arith", split="test", level="easy", size=HELD_OUT)
    model, tokenizer = load_model(base_alias)
    before = held_out_accuracy(model, tokenizer, problems)

    trainer = Trainer(load_config(CONFIG, [*RL_OVERRIDES, f"train.output_dir={tmp_path}"]))
    trainer.train()
    after = held_out_accuracy(trainer.model, trainer.tokenizer, problems)

    # Measured (torch 2.13, CPU): before 0.746, after 0.796 (+5.0 points) with train.seed 0;
    # train.seeds 1, 2, 3 gave +5.1, +4.6, +4.8. Re-sampling the evaluation with other seeds
    # moves the accuracy of one policy by about 0.5 points (sd), so +3 is a clear margin.
    assert after - before >= MARGIN, (before, after)
