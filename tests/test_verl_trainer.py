"""The trainer mode (groupwise.integrations.verl.trainer) on a real verl batch: verl's own config
(Hydra), a real TransferQueue on a local Ray, the batch as verl's agent loop writes it (SmolLM2's
tokenizer, verl's list_of_dict_to_tensordict, its padding rows), shuffled as balance_batch does."""

from __future__ import annotations

import random

import numpy as np
import pytest
import ray
import torch
import transfer_queue as tq
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size
from verl.trainer.ppo.v1 import get_trainer_cls
from verl.utils.tensordict_utils import list_of_dict_to_tensordict
from verl_support import verl_config

from groupwise.algorithms import AlgorithmOptions, GroupRewards, RewardFacts
from groupwise.integrations.verl.advantages import check_verl_trainer
from groupwise.integrations.verl.loss import COEFFICIENTS, amir_row_weights
from groupwise.integrations.verl.trainer import GroupwiseTrainer
from groupwise.shipped_models import smollm2_tokenizer_dir

# two prompts x G = 4; the second group has no correct answer (LENS gives it a gradient)
ANSWERS = {
    "q1": [("so 18 eggs. #### 18", 1.0), ("#### 20", 0.0), ("it is 18 #### 18", 1.0), ("7", 0.0)],
    "q2": [("#### 3", 0.0), ("it is 5 #### 5", 0.0), ("#### 9", 0.0), ("2 + 2 #### 4", 0.0)],
}
G = 4
PADDED_TO = 12  # verl pads the batch to a multiple of dp x mini-batch rows: 8 real + 4 padding


@pytest.fixture(scope="module")
def transfer_queue():
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    yield
    tq.close()
    ray.shutdown()


def trainer_config(*overrides: str):
    return verl_config(
        "trainer.v1.trainer_mode=groupwise",
        f"actor_rollout_ref.rollout.n={G}",
        "trainer.device=cpu",
        "data.train_batch_size=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        *overrides,
    )


def put_batch(partition: str, with_extra: bool = True, rollout: bool = False):
    """The rows as verl's agent loop puts them (keys {uid}_{session}_0), shuffled, padded by verl,
    with old_log_probs written as its _compute_old_log_prob does; returns the batch meta and the
    per-row (uid, score, response_mask, old_log_probs) of the real rows in the batch's order."""
    tokenizer = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir())
    prompt = tokenizer("Question: how many?", return_tensors="pt").input_ids[0]
    generator = torch.Generator().manual_seed(0)
    keys, fields, tags = [], [], []
    for uid, answers in ANSWERS.items():
        for session, (text, score) in enumerate(answers):
            response = tokenizer(text, return_tensors="pt").input_ids[0]
            rm_scores = torch.zeros(len(response))
            rm_scores[-1] = score
            keys.append(f"{uid}{partition}_{session}_0")
            info = {"acc": score > 0} if with_extra else {}
            fields.append(
                {
                    "uid": f"{uid}{partition}",
                    "prompts": prompt,
                    "responses": response,
                    "input_ids": torch.cat([prompt, response]),
                    "attention_mask": torch.ones(len(prompt) + len(response), dtype=torch.int64),
                    "response_mask": torch.ones(len(response), dtype=torch.int64),
                    "loss_mask": torch.ones(len(response), dtype=torch.int64),
                    "rm_scores": rm_scores,
                    "extra_fields": {"reward_extra_info": info},
                }
            )
            if rollout:  # as verl records them with rollout.calculate_log_probs
                fields[-1]["rollout_log_probs"] = -torch.rand(len(response), generator=generator)
            tags.append({"status": "success", "seq_len": len(prompt) + len(response)})
    shuffled = list(range(len(keys)))
    random.Random(1).shuffle(shuffled)
    meta = tq.kv_batch_put(
        keys=[keys[i] for i in shuffled],
        partition_id=partition,
        fields=list_of_dict_to_tensordict([fields[i] for i in shuffled]),
        tags=[tags[i] for i in shuffled],
    )
    meta = upsample_batch_to_divisible_size(meta, PADDED_TO, tokenizer.eos_token_id)
    masks = tq.kv_batch_get(keys=meta.keys, partition_id=partition, select_fields=["response_mask"])
    old = [
        -torch.rand(len(mask), generator=generator) * 3 for mask in masks["response_mask"].unbind()
    ]
    tq.kv_batch_put(
        keys=meta.keys,
        partition_id=partition,
        fields=list_of_dict_to_tensordict([{"old_log_probs": row} for row in old]),
    )
    real = [fields[i] for i in shuffled]
    return meta, real, old[: len(real)]


def expected_targets(options: dict, real: list, old: list):
    """groupwise's own Algorithm on the same rows, group-major: what groupwise's trainer computes
    at verl's GRPO settings (the group's unbiased std, eps 1e-6)."""
    order = sorted(range(len(real)), key=lambda i: (real[i]["uid"], i))
    rewards = torch.tensor([float(real[i]["rm_scores"].sum()) for i in order])
    mean_logp = torch.stack([old[i].mean() for i in order])
    facts = RewardFacts([(0.0, 1.0)], [1.0], 1.0)
    algorithm = AlgorithmOptions(**options).build(facts, G, scale="group", std="unbiased", eps=1e-6)
    batch = GroupRewards(rewards, rewards == 1.0, G, correct_reward=1.0, mean_logp_old=mean_logp)
    return algorithm.targets(batch), order, algorithm


def run_compute_advantage(config, meta, partition: str):
    trainer = get_trainer_cls("groupwise")(config)
    metrics: dict = {}
    out = trainer._compute_advantage(meta, metrics)
    fields = ["advantages", "response_mask"] + ([COEFFICIENTS] if trainer.amir else [])
    data = tq.kv_batch_get(keys=out.keys, partition_id=partition, select_fields=fields)
    return trainer, metrics, data


@pytest.mark.parametrize("estimator", ["grpo", "lens", "rloo"])
def test_compute_advantage_on_a_real_verl_batch_equals_groupwise_own_targets(
    transfer_queue, estimator: str
) -> None:
    partition = f"adv-{estimator}"
    meta, real, old = put_batch(partition)
    config = trainer_config(
        f"algorithm.adv_estimator=groupwise_{estimator}",
        "+algorithm.groupwise.amir=true",
        "+algorithm.groupwise.margin=0.5",
    )
    trainer, metrics, data = run_compute_advantage(config, meta, partition)
    assert isinstance(trainer, GroupwiseTrainer)
    targets, order, algorithm = expected_targets(
        {"advantage": estimator, "amir": True, "margin": 0.5}, real, old
    )
    advantages = [row for row in data["advantages"].unbind()]
    for position, row in enumerate(order):
        expected = targets.advantages[position]
        assert torch.allclose(advantages[row], expected.expand_as(advantages[row]), atol=1e-6)
    for padding in advantages[len(real) :]:
        assert torch.all(padding == 0)
    # AMIR: q1 pairs each of its 2 correct answers with each of its 2 wrong ones; q2 has none
    assert metrics["groupwise/amir/pairs"] == 4.0
    weights = data[COEFFICIENTS]
    expected_weights = amir_row_weights(targets.coefficients, algorithm.lambda_reg.value)
    for position, row in enumerate(order):
        assert float(weights[row]) == pytest.approx(float(expected_weights[position]), abs=1e-7)
    assert torch.all(weights[len(real) :] == 0)
    assert all(float(weights[row]) != 0 for row in order[:G])  # q1's rows all sit in a pair
    assert metrics["groupwise/groups/mixed"] == 0.5
    assert metrics["groupwise/groups/all_wrong"] == 0.5
    q2 = [advantages[row] for position, row in enumerate(order) if position >= G]
    moved = any(bool(a.abs().sum() > 0) for a in q2)
    assert moved == (estimator == "lens")
    assert metrics["groupwise/groups/all_wrong_with_gradient"] == (0.5 if moved else 0.0)


def test_correctness_from_the_reward_extra_info_key(transfer_queue) -> None:
    partition = "adv-key"
    meta, real, old = put_batch(partition)
    # a score that is not the correctness: LENS reads the reward's `acc` instead
    config = trainer_config(
        "algorithm.adv_estimator=groupwise_lens", "+algorithm.groupwise.correctness_key=acc"
    )
    _, metrics, data = run_compute_advantage(config, meta, partition)
    targets, order, _ = expected_targets({"advantage": "lens"}, real, old)
    advantages = data["advantages"].unbind()
    for position, row in enumerate(order):
        assert float(advantages[row][0]) == pytest.approx(float(targets.advantages[position]))
    assert metrics["groupwise/groups/all_wrong_with_gradient"] == 0.5


def test_mask_truncated_takes_cut_responses_out_of_the_loss_and_the_pairs(transfer_queue) -> None:
    """With the length limit at q1's longest answer (a correct one), that answer is cut: its
    response and loss masks are zeroed, it has no AMIR weight (q1's 4 pairs become 2), and the
    advantages are unchanged (it still counts in its group's statistics)."""
    tokenizer = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir())
    lengths = {text: len(tokenizer(text).input_ids) for text, _ in ANSWERS["q1"] + ANSWERS["q2"]}
    limit = max(lengths.values())
    cut = [text for text, length in lengths.items() if length == limit]
    assert cut == ["so 18 eggs. #### 18"], lengths
    options = ["+algorithm.groupwise.amir=true", "+algorithm.groupwise.margin=0.5"]
    outputs = {}
    for masked in (False, True):
        partition = f"adv-cut-{masked}"
        meta, real, _ = put_batch(partition)
        config = trainer_config(
            "algorithm.adv_estimator=groupwise_grpo",
            f"data.max_response_length={limit}",
            *options,
            *(["+algorithm.groupwise.mask_truncated=true"] if masked else []),
        )
        trainer = get_trainer_cls("groupwise")(config)
        metrics: dict = {}
        out = trainer._compute_advantage(meta, metrics)
        fields = ["advantages", "response_mask", "loss_mask", COEFFICIENTS]
        outputs[masked] = (
            metrics,
            tq.kv_batch_get(keys=out.keys, partition_id=partition, select_fields=fields),
        )
    (kept_metrics, kept), (cut_metrics, masked) = outputs[False], outputs[True]
    assert (kept_metrics["groupwise/amir/pairs"], cut_metrics["groupwise/amir/pairs"]) == (4.0, 2.0)
    assert cut_metrics["groupwise/truncated"] == 1 / 8
    for row, fields in enumerate(real):
        is_cut = len(fields["responses"]) == limit
        for name in ("response_mask", "loss_mask"):
            assert bool((masked[name].unbind()[row] == (0 if is_cut else 1)).all()), (row, name)
            assert bool((kept[name].unbind()[row] == 1).all())
        assert torch.equal(masked["advantages"].unbind()[row], kept["advantages"].unbind()[row])
        if is_cut:
            assert float(kept[COEFFICIENTS][row]) != 0 and float(masked[COEFFICIENTS][row]) == 0


def test_a_missing_correctness_key_is_one_line(transfer_queue) -> None:
    partition = "adv-nokey"
    meta, _, _ = put_batch(partition, with_extra=False)
    config = trainer_config(
        "algorithm.adv_estimator=groupwise_lens", "+algorithm.groupwise.correctness_key=acc"
    )
    with pytest.raises(ValueError, match=r"algorithm\.groupwise\.correctness_key=acc: .* no such"):
        run_compute_advantage(config, meta, partition)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm.adv_estimator=grpo"], r"needs algorithm\.adv_estimator=groupwise_NAME"),
        (
            ["algorithm.adv_estimator=groupwise_grpo", "+algorithm.groupwise.lens_alpha=-1"],
            r"algorithm\.groupwise\.lens_alpha",
        ),
        (
            [
                "algorithm.adv_estimator=groupwise_grpo",
                "+algorithm.groupwise.amir=true",
                "+algorithm.groupwise.reward_min=0",
                "+algorithm.groupwise.reward_max=1",
            ],
            r"algorithm\.groupwise\.margin",
        ),
        (
            ["algorithm.adv_estimator=groupwise_grpo", "algorithm.use_kl_in_reward=true"],
            r"algorithm\.use_kl_in_reward=true",
        ),
    ],
)
def test_a_bad_option_is_one_line_before_any_worker_starts(overrides, message) -> None:
    config = trainer_config(*overrides)
    with pytest.raises(ValueError, match=message) as error:
        get_trainer_cls("groupwise")(config)  # __init__ only: _setup starts the workers
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("mode", ["sync", "colocate_async"])
@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["algorithm.adv_estimator=groupwise_lens"], r"=groupwise_lens needs the rollout polic"),
        (
            ["algorithm.adv_estimator=groupwise_grpo", "+algorithm.groupwise.amir=true"],
            r"=groupwise_grpo needs the rollout policy's log-probs \(LENS's confidences, AMIR's",
        ),
        (
            ["algorithm.adv_estimator=groupwise_grpo", "+algorithm.groupwise.mask_truncated=true"],
            r"^algorithm\.groupwise\.mask_truncated=true needs trainer\.v1\.trainer_mode=groupw",
        ),
        (
            ["algorithm.adv_estimator=groupwise_grpo", "+algorithm.groupwise.lens_alpha=-1"],
            r"^algorithm\.groupwise\.lens_alpha must be",
        ),
    ],
)
def test_verl_own_trainers_refuse_what_they_cannot_run_at_start(mode, options, message) -> None:
    """verl's own v1 trainers (built by name, as main_ppo does) refuse a groupwise estimator
    whose options need groupwise's trainer mode in their __init__, before any worker starts,
    in one line naming the mode that runs them."""
    config = trainer_config(*options)
    config.trainer.v1.trainer_mode = mode
    with pytest.raises(ValueError, match=message) as error:
        get_trainer_cls(mode)(config)
    assert "\n" not in str(error.value)


def test_what_verl_own_trainers_can_run_passes_the_start_check() -> None:
    check_verl_trainer(trainer_config("algorithm.adv_estimator=groupwise_grpo"))
    check_verl_trainer(trainer_config("algorithm.adv_estimator=grpo"))


def test_lambda_is_updated_on_the_driver_from_verl_logged_pg_loss(transfer_queue) -> None:
    partition = "adv-lambda"
    meta, _, _ = put_batch(partition)
    config = trainer_config(
        "algorithm.adv_estimator=groupwise_grpo",
        "+algorithm.groupwise.amir=true",
        "+algorithm.groupwise.margin=0.5",
        "+algorithm.groupwise.lambda_init=0.02",
    )
    trainer, metrics, _ = run_compute_advantage(config, meta, partition)
    assert metrics["groupwise/amir/lambda"] == 0.02

    class ActorGroup:  # the driver's handle on the actor workers: what update_actor returns
        def update_actor(self, batch):
            return {"metrics": {"pg_loss": [10.0, 10.0], "mfu": [0.0]}}

    trainer.actor_rollout_wg = ActorGroup()
    trainer.distillation_config = None
    trainer._update_actor(meta, metrics)
    # ratio = 0.02 * L_pref / 10 < 0.30: lambda grows by 1.25 (docs/algorithms.md §2)
    assert metrics["actor/pg_loss"] == 10.0
    assert trainer.algorithm.lambda_reg.value == pytest.approx(0.025)
    assert np.isclose(metrics["groupwise/amir/preference_loss"], np.log(2), atol=0.2)


def test_the_plugin_registers_the_trainer_mode_once_verl_v1_is_imported() -> None:
    import subprocess
    import sys

    code = (
        "import sys, verl; assert 'groupwise.integrations.verl.trainer' not in sys.modules; "
        "from verl.trainer.ppo.v1 import get_trainer_cls; "
        "print(get_trainer_cls('groupwise').__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "groupwise.integrations.verl.trainer"


def test_the_actor_loss_is_amir_ppo_loss_with_verl_actor_settings() -> None:
    from test_verl_integration import micro_batch
    from verl.workers.utils.losses import ppo_loss

    from groupwise.integrations.verl.loss import amir_ppo_loss

    config = trainer_config(
        "algorithm.adv_estimator=groupwise_grpo",
        "+algorithm.groupwise.amir=true",
        "+algorithm.groupwise.margin=0.5",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        "actor_rollout_ref.actor.clip_ratio_high=0.28",
    )
    loss_fn = get_trainer_cls("groupwise")(config).actor_loss()
    assert loss_fn.func is amir_ppo_loss
    assert loss_fn.keywords["config"].loss_agg_mode == "seq-mean-token-mean"
    assert loss_fn.keywords["config"].clip_ratio_high == 0.28

    torch.manual_seed(0)
    mask = torch.ones(4, 5)
    old = -torch.rand(4, 5)
    weights = torch.tensor([0.3, -0.3, 0.1, -0.1])
    grads = []
    for fn in (loss_fn, partial_ppo_loss(loss_fn, ppo_loss)):
        theta = old.clone().requires_grad_(True)
        data, output = micro_batch(
            torch.arange(4), theta, old, mask, torch.tensor([1.0, -1, 1, -1]), weights, 3, 1, 4
        )
        loss, _ = fn(model_output=output, data=data)
        loss.backward()
        grads.append(theta.grad.clone())
    # the AMIR term adds w_k / B * d l_k / d theta: w_k / (B |o_k|) on each of row k's tokens
    expected = (weights / 4)[:, None] / mask.sum(dim=1, keepdim=True) * mask
    assert torch.allclose(grads[0] - grads[1], expected, atol=1e-6)


def partial_ppo_loss(amir_loss, ppo_loss):
    """verl's own ppo_loss with the same ActorConfig as the trainer mode's AMIR loss."""
    config = amir_loss.keywords["config"]
    return lambda model_output, data: ppo_loss(config, model_output, data)


def test_verl_rollout_correction_runs_as_in_verl(transfer_queue) -> None:
    partition = "adv-is"
    meta, real, old = put_batch(partition, rollout=True)
    config = trainer_config(
        "algorithm.adv_estimator=groupwise_grpo",
        "algorithm.rollout_correction.rollout_is=token",
        "algorithm.rollout_correction.rollout_is_threshold=2.0",
    )
    trainer = get_trainer_cls("groupwise")(config)
    metrics: dict = {}
    out = trainer._compute_advantage(meta, metrics)
    data = tq.kv_batch_get(
        keys=out.keys, partition_id=partition, select_fields=["rollout_is_weights"]
    )
    weights = data["rollout_is_weights"].unbind()
    for row, fields in enumerate(real):
        ratio = torch.exp(old[row] - fields["rollout_log_probs"]).clamp(max=2.0)
        assert torch.allclose(weights[row], ratio, atol=1e-5)
    assert any(key.startswith("rollout_corr/") for key in metrics)


def test_verl_filter_groups_hands_the_advantage_step_only_kept_groups(transfer_queue) -> None:
    # verl's own DAPO filter (algorithm.filter_groups, its sync replay buffer) in the trainer
    # mode: q2's answers are all wrong (acc constant), so verl evicts it; q1 alone fills the
    # batch of 1, so the sync buffer (unlike the async one) asks for no fresh prompt; the
    # advantage step then sees q1 alone and computes its targets as groupwise does.
    partition = "dapo"
    config = trainer_config(
        "algorithm.adv_estimator=groupwise_lens",
        "algorithm.filter_groups.enable=true",
        "algorithm.filter_groups.metric=acc",
    )
    trainer = get_trainer_cls("groupwise")(config)
    assert trainer.replay_buffer.filter_groups_metric == "acc"
    refills: list[int] = []
    trainer.replay_buffer.refill_fn = refills.append  # verl would submit fresh prompts here
    tokenizer = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir())
    prompt = tokenizer("Question: how many?", return_tensors="pt").input_ids[0]
    keys, fields, tags = [], [], []
    for uid, answers in ANSWERS.items():
        for session, (text, score) in enumerate(answers):
            response = tokenizer(text, return_tensors="pt").input_ids[0]
            rm_scores = torch.zeros(len(response))
            rm_scores[-1] = score
            keys.append(f"{uid}{partition}_{session}_0")
            fields.append(
                {
                    "uid": f"{uid}{partition}",
                    "prompts": prompt,
                    "responses": response,
                    "input_ids": torch.cat([prompt, response]),
                    "attention_mask": torch.ones(len(prompt) + len(response), dtype=torch.int64),
                    "response_mask": torch.ones(len(response), dtype=torch.int64),
                    "loss_mask": torch.ones(len(response), dtype=torch.int64),
                    "rm_scores": rm_scores,
                    "extra_fields": {"reward_extra_info": {"acc": score > 0}},
                }
            )
            tags.append({"status": "success", "seq_len": len(prompt) + len(response)})
    tq.kv_batch_put(
        keys=keys, partition_id=partition, fields=list_of_dict_to_tensordict(fields), tags=tags
    )
    finished = {"is_prompt": True, "status": "finished", "global_steps": 1}
    tq.kv_batch_put(
        keys=[f"{uid}{partition}" for uid in ANSWERS], partition_id=partition, tags=[finished] * 2
    )
    meta, evicted = trainer.replay_buffer.sample(
        global_steps=1, partition_id=partition, batch_size=1
    )
    assert refills == []
    assert [v for k, v in evicted.items() if k.endswith("/filter_groups/evicted_samples")] == [1]
    assert sorted(meta.keys) == sorted(k for k in keys if k.startswith("q1"))
    generator = torch.Generator().manual_seed(0)
    old = [
        -torch.rand(len(fields[keys.index(k)]["responses"]), generator=generator) for k in meta.keys
    ]
    tq.kv_batch_put(
        keys=meta.keys,
        partition_id=partition,
        fields=list_of_dict_to_tensordict([{"old_log_probs": row} for row in old]),
    )
    metrics: dict = {}
    out = trainer._compute_advantage(meta, metrics)
    data = tq.kv_batch_get(keys=out.keys, partition_id=partition, select_fields=["advantages"])
    real = [fields[keys.index(k)] for k in meta.keys]
    targets, order, _ = expected_targets({"advantage": "lens"}, real, old)
    advantages = data["advantages"].unbind()
    for position, row in enumerate(order):
        assert float(advantages[row][0]) == pytest.approx(float(targets.advantages[position]))
    assert metrics["groupwise/groups/mixed"] == 1.0
    assert metrics["groupwise/groups/all_wrong"] == 0.0
