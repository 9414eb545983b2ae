"""groupwise's benchmarks as verl's Parquet files and its answer checking as verl's reward
function, read back by verl's own RLHFDataset and get_custom_reward_fn."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer
from verl.trainer.ppo.reward import get_custom_reward_fn
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl_support import verl_config

from groupwise.data.benchmarks import load_benchmark
from groupwise.data.prompts import build_messages
from groupwise.integrations.verl import data
from groupwise.shipped_models import smollm2_tokenizer_dir

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def test_a_benchmark_split_written_for_verl_is_what_verl_dataset_reads(tmp_path: Path) -> None:
    path = tmp_path / "gsm8k" / "train.parquet"
    data.main(["gsm8k", "train", str(path), "--data-dir", str(DATA), "--limit", "5"])
    problems = load_benchmark("gsm8k", "train", DATA)[:5]
    tokenizer = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir())
    dataset = RLHFDataset(str(path), tokenizer, verl_config().data)
    assert len(dataset) == 5
    for index, problem in enumerate(problems):
        row = dataset[index]
        assert row["data_source"] == "groupwise/gsm8k"
        assert list(row["raw_prompt"]) == build_messages(problem, "amir")
        assert row["reward_model"]["ground_truth"] == problem.answer
        assert row["extra_info"]["checking"] == "groupwise"


def test_an_unknown_checking_mode_is_refused_naming_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="checking: unknown mode 'exact'; valid modes"):
        data.verl_rows([], "gsm8k", "amir", "exact")


def test_verl_loads_groupwise_reward_and_it_scores_the_correctness() -> None:
    config = verl_config(
        "reward.custom_reward_function.path=pkg://groupwise.integrations.verl.reward",
        "reward.custom_reward_function.name=compute_score",
    )
    score = get_custom_reward_fn(config)
    info = {"checking": "groupwise"}
    right = score(
        data_source="groupwise/gsm8k",
        solution_str="18 - 3 = 15 eggs. <answer>15</answer>",
        ground_truth="15",
        extra_info=info,
    )
    wrong = score(
        data_source="groupwise/gsm8k", solution_str="#### 16", ground_truth="15", extra_info=info
    )
    assert right == {"score": 1.0, "acc": True}
    assert wrong == {"score": 0.0, "acc": False}
    # the row's mode is used: math_verify reads \boxed{}, and 50\% is 50 beside verl's antlr4
    boxed = score(
        data_source="groupwise/math",
        solution_str="so \\boxed{50\\%}",
        ground_truth="50",
        extra_info={"checking": "math_verify"},
    )
    assert boxed["acc"] is True
