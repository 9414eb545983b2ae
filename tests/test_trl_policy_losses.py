"""groupwise's CISPO, SAPO, high-entropy token mask, entropy bonus and adaptive entropy
coefficient against TRL 1.16's own code on the same tensors: GRPOTrainer._compute_loss (its
loss_type "cispo" / "sapo", top_entropy_quantile, entropy_coef, use_adaptive_entropy) and
GRPOTrainer.get_high_entropy_mask, with the model's forward pass replaced by given log-probs and
entropies (docs/algorithms.md, "Policy losses: CISPO, GMPO, SAPO", "Entropy controls").

Where TRL's formula is not the paper's, the test says so (docs/open-questions.md):
- CISPO: TRL clips the IS weight at epsilon_high as an absolute ceiling and never below
  (MiniMax-M1: clip(rho, 1 - eps_low^IS, 1 + eps_high^IS)); groupwise's cispo_eps_high is the
  paper's, so TRL's epsilon_high = 1 + cispo_eps_high, with cispo_eps_low null. TRL's CISPO
  aggregates as DAPO (tokens of the batch): groupwise's aggregation "dapo".
- The entropy bonus: TRL's is the token mean of each micro-batch whatever loss_type; groupwise
  aggregates it as the policy loss ("dapo" here, equal on one micro-batch).
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from groupwise.algorithms import (
    AdaptiveEntropy,
    LossSettings,
    SurrogateParams,
    high_entropy_mask,
    loss_terms,
)


class _OneProcess:
    """What TRL's loss asks of its accelerator, for one process."""

    num_processes = 1
    sync_gradients = True

    def pad_across_processes(self, tensor, dim=0, pad_index=0):
        return tensor

    def gather(self, tensor):
        return tensor

    gather_for_metrics = gather

    def reduce(self, tensor, reduction="sum"):
        return tensor


def _trainer(tmp_path, cls=GRPOTrainer, config_cls=GRPOConfig, **config) -> GRPOTrainer:
    """A GRPOTrainer holding what _compute_loss reads (TRL's __init__ sets the same attributes
    from the same config), without a model."""
    args = config_cls(
        output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False, **config
    )
    trainer = cls.__new__(cls)
    trainer.args, trainer.accelerator = args, _OneProcess()
    trainer.model = SimpleNamespace(training=True)
    trainer.loss_type, trainer.beta = args.loss_type, args.beta
    trainer.epsilon_low = args.epsilon
    trainer.epsilon_high = args.epsilon if args.epsilon_high is None else args.epsilon_high
    trainer.importance_sampling_level = args.importance_sampling_level
    trainer.top_entropy_quantile, trainer.entropy_coef = (
        args.top_entropy_quantile,
        args.entropy_coef,
    )
    trainer.use_adaptive_entropy = args.use_adaptive_entropy
    trainer._entropy_bonus_enabled = args.entropy_coef != 0.0 or args.use_adaptive_entropy
    trainer._last_world_entropy, trainer._entropy_window_stats = float("inf"), None
    trainer.off_policy_mask_threshold, trainer.use_vllm = None, False
    trainer.aux_loss_enabled, trainer.current_gradient_accumulation_steps = False, 1
    trainer.max_completion_length = args.max_completion_length
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    return trainer


def _batch(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    old = -torch.rand(4, 5, generator=generator, dtype=torch.float64) * 2 - 0.1
    logp = (old + 0.8 * torch.randn(4, 5, generator=generator, dtype=torch.float64)).clamp(max=0)
    entropy = torch.rand(4, 5, generator=generator, dtype=torch.float64) * 3
    adv = torch.tensor([1.1, -0.6, 0.0, -1.4], dtype=torch.float64)
    mask = torch.arange(5)[None, :] < torch.tensor([5, 2, 4, 3])[:, None]
    return logp.requires_grad_(), old, entropy.requires_grad_(), adv, mask


def _trl_loss(trainer: GRPOTrainer, logp, old, entropy, adv, mask):
    """TRL's _compute_loss on these tensors (its forward pass replaced by them)."""
    if type(trainer) is GRPOTrainer:
        trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logp, entropy, None)
    inputs = {
        "prompt_ids": torch.zeros(4, 1, dtype=torch.long),
        "prompt_mask": torch.ones(4, 1, dtype=torch.long),
        "completion_ids": torch.zeros(4, 5, dtype=torch.long),
        "completion_mask": mask.long(),
        "advantages": adv,
        "old_per_token_logps": old,
        "num_items_in_batch": mask.sum(),
    }
    return trainer._compute_loss(None, inputs)


def _grads(loss, *leaves):
    return torch.autograd.grad(
        loss, leaves, allow_unused=True, materialize_grads=True, retain_graph=True
    )


def _compare(ours, theirs, leaves):
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-12, abs=1e-14)
    for mine, trl in zip(_grads(ours, *leaves), _grads(theirs, *leaves), strict=True):
        assert torch.allclose(mine, trl, rtol=1e-12, atol=1e-14)
    assert _grads(ours, leaves[0])[0].abs().sum() > 0


@pytest.mark.parametrize("ceiling", [1.3, 5.0])
def test_peer_parity_cispo_equals_trls(tmp_path, ceiling: float) -> None:
    logp, old, entropy, adv, mask = _batch()
    trainer = _trainer(tmp_path, loss_type="cispo", epsilon_high=ceiling)
    theirs = _trl_loss(trainer, logp, old, entropy, adv, mask)
    settings = LossSettings(
        aggregation="dapo",
        policy_loss="cispo",
        surrogate=SurrogateParams(cispo_eps_low=None, cispo_eps_high=ceiling - 1.0),
    )
    ours = loss_terms(logp, mask, adv, settings, old_logp=old).policy
    _compare(ours, theirs, (logp,))


def test_peer_parity_sapo_equals_trls(tmp_path) -> None:
    # TRL's torch.where of two Python floats makes the temperatures float32 (1.05 becomes
    # 1.0499999523); temperatures that float32 holds exactly compare at float64 precision
    logp, old, entropy, adv, mask = _batch(1)
    trainer = _trainer(
        tmp_path, loss_type="sapo", sapo_temperature_pos=0.75, sapo_temperature_neg=1.25
    )
    theirs = _trl_loss(trainer, logp, old, entropy, adv, mask)
    surrogate = SurrogateParams(sapo_tau_pos=0.75, sapo_tau_neg=1.25)
    settings = LossSettings(aggregation="grpo", policy_loss="sapo", surrogate=surrogate)
    ours = loss_terms(logp, mask, adv, settings, old_logp=old).policy
    _compare(ours, theirs, (logp,))


@pytest.mark.parametrize("quantile", [0.0, 0.3, 0.8, 1.0])
def test_peer_parity_high_entropy_mask_equals_trls(tmp_path, quantile: float) -> None:
    _, _, entropy, _, mask = _batch(2)
    trainer = _trainer(tmp_path)
    theirs = trainer.get_high_entropy_mask(entropy.detach(), mask.long(), 1 - quantile)
    assert high_entropy_mask(entropy, mask, quantile).equal(theirs)


@pytest.mark.parametrize("loss_type", ["dapo", "cispo"])
def test_peer_parity_top_entropy_tokens_and_entropy_bonus_equal_trls(tmp_path, loss_type) -> None:
    # TRL's "dapo" is groupwise's clip + "dapo" aggregation; the bonus: the token mean
    logp, old, entropy, adv, mask = _batch(3)
    trainer = _trainer(tmp_path, loss_type=loss_type, top_entropy_quantile=0.4, entropy_coef=0.03)
    theirs = _trl_loss(trainer, logp, old, entropy, adv, mask)
    settings = LossSettings(
        eps_low=0.2,
        eps_high=0.2,
        aggregation="dapo",
        policy_loss="clip" if loss_type == "dapo" else "cispo",
        surrogate=SurrogateParams(cispo_eps_low=None, cispo_eps_high=trainer.epsilon_high - 1),
        top_entropy_quantile=0.4,
        entropy_bonus=True,
    )
    terms = loss_terms(logp, mask, adv, settings, old_logp=old, entropy=entropy)
    ours = terms.grpo(0.0, entropy_coef=0.03)
    _compare(ours, theirs, (logp, entropy))


def test_peer_parity_adaptive_entropy_coefficient_equals_trls(tmp_path) -> None:
    # five optimizer steps of one micro-batch each; entropies around the target 1.5
    trainer = _trainer(
        tmp_path,
        loss_type="dapo",
        use_adaptive_entropy=True,
        entropy_coef=0.02,
        entropy_target=1.5,
        entropy_coef_delta=0.01,
        entropy_coef_min=0.0,
        entropy_coef_max=0.035,
    )
    ours = AdaptiveEntropy(init=0.02, target=1.5, delta=0.01, min_value=0.0, max_value=0.035)
    logp, old, entropy, adv, mask = _batch(4)
    for scale in (0.5, 0.6, 2.0, 1.0, 3.0):
        step_entropy = (entropy.detach() * scale).requires_grad_()
        applied = ours.applied
        theirs = _trl_loss(trainer, logp, old, step_entropy, adv, mask)
        settings = LossSettings(aggregation="dapo", entropy_bonus=True)
        terms = loss_terms(logp, mask, adv, settings, old_logp=old, entropy=step_entropy)
        _compare(terms.grpo(0.0, entropy_coef=applied), theirs, (logp, step_entropy))
        ours.observe(float(terms.clip["entropy"]))
        assert ours.value == pytest.approx(trainer.entropy_coef, abs=1e-15)


def test_groupwise_config_reads_trls_own_options(tmp_path) -> None:
    from groupwise.integrations.trl import GroupwiseGRPOConfig

    args = GroupwiseGRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        report_to=[],
        loss_type="cispo",
        epsilon_high=5.0,
        top_entropy_quantile=0.2,
        use_adaptive_entropy=True,
        entropy_target=1.5,
        advantage_estimator="reinforce_plus_plus_baseline",
    )
    options = args.algorithm_options()
    assert (options.policy_loss, options.cispo_eps_high) == ("cispo", 4.0)
    assert options.top_entropy_quantile == 0.2 and options.entropy_adaptive
    assert options.entropy_target == 1.5
    assert options.advantage == "reinforce_plus_plus_baseline"
    plain = GroupwiseGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    assert plain.algorithm_options().policy_loss == "clip"


def test_gmpo_through_the_core_in_groupwise_trainer(tmp_path, monkeypatch) -> None:
    # GroupwiseGRPOTrainer(gmpo=True): TRL's "grpo" loss with its clipped surrogate replaced
    # by groupwise's GMPO; TRL's own entropy bonus stays
    from groupwise.integrations.trl import GroupwiseGRPOConfig, GroupwiseGRPOTrainer

    logp, old, entropy, adv, mask = _batch(5)
    monkeypatch.setattr(
        GRPOTrainer, "_get_per_token_logps_and_entropies", lambda *a, **k: (logp, entropy, None)
    )
    trainer = _trainer(
        tmp_path,
        cls=GroupwiseGRPOTrainer,
        config_cls=GroupwiseGRPOConfig,
        loss_type="grpo",
        gmpo=True,
        gmpo_epsilon_low=0.2,
        gmpo_epsilon_high=0.3,
        entropy_coef=0.02,
    )
    trainer._gmpo, trainer._loss_pass, trainer._generation = True, None, None
    trainer._surrogate = trainer.args.algorithm_options().surrogate_params()
    theirs = _trl_loss(trainer, logp, old, entropy, adv, mask)
    surrogate = SurrogateParams(gmpo_eps_low=0.2, gmpo_eps_high=0.3)
    settings = LossSettings(policy_loss="gmpo", surrogate=surrogate)
    terms = loss_terms(logp, mask, adv, settings, old_logp=old, entropy=entropy)
    # TRL's bonus: the token mean of the micro-batch
    token_mean = (entropy * mask).sum() / mask.sum()
    ours = terms.policy - 0.02 * token_mean
    _compare(ours, theirs, (logp, entropy))
    with pytest.raises(ValueError, match="gmpo=True needs loss_type='grpo'"):
        GroupwiseGRPOConfig(output_dir=str(tmp_path), use_cpu=True, gmpo=True)
