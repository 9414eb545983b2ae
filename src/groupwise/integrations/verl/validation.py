"""Unbiased pass@k in verl's validation (docs/guides/verl.md, "Validation: unbiased pass@k").

verl 0.9.1's `_validate` reports best@N by bootstrap, a biased estimate of pass@N (1 correct of
4 gives best@4 below 1.0; verl#7240). `validation_pass_at_k` computes the unbiased pass@k of
docs/algorithms.md §4 with bootstrap intervals over problems from what `_validate` collects:
per sample its data source, its prompt's uid, and its correctness (`acc` of
reward_extra_infos_dict when the reward returns it, else reward > 0: `correctness`).

Wiring: process_validation_metrics sees no config, and groupwise's plugin loads at `import verl`
in every Ray worker before any config exists; wrapping verl's trainers there would import
them in every worker of every run. So it is opt-in, in the processes that build the trainer:
`with_pass_at_k(trainer_class)` wraps a trainer's `_val_metrics_update` (same inputs as
process_validation_metrics, verl's flat keys out), and `install` does it for verl's two
trainers, as Ray's worker_process_setup_hook:

    +ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=groupwise.integrations.verl.validation.install
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from groupwise.metrics import doubling_ks, pass_at_k_table


def correctness(infos: Mapping[str, Sequence[Any]]) -> tuple[str, list[bool]]:
    """(variable, per-sample correctness) from verl's reward_extra_infos_dict: ("acc", acc != 0)
    when the reward returned `acc` for every sample, else ("reward", reward > 0)."""
    acc = infos.get("acc")
    if acc is not None and len(acc) > 0 and all(value is not None for value in acc):
        return "acc", [bool(value) for value in acc]
    return "reward", [float(value) > 0 for value in infos["reward"]]


def validation_pass_at_k(
    data_sources: Sequence[str],
    uids: Sequence[str],
    correct: Sequence[bool],
    ks: Sequence[int] | None = None,
    seed: int = 0,
    variable: str = "acc",
) -> dict[str, float]:
    """Unbiased pass@k per data source, with 95 % bootstrap intervals (docs/algorithms.md §4;
    docs/guides/verl.md, "Validation: unbiased pass@k").

    Args:
        data_sources, uids, correct: one entry per sample (length S each), as verl's
            `_validate` collects them; the samples of a problem share (data source, uid).
        ks: the values of k (each <= the samples per problem); None: metrics.doubling_ks(n).
        seed: seed of the bootstrap over problems (1000 resamples).
        variable: the name of the correctness signal in the keys (acc, or reward for reward > 0).

    Returns:
        {"val-core/{source}/{variable}/pass@{n}": mean, "val-aux/{source}/{variable}/pass@{k}"
        for the other ks, and ".../pass@{k}/low", ".../pass@{k}/high" (val-aux)}. verl's own
        metric names are mean@, std@, best@, worst@ and maj@, so pass@ never collides with
        them; pass@{n}, like verl's @N metrics, is the val-core one.

    Raises:
        ValueError: the lengths differ, or the problems of a data source have differing
        sample counts (pass@k averages over problems of the same n).
    """
    if not len(data_sources) == len(uids) == len(correct):
        raise ValueError(
            f"data_sources, uids and correct must have one entry per sample, got lengths "
            f"{len(data_sources)}, {len(uids)}, {len(correct)}"
        )
    problems: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for source, uid, ok in zip(data_sources, uids, correct, strict=True):
        problems[str(source)][str(uid)].append(bool(ok))
    metrics: dict[str, float] = {}
    for source, by_uid in problems.items():
        metrics.update(_source_metrics(source, by_uid, ks, seed, variable))
    return metrics


def _source_metrics(
    source: str, by_uid: Mapping[str, list[bool]], ks: Sequence[int] | None, seed: int, name: str
) -> dict[str, float]:
    sizes = sorted({len(samples) for samples in by_uid.values()})
    if len(sizes) > 1:
        raise ValueError(
            f"data source {source!r}: problems have differing sample counts {sizes}; "
            "pass@k needs the same n for every problem of a data source"
        )
    n = sizes[0]
    chosen = doubling_ks(n) if ks is None else list(ks)
    table = pass_at_k_table([sum(s) for s in by_uid.values()], n, chosen, seed=seed)
    metrics: dict[str, float] = {}
    for k in chosen:
        key = f"{source}/{name}/pass@{k}"
        metrics[f"{'val-core' if k == n else 'val-aux'}/{key}"] = table[f"pass@{k}"]
        low, high = table[f"pass@{k}_ci"]
        metrics[f"val-aux/{key}/low"] = low
        metrics[f"val-aux/{key}/high"] = high
    return metrics


def failures_as_wrong(
    data_sources: list[str],
    uids: list[str],
    correct: list[bool],
    expected: Mapping[tuple[str, str], int] | None,
) -> tuple[list[str], list[str], list[bool]]:
    """The samples with, for each (data source, uid) of `expected` (verl v1's
    expected_acc_counts: samples asked for), the missing ones (failed sessions) added as
    wrong, as verl v1 counts them in `acc`; unchanged when `expected` is None."""
    if not expected:
        return data_sources, uids, correct
    seen = Counter(zip(map(str, data_sources), map(str, uids), strict=True))
    missing = [key for key, want in expected.items() for _ in range(want - seen[key])]
    return (
        data_sources + [source for source, _ in missing],
        uids + [uid for _, uid in missing],
        correct + [False] * len(missing),
    )


def with_pass_at_k(trainer_class: type, seed: int = 0) -> type:
    """Wrap `trainer_class._val_metrics_update` (verl's RayPPOTrainer, or the v1 trainer) so
    its flat dict also holds `validation_pass_at_k`'s keys; verl's own keys and values are
    unchanged. Idempotent; returns the class."""
    original = trainer_class._val_metrics_update
    if getattr(original, "groupwise_pass_at_k", False):
        return trainer_class

    @functools.wraps(original)
    def update(self: Any, data_sources: Any, sample_uids: Any, infos: Any, *args: Any, **kw: Any):
        metrics = original(self, data_sources, sample_uids, infos, *args, **kw)
        variable, correct = correctness(infos)
        samples = failures_as_wrong(
            list(data_sources), list(sample_uids), correct, kw.get("expected_acc_counts")
        )
        return {**metrics, **validation_pass_at_k(*samples, seed=seed, variable=variable)}

    update.groupwise_pass_at_k = True  # type: ignore[attr-defined]
    trainer_class._val_metrics_update = update
    return trainer_class


def install() -> None:
    """Wrap verl 0.9.1's RayPPOTrainer and v1 PPOTrainer (`with_pass_at_k`), for Ray's
    worker_process_setup_hook: verl's main_ppo builds its trainer inside a Ray actor."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    with_pass_at_k(RayPPOTrainer)
    with_pass_at_k(PPOTrainer)
