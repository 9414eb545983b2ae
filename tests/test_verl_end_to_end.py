"""verl's real entry point on a CPU: `python -m verl.trainer.main_ppo` for 2 training steps of
groupwise's tiny `arith-base` policy (verl's Hydra config, Ray, TransferQueue, its agent loop
and reward loop with groupwise's reward, an FSDP2 actor on gloo), with verl's own GRPO, with
`trainer.v1.trainer_mode=groupwise` and groupwise_grpo, and with groupwise_lens + AMIR; then the
AMIR + LENS run resumed from its step-1 checkpoint; the groupwise_grpo and AMIR + LENS runs again
on two processes; one step of groupwise_grpo + AMIR (top_p and top_k sampling, DAPO's overlong
punishment, truncated responses masked) whose weight change is checked against the objective's
gradient written out here; and one step under verl's colocate_async trainer. What a CPU needs
is tests/verl_cpu (loaded through verl's VERL_USE_EXTERNAL_MODULES; docs/guides/verl.md, "On a
CPU").

Everything asserted is what verl logged (its file logger) and wrote (its rollout dump, with the
batch its update read: verl_cpu.record; the weights its weight sync sent: verl_cpu.rollout;
its checkpoints), checked against groupwise's own Algorithm on the same rows.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from verl_cpu.run import BATCH, N, Run, main_ppo

from groupwise.algorithms import AlgorithmOptions, GroupRewards, RewardFacts
from groupwise.algorithms.logprobs import sequence_mean_logp
from groupwise.integrations.verl.loss import amir_row_weights
from groupwise.integrations.verl.trainer import STATE_FILE

pytestmark = pytest.mark.slow

GROUPWISE = ["trainer.v1.trainer_mode=groupwise"]
GROUPWISE_GRPO = [*GROUPWISE, "algorithm.adv_estimator=groupwise_grpo"]
AMIR_LENS_OPTIONS = [
    *GROUPWISE,
    "algorithm.adv_estimator=groupwise_lens",
    "+algorithm.groupwise.amir=true",
    "+algorithm.groupwise.margin=0.5",
    "+algorithm.groupwise.reward_min=0",
    "+algorithm.groupwise.reward_max=1",
]
AMIR_LENS = [*AMIR_LENS_OPTIONS, "trainer.save_freq=1"]
RESPONSE_LENGTH, OVERLONG_BUFFER = 44, 8
"""The amir_gradient run's length limit (arith-base's responses run 38 to 49 tokens: some are
cut) and DAPO's overlong buffer (a penalty from 36 tokens on)."""
TOP_P, TOP_K = 0.9, 20
AMIR_GRADIENT = [
    *GROUPWISE,
    "algorithm.adv_estimator=groupwise_grpo",
    "+algorithm.groupwise.amir=true",
    "+algorithm.groupwise.margin=0.5",
    "+algorithm.groupwise.lambda_init=0.5",
    "+algorithm.groupwise.lambda_max=1",
    "+algorithm.groupwise.reward_min=-1",
    "+algorithm.groupwise.reward_max=1",
    "+algorithm.groupwise.correctness_key=acc",
    "+algorithm.groupwise.mask_truncated=true",
    # verl's DAPO reward manager: the score plus the soft overlong punishment
    "reward.reward_manager.name=dapo",
    f"+reward.reward_kwargs.max_resp_len={RESPONSE_LENGTH}",
    "+reward.reward_kwargs.overlong_buffer_cfg.enable=true",
    f"+reward.reward_kwargs.overlong_buffer_cfg.len={OVERLONG_BUFFER}",
    "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
    "+reward.reward_kwargs.overlong_buffer_cfg.log=false",
    f"data.max_response_length={RESPONSE_LENGTH}",
    f"actor_rollout_ref.rollout.top_p={TOP_P}",
    f"actor_rollout_ref.rollout.top_k={TOP_K}",
    "actor_rollout_ref.actor.optim.clip_grad=1000000",  # SGD's change is lr x the gradient
    "trainer.total_training_steps=1",
]
TWO_RANKS = [
    "trainer.n_gpus_per_node=2",
    "++ray_kwargs.ray_init.num_gpus=2",
    f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={BATCH * N // 2}",
    f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={BATCH * N // 2}",
]
"""Two processes (gloo), FSDP2 over both, one rollout replica each; the same micro-batch of
rows per process."""
STEPS = (1, 2)
WEIGHTS_ATOL = 1e-6
"""Parity, resume and two ranks: the same samples give the same update up to float summation
order (the runs use SGD: AdamW's first step is lr * sign(gradient), which turns a rounding
difference in a near-zero gradient into a change of 2 lr). Measured: two ranks against one,
1.2e-7 after 2 steps that moved the weights by 5e-3."""


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("verl-cpu-assets")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, assets):
    """The runs by name, each started the first time a test asks for it (one at a time)."""
    done: dict[str, Run] = {}
    root = tmp_path_factory.mktemp("verl-cpu-runs")

    def run(name: str) -> Run:
        if name not in done:
            done[name] = main_ppo(assets, root / name, *keys(name))
        return done[name]

    def keys(name: str) -> list[str]:
        if name == "amir_lens_resumed":
            step_1 = run("amir_lens").folder / "checkpoints" / "global_step_1"
            return [
                *AMIR_LENS,
                "trainer.resume_mode=resume_path",
                f"trainer.resume_from_path={step_1}",
            ]
        return {
            "verl_grpo": ["trainer.v1.trainer_mode=sync", "algorithm.adv_estimator=grpo"],
            "groupwise_grpo": GROUPWISE_GRPO,
            "amir_lens": AMIR_LENS,
            "amir_gradient": AMIR_GRADIENT,
            "groupwise_grpo_two_ranks": [*GROUPWISE_GRPO, *TWO_RANKS],
            "amir_lens_two_ranks": [*AMIR_LENS_OPTIONS, *TWO_RANKS],
            "grpo_colocate_async": [
                "trainer.v1.trainer_mode=colocate_async",
                "algorithm.adv_estimator=groupwise_grpo",
                "trainer.total_training_steps=1",  # CI's time: one step shows the path
            ],
        }[name]

    return run


def rows(batch: dict) -> list[dict]:
    """The batch's real rows as {uid, key (prompt ids, response ids), score, tokens (the
    response's positions), mask (those in the loss), old, rollout (log-probs), adv, weight}, in
    verl's order."""
    out, responses = [], batch["responses"]
    length = responses.shape[1]
    for i, tag in enumerate(batch["tags"]):
        if tag.get("is_padding", False):
            continue
        tokens = torch.arange(length) < batch["lengths"][i]
        prompt = batch["prompts"][i]
        out.append(
            {
                "uid": batch["uid"][i],
                "key": (tuple(prompt[prompt != 0].tolist()), tuple(responses[i][tokens].tolist())),
                "score": float(batch["rm_scores"][i].sum()),
                "tokens": tokens,
                "mask": batch["response_mask"][i].bool(),
                "old": batch["old_log_probs"][i],
                "rollout": batch["rollout_log_probs"][i],
                "adv": batch["advantages"][i],
                "weight": None if batch["weights"] is None else float(batch["weights"][i]),
            }
        )
    return out


def expected(options: dict, batch: list[dict]):
    """groupwise's own Algorithm on the same rows, group-major (verl's GRPO settings: the
    group's unbiased std, eps 1e-6); the rows in that order."""
    uids = sorted({row["uid"] for row in batch})
    ordered = sorted(batch, key=lambda row: (uids.index(row["uid"]), row["key"]))
    rewards = torch.tensor([row["score"] for row in ordered])
    mean_logp = torch.stack(
        [sequence_mean_logp(row["old"][None].float(), row["mask"][None])[0] for row in ordered]
    )
    algorithm = AlgorithmOptions(**options).build(
        RewardFacts([(0.0, 1.0)], [1.0], 1.0), N, scale="group", std="unbiased", eps=1e-6
    )
    groups = GroupRewards(rewards, rewards == 1.0, N, correct_reward=1.0, mean_logp_old=mean_logp)
    return algorithm.targets(groups), ordered, algorithm


def assert_advantages(targets, ordered: list[dict]) -> None:
    for position, row in enumerate(ordered):
        want = targets.advantages[position] * row["mask"]
        assert torch.allclose(row["adv"], want, atol=1e-6), (position, row["adv"], want)


def max_change(before: dict, after: dict) -> float:
    return max(float((after[name] - before[name]).abs().max()) for name in before)


def test_groupwise_grpo_trains_through_verl_main_ppo(runs) -> None:
    run = runs("groupwise_grpo")
    assert sorted(run.metrics) == list(STEPS) and sorted(run.batches) == list(STEPS)
    assert sorted(run.weights) == [0, 1, 2]  # the initial sync, then one after each step
    for step in STEPS:
        batch = rows(run.batches[step])
        assert len(batch) == BATCH * N
        targets, ordered, _ = expected({"advantage": "grpo"}, batch)
        assert_advantages(targets, ordered)
        metrics = run.metrics[step]
        scores = {}
        for row in batch:
            scores.setdefault(row["uid"], set()).add(row["score"])
        mixed = sum(len(group) == 2 for group in scores.values())
        assert metrics["groupwise/groups/mixed"] == mixed / BATCH
        assert {"groupwise/groups/all_correct", "groupwise/groups/all_wrong"} <= set(metrics)
    assert any(run.metrics[step]["groupwise/groups/mixed"] > 0 for step in STEPS)
    # a step with mixed groups moves the weights by far more than AdamW's decay alone (1e-5)
    assert max_change(run.weights[0], run.weights[2]) > 1e-4


def same_samples_and_advantages(ours: dict, theirs: dict) -> None:
    """The two batches hold the same samples (prompt and response ids, duplicates counted) with
    the same advantages (a sample drawn twice in a group has one advantage)."""
    ours, theirs = rows(ours), rows(theirs)
    assert Counter(row["key"] for row in ours) == Counter(row["key"] for row in theirs)
    advantage = {row["key"]: row["adv"] for row in theirs}
    for row in ours:
        assert torch.allclose(row["adv"], advantage[row["key"]], atol=1e-6)


def test_verl_grpo_and_groupwise_grpo_give_the_same_advantages_and_weights(runs) -> None:
    verl, groupwise = runs("verl_grpo"), runs("groupwise_grpo")
    assert max_change(verl.weights[0], groupwise.weights[0]) == 0.0
    for step in STEPS:
        same_samples_and_advantages(groupwise.batches[step], verl.batches[step])
        assert max_change(verl.weights[step], groupwise.weights[step]) <= WEIGHTS_ATOL


def test_amir_lens_through_verl_main_ppo(runs) -> None:
    run = runs("amir_lens")
    options = {"advantage": "lens", "amir": True, "margin": 0.5}
    lambda_value = run.metrics[1]["groupwise/amir/lambda"]
    pairs = 0
    for step in STEPS:
        metrics = run.metrics[step]
        batch = rows(run.batches[step])
        targets, ordered, algorithm = expected(options, batch)
        assert_advantages(targets, ordered)
        weights = amir_row_weights(targets.coefficients, metrics["groupwise/amir/lambda"])
        for position, row in enumerate(ordered):
            assert row["weight"] == pytest.approx(float(weights[position]), abs=1e-6)
        assert metrics["groupwise/amir/pairs"] == targets.num_pairs
        pairs += targets.num_pairs
        if targets.num_pairs:
            want = float(targets.pair_losses.mean())
            assert metrics["groupwise/amir/preference_loss"] == pytest.approx(want, abs=1e-5)
        if step == 1:
            # AMIR's rule on the driver, from verl's logged pg_loss and the batch's L_pref
            assert metrics["groupwise/amir/lambda"] == algorithm.lambda_reg.value
            if targets.num_pairs:
                algorithm.lambda_reg.observe_losses(
                    metrics["actor/pg_loss"], metrics["groupwise/amir/preference_loss"]
                )
            lambda_value = algorithm.lambda_reg.value
        else:
            assert metrics["groupwise/amir/lambda"] == pytest.approx(lambda_value, rel=1e-9)
    assert pairs > 0
    assert run.metrics[2]["groupwise/amir/lambda"] != run.metrics[1]["groupwise/amir/lambda"]
    for step in STEPS:
        assert (run.folder / "checkpoints" / f"global_step_{step}" / STATE_FILE).is_file()
    assert max_change(run.weights[0], run.weights[2]) > 1e-4


def test_resuming_from_step_1_gives_step_2_of_the_uninterrupted_run(runs) -> None:
    whole, resumed = runs("amir_lens"), runs("amir_lens_resumed")
    assert sorted(resumed.metrics) == [2]
    for key in ("groupwise/amir/lambda", "groupwise/amir/pairs", "groupwise/groups/mixed"):
        assert resumed.metrics[2][key] == pytest.approx(whole.metrics[2][key], rel=1e-9), key
    same_samples_and_advantages(resumed.batches[2], whole.batches[2])
    assert max_change(whole.weights[1], resumed.weights[1]) == 0.0  # the checkpoint's weights
    assert max_change(whole.weights[2], resumed.weights[2]) <= WEIGHTS_ATOL


def objective_gradient(model, batch: list[dict], lambda_value: float, amir: bool) -> torch.Tensor:
    """The gradient of AMIR-GRPO's objective on the recorded rows, at the model's weights, all
    parameters flat, written from docs/algorithms.md (not groupwise's functions): GRPO's term as
    verl's ppo_loss at the rollout policy (ratio 1: -A_i log pi, token-mean over the batch's
    response tokens), plus lambda_reg x L_pref = -mean over pairs of log sigmoid(beta (l_c -
    l_r)), l the mean token log-prob of a response, pairs (c, r) of a group with r_c - r_r >
    margin (reference-free). Truncated responses (overlong filtering: no token in the loss)
    are in neither term."""
    model.zero_grad()
    batch = [row for row in batch if row["mask"].any()]
    token_logps, advantages = [], []
    for row in batch:
        prompt, response = (torch.tensor(part) for part in row["key"])
        logits = model(torch.cat([prompt, response])[None]).logits[0].float()
        logp = logits[len(prompt) - 1 : -1].log_softmax(-1)
        token_logps.append(logp.gather(-1, response[:, None])[:, 0])
        advantages.append(float(row["adv"][0]))
    tokens = sum(len(t) for t in token_logps)
    grpo = -sum(a * t.sum() for a, t in zip(advantages, token_logps, strict=True)) / tokens
    mean_logp = [t.mean() for t in token_logps]
    pairs = [
        (c, r)
        for c in range(len(batch))
        for r in range(len(batch))
        if batch[c]["uid"] == batch[r]["uid"] and batch[c]["score"] - batch[r]["score"] > 0.5
    ]
    assert pairs
    pref = -sum(
        torch.nn.functional.logsigmoid(0.5 * (mean_logp[c] - mean_logp[r])) for c, r in pairs
    ) / len(pairs)
    (grpo + lambda_value * pref if amir else grpo).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def overlong_penalty(length: int) -> float:
    """DAPO's soft overlong punishment (docs/algorithms.md, "Overlong completions"), penalty
    factor 1: 0 up to RESPONSE_LENGTH - OVERLONG_BUFFER tokens, then -1/OVERLONG_BUFFER a token."""
    return min(-(length - (RESPONSE_LENGTH - OVERLONG_BUFFER)) / OVERLONG_BUFFER, 0.0)


def test_amir_gradient_reaches_verl_actor(runs, assets) -> None:
    """verl's actor, through main_ppo, takes one SGD step with AMIR on: the weights' change is
    -lr x the objective's gradient computed here on the batch it recorded, AMIR's term included
    (without it the change would differ by far more than the tolerance). The run also samples
    with top_p and top_k, scores with verl's DAPO reward manager and its overlong punishment,
    and masks the responses cut at the length limit out of the loss (mask_truncated): each is
    checked on the recorded batch, and the gradient leaves the cut responses out."""
    from transformers import AutoModelForCausalLM
    from verl_cpu.run import model_folder

    run = runs("amir_gradient")
    batch = rows(run.batches[1])
    lengths = [int(row["tokens"].sum()) for row in batch]
    cut = [length == RESPONSE_LENGTH for length in lengths]
    assert any(cut) and not all(cut)
    assert run.metrics[1]["groupwise/truncated"] == pytest.approx(sum(cut) / len(batch))
    for row, length, truncated in zip(batch, lengths, cut, strict=True):
        # the score is the correctness (0 or 1) plus the overlong penalty of its length
        assert row["score"] - overlong_penalty(length) in (pytest.approx(0.0), pytest.approx(1.0))
        # a cut response has no token in the loss and no AMIR weight; the others keep theirs
        assert torch.equal(row["mask"], row["tokens"] & (not truncated))
        if truncated:
            assert row["weight"] == 0.0
        # top_p and top_k: the sampled token's log-prob under the filtered, renormalised
        # distribution is above the actor's (the full distribution) wherever a token was cut
        sampled, full = row["rollout"][row["tokens"]], row["old"][row["tokens"]]
        assert bool((sampled >= full - 1e-5).all())
    assert any(overlong_penalty(length) < 0 for length in lengths)
    # GRPO's advantages by hand over every row of the group, cut ones included: the group's
    # unbiased std, eps 1e-6 (verl's grpo)
    for row in batch:
        group = torch.tensor([r["score"] for r in batch if r["uid"] == row["uid"]])
        want = (row["score"] - group.mean()) / (group.std() + 1e-6)
        assert float(row["adv"][row["tokens"]][0]) == pytest.approx(float(want), abs=1e-5)
    model = AutoModelForCausalLM.from_pretrained(model_folder(assets), dtype=torch.float32)
    model.load_state_dict(run.weights[0], strict=False)
    names = [name for name, _ in model.named_parameters()]
    change = torch.cat([(run.weights[1][n] - run.weights[0][n]).reshape(-1) for n in names])
    lambda_value = run.metrics[1]["groupwise/amir/lambda"]
    assert lambda_value == 0.5
    with_amir = -0.1 * objective_gradient(model, batch, lambda_value, amir=True)
    grpo_only = -0.1 * objective_gradient(model, batch, lambda_value, amir=False)
    scale = float(with_amir.norm())
    difference = float((change - with_amir).norm())
    amir_part = float((with_amir - grpo_only).norm())
    print(
        f"amir_gradient: |change - expected| {difference:.3g} of |expected| {scale:.3g}; "
        f"the AMIR term's part {amir_part:.3g}"
    )
    assert difference <= 1e-4 * scale
    assert amir_part > 100 * difference


@pytest.mark.parametrize("name", ["groupwise_grpo", "amir_lens"])
def test_two_ranks_reach_the_one_process_weights(runs, name: str) -> None:
    """main_ppo on two CPU processes (gloo, FSDP2 over both, a rollout replica each) draws the
    same samples as on one and reaches its weights after each step within WEIGHTS_ATOL: verl's
    loss scaling over ranks, and AMIR's per-row weights with it, give the same update whatever
    the split."""
    one, two = runs(name), runs(f"{name}_two_ranks")
    for step in STEPS:
        # each rank's share of the batch's tokens: half of them
        assert (
            two.metrics[step]["global_seqlen/mean"] * 2 == one.metrics[step]["global_seqlen/mean"]
        )
        same_samples_and_advantages(two.batches[step], one.batches[step])
        for key in ("groupwise/amir/lambda", "groupwise/amir/pairs"):
            if key in one.metrics[step]:
                assert two.metrics[step][key] == pytest.approx(one.metrics[step][key], rel=1e-9)
        difference = max_change(one.weights[step], two.weights[step])
        print(f"two_ranks {name} step {step}: weights differ by {difference:.3g}")
        assert difference <= WEIGHTS_ATOL
    assert max_change(one.weights[0], one.weights[2]) > 1e-3


def test_groupwise_grpo_under_verl_async_trainer(runs) -> None:
    """verl 0.9.1's colocate_async trainer (partial rollouts, weights synced after each step)
    with groupwise_grpo through verl's own compute_advantage: the advantages of every row it
    trained on are groupwise's own, and the weights move. The estimators that need the rollout
    policy's log-probs (LENS, AMIR's coefficients) refuse there in one line naming the trainer
    mode that passes them: verl's async trainers compute advantages with the base trainer's
    method, whose compute_advantage passes none (test_verl_trainer.py has the refusal at start)."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync

    assert PPOTrainerColocateAsync._compute_advantage is PPOTrainer._compute_advantage
    run = runs("grpo_colocate_async")
    assert sorted(run.batches) == [1]
    batch = rows(run.batches[1])
    assert len(batch) == BATCH * N
    targets, ordered, _ = expected({"advantage": "grpo"}, batch)
    assert_advantages(targets, ordered)
    assert max_change(run.weights[0], run.weights[1]) > 1e-4
