"""verl's own Hydra configuration for the verl tests (tests/test_verl_*.py)."""

from __future__ import annotations

import os
from typing import Any


def verl_config(*overrides: str) -> Any:
    """verl 0.9.1's ppo_trainer config (its DictConfig, composed as `main_ppo` does) with the
    micro-batch sizes its validation asks for and then `overrides` (Hydra syntax)."""
    import verl
    from hydra import compose, initialize_config_dir

    folder = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=folder, version_base=None):
        return compose(
            config_name="ppo_trainer",
            overrides=[
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
                "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
                *overrides,
            ],
        )
