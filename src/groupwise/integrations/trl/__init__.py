"""AMIR-GRPO and LENS inside TRL's GRPOTrainer (optional dependency: pip install "groupwise[trl]").

    from groupwise.integrations.trl import GroupwiseGRPOConfig, GroupwiseGRPOTrainer

    args = GroupwiseGRPOConfig(output_dir="out", amir=True, advantage_estimator="lens", ...)
    trainer = GroupwiseGRPOTrainer(model=..., reward_funcs=[...], args=args, train_dataset=...)
    trainer.train()

A TRL script switches from GRPOConfig / GRPOTrainer by changing the two class names and adding
options; everything TRL wires in (vLLM, DeepSpeed, FSDP, accelerate multi-node, PEFT, its
loggers) is unchanged. `reward_functions` turns groupwise's reward components into TRL reward
functions. Rooms: config.py (the options), trainer.py (the overrides and why), terms.py (the
batch math, calling groupwise.algorithms), rewards.py, heldout.py (`PassAtKCallback`: pass@k
and calibration on held-out problems while training, with TRL's GRPOTrainer too), compat.py
(the guard on TRL's internals).
"""

try:
    import trl  # noqa: F401
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError(
        'groupwise.integrations.trl needs TRL: pip install "groupwise[trl]" (trl>=1.16,<1.17)'
    ) from err

from groupwise.integrations.trl.compat import (
    SUPPORTED_TRL,
    TRLCompatibilityError,
    check_trl_compatibility,
)
from groupwise.integrations.trl.config import GroupwiseGRPOConfig
from groupwise.integrations.trl.heldout import PassAtKCallback
from groupwise.integrations.trl.rewards import reward_functions
from groupwise.integrations.trl.trainer import GroupwiseGRPOTrainer

__all__ = [
    "SUPPORTED_TRL",
    "GroupwiseGRPOConfig",
    "GroupwiseGRPOTrainer",
    "PassAtKCallback",
    "TRLCompatibilityError",
    "check_trl_compatibility",
    "reward_functions",
]
