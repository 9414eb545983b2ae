"""groupwise inside verl 0.9.1, through verl's own functions (docs/guides/verl.md): the plugin that
`import verl` loads, the estimators through verl's `compute_advantage` on shuffled batches, and
the AMIR loss through verl's real `ppo_loss` on micro-batches cut through groups. Run in
.venv-verl (scripts/setup_verl.sh)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from verl import DataProto
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.utils import tensordict_utils as tu
from verl.workers.config import FSDPActorConfig
from verl.workers.utils.losses import ppo_loss

from groupwise.algorithms import ADVANTAGE_ESTIMATORS
from groupwise.integrations.verl.advantages import algorithm_for, targets_for_rows, verl_estimator
from groupwise.integrations.verl.batch import batch_fields, observe_losses
from groupwise.integrations.verl.loss import COEFFICIENTS, amir_ppo_loss, amir_row_weights
from groupwise.integrations.verl.options import build_algorithm

G = 4


def batch(scores: list[float], seed: int = 0, length: int = 6):
    """verl rows of len(scores) / G prompts (uid q0, q1, ...), a random response mask (each
    response 2..length tokens), the score on the last response token as verl's reward
    managers put it, and a random permutation (verl's balance_batch reorders rows)."""
    g = torch.Generator().manual_seed(seed)
    rows = len(scores)
    lengths = torch.randint(2, length + 1, (rows,), generator=g)
    mask = (torch.arange(length) < lengths[:, None]).float()
    rewards = torch.zeros(rows, length)
    rewards[torch.arange(rows), lengths - 1] = torch.tensor(scores)
    uid = np.array([f"q{row // G}" for row in range(rows)], dtype=object)
    logps = -torch.rand(rows, length, generator=g) * 2
    return rewards, mask, uid, logps, torch.randperm(rows, generator=g)


def verl_advantages(estimator: str, config: AlgoConfig, rewards, mask, uid, perm) -> torch.Tensor:
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards[perm], "response_mask": mask[perm]},
        non_tensors={"uid": uid[perm.numpy()]},
    )
    out = compute_advantage(
        data, estimator, norm_adv_by_std_in_grpo=config.norm_adv_by_std_in_grpo, config=config
    )
    return out.batch["advantages"]


SCORES = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]


def test_import_verl_loads_the_plugin_and_registers_every_groupwise_estimator() -> None:
    from groupwise.integrations.verl import plugin

    assert "groupwise.integrations.verl.plugin" in sys.modules and plugin.FAILURE is None
    for name in ADVANTAGE_ESTIMATORS:
        assert f"groupwise_{name}" in ADV_ESTIMATOR_REGISTRY


@pytest.mark.parametrize(
    ("blocked", "call", "what", "key"),
    [
        (
            "groupwise.integrations.verl.advantages",
            "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
            "get_adv_estimator_fn('groupwise_lens')(None, None)",
            "plugin",
            "algorithm.adv_estimator=groupwise_lens",
        ),
        (
            "groupwise.integrations.verl.trainer",
            "from verl.trainer.ppo.v1 import get_trainer_cls\nget_trainer_cls('groupwise')(None)",
            "trainer mode",
            "trainer.v1.trainer_mode=groupwise",
        ),
    ],
)
def test_a_plugin_that_cannot_load_says_so_and_what_it_registers_raises_the_cause(
    blocked: str, call: str, what: str, key: str
) -> None:
    # verl logs a failing plugin at debug level only; ours logs an error (shown with no logging
    # set up) and registers estimators / the trainer mode that raise the cause when a run asks
    code = (
        "import sys\n"
        f"sys.modules[{blocked!r}] = None\n"  # its import fails
        "import verl\n"
        "try:\n"
        + "".join(f"    {line}\n" for line in call.splitlines())
        + "except RuntimeError as error:\n"
        "    print('raised:', error)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert f"groupwise's verl {what} failed to load: ModuleNotFoundError" in run.stderr
    assert (
        f"raised: {key}: groupwise's verl {what} failed to load: ModuleNotFoundError"
    ) in run.stdout


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_groupwise_grpo_equals_verl_grpo_on_shuffled_rows(norm_by_std: bool) -> None:
    rewards, mask, uid, _, perm = batch(SCORES)
    config = AlgoConfig(adv_estimator="grpo", norm_adv_by_std_in_grpo=norm_by_std)
    ours = verl_advantages("groupwise_grpo", config, rewards, mask, uid, perm)
    theirs = verl_advantages("grpo", config, rewards, mask, uid, perm)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)
    # by hand, group q0 = [1, 0, 0, 0]: mean 1/4, unbiased std 1/2 (Dr.GRPO: no division)
    first = (perm == 0).nonzero().item()
    expected = 0.75 / (0.5 + 1e-6) if norm_by_std else 0.75
    assert ours[first, 0].item() == pytest.approx(expected, abs=1e-5)
    assert bool((ours[mask[perm] == 0] == 0).all())  # only response tokens carry it


def test_estimators_equal_groupwise_own_targets_on_group_major_rows() -> None:
    rewards, mask, uid, logps, perm = batch(SCORES, seed=1)
    for name in ("grpo", "lens"):
        config = AlgoConfig(adv_estimator=f"groupwise_{name}")
        shuffled = verl_estimator(name)(
            rewards[perm], mask[perm], uid[perm.numpy()], config, old_log_probs=logps[perm]
        )[0][:, 0]
        # the same rows group-major, as groupwise's own trainer gives them
        built = build_algorithm(config, name, G)
        targets, order = targets_for_rows(built, rewards, mask, uid, logps)
        assert torch.equal(order, torch.arange(len(SCORES)))
        torch.testing.assert_close(shuffled, targets.advantages[perm], atol=1e-6, rtol=0)
    # LENS gives the all-wrong group q2 (rows 8-11) advantages, alpha times de-meaned, non-zero
    built = build_algorithm(AlgoConfig(), "lens", G)
    lens = targets_for_rows(built, rewards, mask, uid, logps)[0].advantages
    assert bool((lens[8:12] != 0).all()) and lens[8:12].sum().abs() < 1e-5
    assert bool((lens[12:16] == 0).all())  # all correct: no signal


def test_lens_through_compute_advantage_refuses_in_one_line() -> None:
    rewards, mask, uid, _, perm = batch(SCORES)
    config = AlgoConfig(adv_estimator="groupwise_lens")
    message = r"^algorithm.adv_estimator=groupwise_lens needs the ro.*v1.trainer_mode=groupwise,"
    with pytest.raises(ValueError, match=message):
        verl_advantages("groupwise_lens", config, rewards, mask, uid, perm)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"margin": -1.0}, r"^algorithm.groupwise.margin must be >= 0, got -1.0$"),
        ({"amrgin": 0.5}, r"^algorithm.groupwise.amrgin: no such groupwise option; known: "),
        (
            {"amir": True, "reward_min": 0.0, "reward_max": 1.0},
            r"^algorithm.groupwise.margin=2 is not below 1, the largest gap",
        ),
        ({"amir": True, "ref_free": False}, r"^algorithm.groupwise.ref_free=false needs a ref"),
        ({"lambda_measure": "grad"}, r"^algorithm.groupwise.lambda_measure=grad is not avail"),
        ({"scale": "rows"}, r"^algorithm.groupwise.scale='rows' is not one of verl, group, "),
    ],
)
def test_a_bad_option_is_one_line_naming_the_key(options: dict, message: str) -> None:
    config = {"groupwise": options, "norm_adv_by_std_in_grpo": True}
    with pytest.raises(ValueError, match=message) as raised:
        build_algorithm(config, "grpo", G)
    assert "\n" not in str(raised.value)


def test_lens_with_a_score_that_is_not_correctness_refuses_in_one_line() -> None:
    rewards, mask, uid, logps, _ = batch([0.5, 0.0, 1.0, 0.0])
    with pytest.raises(ValueError, match=r"^advantage estimator 'lens' needs a binary correct"):
        targets_for_rows(build_algorithm(AlgoConfig(), "lens", G), rewards, mask, uid, logps)


# ---------------------------------------------------------------------------------------------
# The AMIR loss through verl's ppo_loss


def micro_batch(rows: torch.Tensor, theta, old, mask, advantages, weights, prompt, dp_size, total):
    """verl's actor micro-batch of `rows` (padded layout: prompts, responses, attention_mask;
    the model's log-probs flat over each sequence's tokens, the response token t's at position
    prompt_len - 1 + t, as no_padding_2_padding reads them), and the model output."""
    b, length = rows.numel(), mask.shape[1]
    attention = torch.cat([torch.ones(b, prompt), mask[rows]], dim=1).long()
    flat = []
    for i, row in enumerate(rows.tolist()):
        n = int(mask[row].sum())
        flat.append(torch.cat([torch.zeros(prompt - 1), theta[row, :n], torch.zeros(1)]))
        assert flat[-1].numel() == int(attention[i].sum())
    data = TensorDict(
        {
            "prompts": torch.ones(b, prompt, dtype=torch.long),
            "responses": torch.ones(b, length, dtype=torch.long),
            "attention_mask": attention,
            "response_mask": mask[rows],
            "old_log_probs": old[rows],
            "advantages": advantages[rows, None] * mask[rows],
            COEFFICIENTS: weights[rows],
        },
        batch_size=[b],
    )
    # as verl's actor sets them on every micro-batch: the mini-batch's, across ranks
    tu.assign_non_tensor(
        data, dp_size=dp_size, batch_num_tokens=int(mask.sum()), global_batch_size=total
    )
    return data, {"log_probs": torch.cat(flat)}


def gradient(splits, theta0, old, mask, advantages, weights, dp_size=1) -> torch.Tensor:
    """The gradient verl's optimizer step sees: micro-batch losses summed per rank, averaged over
    the dp_size ranks (FSDP), for `splits` (a list per rank of row-index micro-batches)."""
    config = FSDPActorConfig(
        strategy="fsdp", ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=2, rollout_n=1
    )
    theta = theta0.clone().requires_grad_(True)
    total = 0.0
    for rank in splits:
        for rows in rank:
            data, output = micro_batch(
                rows, theta, old, mask, advantages, weights, 3, dp_size, mask.shape[0]
            )
            loss, _ = amir_ppo_loss(config, output, data)
            total = total + loss / dp_size
    total.backward()
    return theta.grad


def test_amir_loss_gradient_is_the_same_for_any_split_and_equals_the_objective() -> None:
    rewards, mask, uid, logps, perm = batch(SCORES[:8], seed=3)  # 2 groups
    lam, beta = 0.03, 0.5
    config_dict = {"groupwise": {"amir": True, "margin": 0.5, "lambda_init": lam}}
    # verl's row order: shuffled; coefficients at the rollout policy (old = current: on-policy)
    rewards, mask, uid, logps = rewards[perm], mask[perm], uid[perm.numpy()], logps[perm]
    built = build_algorithm(config_dict, "grpo", G)
    targets, order = targets_for_rows(built, rewards, mask, uid, logps)
    algorithm = built.algorithm
    assert targets.num_pairs == 3 + 3  # q0: 1 correct x 3 wrong; q1: 3 correct x 1 wrong
    coefficients = torch.empty(8)
    coefficients[order] = targets.coefficients
    advantages = torch.empty(8)
    advantages[order] = targets.advantages
    weights = amir_row_weights(coefficients, algorithm.lambda_reg.value)
    theta0 = logps * mask
    one = gradient([[torch.arange(8)]], theta0, logps, mask, advantages, weights)
    cuts = [
        [[torch.tensor([5, 0, 7]), torch.tensor([1]), torch.tensor([6, 2, 4, 3])]],
        [[torch.tensor([3, 6])], [torch.tensor([0, 1, 2, 4, 5, 7])]],  # 2 ranks, uneven
        [[torch.tensor([i])] for i in (7, 3, 1, 0, 6, 5, 4, 2)],  # 8 ranks, one row each
    ]
    for split in cuts:
        got = gradient(split, theta0, logps, mask, advantages, weights, dp_size=len(split))
        torch.testing.assert_close(got, one, atol=1e-6, rtol=1e-5)

    # written out: verl's ppo_loss of the whole batch + lambda * L_pref(theta) by hand, with
    # L_pref = -(1/P) sum_p log sigmoid(beta (l_c - l_r)) over the pairs (reference-free)
    theta = theta0.clone().requires_grad_(True)
    actor = FSDPActorConfig(
        strategy="fsdp", ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=2, rollout_n=1
    )
    data, output = micro_batch(torch.arange(8), theta, logps, mask, advantages, weights, 3, 1, 8)
    verl_only, _ = ppo_loss(actor, output, data)
    mean_logp = (theta * mask).sum(-1) / mask.sum(-1)
    s = rewards.sum(-1)
    pairs = [(c, r) for c in range(8) for r in range(8) if uid[c] == uid[r] and s[c] - s[r] > 0.5]
    assert len(pairs) == 6
    pref = -sum(
        torch.nn.functional.logsigmoid(beta * (mean_logp[c] - mean_logp[r])) for c, r in pairs
    ) / len(pairs)
    (verl_only + lam * pref).backward()
    torch.testing.assert_close(one, theta.grad, atol=1e-6, rtol=1e-5)
    # and the AMIR part is there: without the weights the gradient differs
    none = gradient([[torch.arange(8)]], theta0, logps, mask, advantages, weights * 0)
    assert (none - one).abs().max() > 1e-4


def test_batch_fields_give_the_loss_its_weights_and_verl_the_metrics() -> None:
    rewards, mask, uid, logps, perm = batch(SCORES, seed=4)
    config = {"groupwise": {"amir": True, "margin": 0.5, "lambda_init": 0.01}}
    rewards, mask, uid, logps = rewards[perm], mask[perm], uid[perm.numpy()], logps[perm]
    built = build_algorithm(config, "lens", G)
    fields = batch_fields(built, rewards, mask, uid, logps)
    targets, order = targets_for_rows(built, rewards, mask, uid, logps)
    expected = torch.empty(16)
    expected[order] = amir_row_weights(targets.coefficients, 0.01)
    torch.testing.assert_close(fields.weights, expected)
    torch.testing.assert_close(
        fields.advantages[:, 0],
        verl_estimator("lens")(rewards, mask, uid, config, old_log_probs=logps)[0][:, 0],
    )
    # q0 and q1 mixed, q2 all wrong (LENS moves it), q3 all correct; 1 x 3 + 3 x 1 pairs (LENS's
    # wrong answers differ by less than the margin)
    assert fields.metrics["groupwise/groups/mixed"] == 0.5
    assert fields.metrics["groupwise/groups/all_wrong"] == 0.25
    assert fields.metrics["groupwise/groups/all_wrong_with_gradient"] == 0.25
    assert fields.metrics["groupwise/amir/pairs"] == 6.0
    assert fields.metrics["groupwise/amir/lambda"] == 0.01
    assert fields.pref_loss == pytest.approx(float(targets.pair_losses.mean()))
    # the official rule: ratio 0.01 * 0.69 / 1.0 < 0.30, so lambda grows by 1.25
    assert observe_losses(built, 1.0, 0.69) == pytest.approx(0.0125)
    assert built.algorithm.lambda_reg.value == pytest.approx(0.0125)


def test_groups_of_another_size_are_an_error_naming_both_sizes() -> None:
    """A batch whose groups are not of G = rollout.n would need another Algorithm, and with it
    a fresh lambda: refused, whether the run's algorithm is the trainer's own or verl's
    estimator's (built once per config)."""
    rewards, mask, uid, logps, _ = batch(SCORES)
    config = {"groupwise": {"amir": True, "margin": 0.5}}
    built = build_algorithm(config, "lens", 8)
    message = r"uids give groups of 4 responses, but groupwise's algorithm was built for 8 \(act"
    with pytest.raises(ValueError, match=message):
        batch_fields(built, rewards, mask, uid, logps)
    first = algorithm_for(config, "lens", G)
    assert algorithm_for(dict(config), "lens", G) is first  # the same lambda, call after call
    with pytest.raises(ValueError, match=f"uids give groups of 2 responses, but .* built for {G}"):
        algorithm_for(config, "lens", 2)


def test_truncated_responses_form_no_pair_and_keep_their_group_statistics() -> None:
    """mask_truncated: a truncated response keeps its advantage (its group's mean and std count
    it; the trainer zeroes its response mask) and has no AMIR weight, and the pairs it was in are
    gone; the others keep theirs."""
    rewards, mask, uid, logps, _ = batch(SCORES, seed=4)
    config = {"groupwise": {"amir": True, "margin": 0.5, "lambda_init": 0.01}}
    truncated = torch.zeros(16, dtype=torch.bool)
    truncated[[0, 5]] = True  # q0's only correct response, and a correct one of q1
    kept = batch_fields(build_algorithm(config, "grpo", G), rewards, mask, uid, logps)
    built = build_algorithm(config, "grpo", G)
    cut = batch_fields(built, rewards, mask, uid, logps, None, truncated)
    torch.testing.assert_close(cut.advantages, kept.advantages)
    assert cut.metrics["groupwise/truncated"] == 2 / 16
    # q0 (1 correct, 3 wrong) loses its 3 pairs; q1 (3 correct, 1 wrong) loses 1 of its 3
    assert kept.metrics["groupwise/amir/pairs"] == 6.0
    assert cut.metrics["groupwise/amir/pairs"] == 2.0
    assert bool((cut.weights[:4] == 0).all())
    assert cut.weights[5] == 0 and kept.weights[5] != 0
    assert bool((cut.weights[[4, 6, 7]] != 0).all())


def test_mask_truncated_outside_the_trainer_mode_refuses_in_one_line() -> None:
    """verl's own trainers call the estimator (here as verl's compute_advantage does, with its
    algorithm config) and use their response mask as it is."""
    rewards, mask, uid, _, _ = batch(SCORES)
    config = {"groupwise": {"mask_truncated": True}}
    message = r"^algorithm.groupwise.mask_truncated=true needs trainer.v1.trainer_mode=groupwise:"
    with pytest.raises(ValueError, match=message):
        verl_estimator("grpo")(rewards, mask, uid, config)
