"""GroupwiseGRPOTrainer's rollouts.jsonl (`log_rollouts=True`, groupwise.integrations.trl.
rollout_log): the line of a hand-made generation batch key by key (TRL's or groupwise's
advantages, LENS's shaped and unshaped rewards, AMIR's pairs, null where TRL has nothing), the
cut flags and sampler log-probs from a batch dict, a resumed run's trimming, `groupwise view`
reading a folder with only that file, and a real 2-step AMIR-GRPO + LENS run whose lines hold
what TRL logged (docs/guides/trl.md, "Its rollouts, for groupwise view")."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
import torch
import trl_support as fx  # imports TRL: a CI dependency, so these tests never skip

from groupwise.algorithms import GroupTargets
from groupwise.integrations.trl import GroupwiseGRPOConfig, GroupwiseGRPOTrainer
from groupwise.integrations.trl.rollout_log import (
    SOURCE,
    GenerationBatch,
    LineSettings,
    RolloutLog,
    as_text,
    local_sampler_mean_logp,
    local_truncated,
    problem_id,
    rollout_line,
)
from groupwise.integrations.trl.terms import Correctness
from groupwise.view.page import render_page
from groupwise.view.records import read_run

NAN = float("nan")
SETTINGS = {
    "source": SOURCE,
    "advantage": "lens",
    "amir": True,
    "group_size": 2,
    "model": "tiny",
    "component": "correct",
    "weight": 1.0,
    "correct_reward": 1.0,
}
LINE = LineSettings(2, Correctness(0, "correct", 1.0, 1.0), True, SETTINGS)


def generation_batch(step: int = 1) -> GenerationBatch:
    """2 groups of G = 2: group 0 mixed, group 1 all wrong; `bonus` (weight 0.5) returned None
    for row 2."""
    return GenerationBatch(
        step=step,
        prompts=["1+1?", "1+1?", *[[{"role": "user", "content": "2+2?"}]] * 2],
        completions=["2", "3", [{"role": "assistant", "content": "5"}], "6"],
        reward_names=["correct", "bonus"],
        rewards_per_func=torch.tensor([[1.0, 0.25], [0.0, 0.5], [0.0, NAN], [0.0, 1.0]]),
        weights=torch.tensor([1.0, 0.5]),
        advantages=torch.tensor([0.75, -0.75, -0.5, 0.5]),
        golds=["2", "2", 4, 4],
        truncated=torch.tensor([False, True, False, False]),
    )


# LENS put rt = -0.25 in place of the wrong answers' 0 correctness: rewards 0.0 -> -0.25 and
# 0.5 -> 0.25; AMIR paired row 0 over row 1
TARGETS = GroupTargets(
    advantages=torch.tensor([0.5, -0.5, -0.125, -0.25]),
    rewards=torch.tensor([1.125, 0.25, -0.25, 0.25]),
    chosen=torch.tensor([0]),
    rejected=torch.tensor([1]),
    unshaped_rewards=torch.tensor([1.125, 0.25, 0.0, 0.5]),
)


def test_the_line_of_a_generation_batch() -> None:
    line = rollout_line(generation_batch(), LINE, TARGETS)
    assert line == {
        "step": 1,
        "problem_ids": [problem_id("1+1?"), problem_id("2+2?")],
        "questions": ["1+1?", "2+2?"],
        "truncated": [False, True, False, False],
        "unshaped_rewards": [1.125, 0.25, 0.0, 0.5],
        "sampler_mean_logp": None,
        "completions": ["2", "3", "5", "6"],
        "golds": ["2", "2", 4, 4],
        "correct": [True, False, False, False],
        "reward_columns": {"correct": [1.0, 0.0, 0.0, 0.0], "bonus": [0.25, 0.5, None, 1.0]},
        "rewards": [1.125, 0.25, -0.25, 0.25],
        "advantages": [0.5, -0.5, -0.125, -0.25],
        "pairs": [[0], [1]],
        "settings": SETTINGS,
    }
    assert problem_id("1+1?") == "prompt-" + hashlib.sha1(b"1+1?").hexdigest()[:10]
    json.dumps(line, allow_nan=False)  # strict JSON: the NaN reward is null


def test_trls_own_advantages_and_totals_where_groupwise_did_not_replace_them() -> None:
    # AMIR on TRL's "grpo" advantages: the pairs are groupwise's, the advantages TRL's
    amir_only = LineSettings(2, LINE.correctness, own_advantages=False)
    line = rollout_line(generation_batch(), amir_only, TARGETS)
    assert line["advantages"] == [0.75, -0.75, -0.5, 0.5] and line["pairs"] == [[0], [1]]
    # plain TRL, no correctness reward: totals (None counted as 0, as TRL sums), no pairs
    plain = rollout_line(generation_batch(), LineSettings(2), None)
    assert plain["rewards"] == [1.125, 0.25, 0.0, 0.5] and plain["pairs"] == [[], []]
    assert plain["correct"] is None and plain["unshaped_rewards"] is None
    assert plain["settings"] == {"source": SOURCE}
    with pytest.raises(ValueError, match="not whole groups of 3"):
        rollout_line(generation_batch(), LineSettings(3), None)


def test_conversations_read_as_text() -> None:
    assert as_text([{"role": "user", "content": "hi"}]) == "hi"
    turns = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]
    assert as_text(turns) == "system: be brief\n\nuser: 2+2?"
    image = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what?"}]}]
    assert as_text(image) == " what?"


def test_cut_flags_and_sampler_logps_from_the_batch_dict() -> None:
    eos, pad = 9, 0
    batch = {
        # row 0 ends with EOS; row 1 reached the length limit; row 2 has EOS only in padding
        "completion_ids": torch.tensor([[5, eos, pad], [5, 6, 7], [5, 6, eos]]),
        "completion_mask": torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 0]]),
        "sampling_per_token_logps": torch.tensor(
            [[-1.0, -3.0, 0.0], [-1.0, NAN, -2.0], [-0.5, -0.5, -9.0]]
        ),
    }
    assert local_truncated(batch, [eos]).tolist() == [False, True, True]
    assert local_truncated(batch, []) is None
    assert local_sampler_mean_logp(batch).tolist() == [-2.0, -1.5, -0.5]
    assert local_sampler_mean_logp({**batch, "sampling_per_token_logps": None}) is None


def _write(path: Path, steps: list[int]) -> None:
    path.write_text("".join(json.dumps({"step": s, "old": True}) + "\n" for s in steps))


def test_a_resumed_run_cuts_the_log_back_to_its_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    _write(path, [1, 2, 3, 4])
    log = RolloutLog(tmp_path, "answer", LINE, writer=True)
    log.pending = generation_batch(step=3)  # resumed at global step 2: its next line is step 3
    log.finish(TARGETS)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(x["step"], "old" in x) for x in lines] == [(1, True), (2, True), (3, False)]
    aside = path.with_name("rollouts.jsonl.set-aside").read_text().splitlines()
    assert [json.loads(x)["step"] for x in aside] == [3, 4]
    log.finish(TARGETS)  # nothing collected: nothing written
    assert len(path.read_text().splitlines()) == 3
    _write(path, [1, 2])
    fresh = RolloutLog(tmp_path, "answer", LINE, writer=True)
    fresh.pending = generation_batch(step=1)  # global step 0: a fresh run empties the file
    fresh.finish(None)
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [1]
    other = RolloutLog(tmp_path / "rank1", "answer", LINE, writer=False)
    other.pending = generation_batch()
    other.finish(TARGETS)
    assert not (tmp_path / "rank1").exists()


def test_groupwise_view_reads_a_folder_with_only_the_trl_lines(tmp_path: Path) -> None:
    lines = [rollout_line(generation_batch(step), LINE, TARGETS) for step in (1, 2)]
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    model = read_run(tmp_path)
    assert model["settings"] == SETTINGS and model["rollout_steps"] == [1, 2]
    # no metrics.jsonl: the steps list from the lines (1 of 4 correct, one group of each type)
    assert model["steps"][0] == {
        "step": 1,
        "acc": 0.25,
        "right": 0.0,
        "wrong": 0.5,
        "mixed": 0.5,
        "pairs": 1.0,
        "cut": 0.25,
    }
    mixed, wrong = model["groups"][1]
    assert mixed["q"] == "1+1?" and mixed["gold"] == "2" and mixed["pairs"] == [[0, 1]]
    assert wrong["t"] == ["5", "6"] and wrong["ok"] == [0, 0] and wrong["col:bonus"] == [None, 1.0]
    # LENS: rt = -0.25 for both wrong answers, p / D = x / (1 + x) with x = G * 0.25 = 0.5
    assert wrong["rt"] == [-0.25, -0.25] and wrong["pd"] == pytest.approx([1 / 3, 1 / 3], abs=1e-4)
    assert mixed["adv"] == [0.5, -0.5] and mixed["un"] == [1.125, 0.25] and mixed["cut"] == [0, 1]
    plain = rollout_line(generation_batch(), LineSettings(2), None)
    plain["golds"] = None
    (tmp_path / "rollouts.jsonl").write_text(json.dumps(plain) + "\n")
    group = read_run(tmp_path)["groups"][1][0]
    # no correctness reward: correct where the total is above 0; no gold
    assert group["gold"] is None and group["ok"] == [1, 1]
    assert 'id="gw-step-1"' in render_page(read_run(tmp_path))


def sum_reward(prompts, completions, completion_ids, **_):
    return [float(sum(ids) % 2) for ids in completion_ids]


def spread_reward(prompts, completions, completion_ids, **_):
    return [len(set(ids)) / 4 for ids in completion_ids]


def test_a_real_amir_lens_run_logs_what_trl_logged(tmp_path: Path) -> None:
    from datasets import Dataset

    model, tokenizer = fx.tiny_model()
    rows = [{"prompt": p, "answer": str(i)} for i, p in enumerate(fx.PROMPTS)]
    options = {**fx.settings(tmp_path, max_steps=2), "learning_rate": 1e-3}
    args = GroupwiseGRPOConfig(
        **options,
        amir=True,
        amir_margin=0.1,
        advantage_estimator="lens",
        correctness_reward="sum_reward",
        log_rollouts=True,
    )
    trainer = GroupwiseGRPOTrainer(
        model=model,
        reward_funcs=[sum_reward, spread_reward],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    trainer.train()
    lines = [json.loads(x) for x in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2]
    last = lines[-1]  # TRL's completions table holds the last generation batch
    assert last["completions"] == list(trainer._logs["completion"])
    assert last["questions"] == list(trainer._logs["prompt"])[:: fx.G]
    assert sorted(last["questions"]) == sorted(fx.PROMPTS)
    for name in ("sum_reward", "spread_reward"):
        assert last["reward_columns"][name] == list(trainer._logs["rewards"][name])
    assert last["advantages"] == pytest.approx(list(trainer._logs["advantages"]))
    assert last["correct"] == [v == 1.0 for v in last["reward_columns"]["sum_reward"]]
    answers = {p: str(i) for i, p in enumerate(fx.PROMPTS)}
    assert last["golds"] == [answers[q] for q in last["questions"] for _ in range(fx.G)]
    for chosen, rejected in zip(*last["pairs"], strict=True):
        assert chosen // fx.G == rejected // fx.G
        assert last["rewards"][chosen] - last["rewards"][rejected] >= 0.1 - 1e-6
    logged = [e for e in trainer.state.log_history if "completions/clipped_ratio" in e]
    for line, entry in zip(lines, logged, strict=True):  # TRL's own cut test, per step
        cut = sum(line["truncated"]) / len(line["truncated"])
        assert math.isclose(cut, entry["completions/clipped_ratio"], abs_tol=1e-6)
    model = read_run(tmp_path)
    assert model["settings"]["advantage"] == "lens" and model["settings"]["group_size"] == fx.G
    assert [s["step"] for s in model["steps"]] == [1, 2]
    groups = model["groups"][2]
    assert [t for g in groups for t in g["t"]] == last["completions"]
    assert [g["gold"] for g in groups] == last["golds"][:: fx.G]
