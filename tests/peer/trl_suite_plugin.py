"""pytest plugin that runs TRL's GRPO tests offline, with GroupwiseGRPOTrainer in place of
GRPOTrainer (tests/peer/trl_grpo_suite.py loads it with `-p trl_suite_plugin`).

Environment (set by trl_grpo_suite.py):
- TRL_SUITE_MODE: `trl` (TRL's own classes), `swap` (GroupwiseGRPOTrainer / GroupwiseGRPOConfig
  with their defaults: AMIR and LENS off) or `amir_lens` (AMIR_LENS_OPTIONS on, and the
  correctness reward below appended to every trainer's reward functions).
- TRL_SUITE_STANDINS: the folder trl_suite_standins.build made; `load_dataset` of a
  trl-internal-testing dataset reads its local copy (the models come from the hub cache there,
  through HF_HOME, which trl_grpo_suite.py sets).

The swap replaces the names GRPOTrainer and GRPOConfig in every collected test module (TRL's
tests import them with `from trl import ...`); `trl.GRPOTrainer` itself stays TRL's, which the
adapter's compatibility check reads.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import datasets
import pytest
from trl import import_utils
from trl_suite_standins import dataset_folder

from groupwise.integrations.trl import GroupwiseGRPOConfig, GroupwiseGRPOTrainer

MODES = ("trl", "swap", "amir_lens")
MODE = os.environ.get("TRL_SUITE_MODE", "trl")
if MODE not in MODES:
    raise pytest.UsageError(f"TRL_SUITE_MODE={MODE!r} is not one of {', '.join(MODES)}")
STANDINS = Path(os.environ.get("TRL_SUITE_STANDINS", ""))

CORRECTNESS_REWARD = "groupwise_correct"
"""Name of the binary reward function mode amir_lens appends (LENS's correctness reward)."""

# Mode amir_lens: GroupwiseGRPOConfig options set on every config a test builds, unless the test
# sets the option itself. The adapter's options are being renamed: when they
# are, edit this dict only.
AMIR_LENS_OPTIONS: dict[str, Any] = {
    "amir": True,
    "amir_margin": 0.5,  # below the correctness reward's gap of 1: mixed groups yield pairs
    "advantage_estimator": "lens",
    "correctness_reward": CORRECTNESS_REWARD,
    "correctness_value": 1.0,
}

SHIMS: list[str] = []
"""What the plugin papers over between the TRL checkout's tests and the installed TRL."""

if not hasattr(import_utils, "is_joblib_available"):
    # tests/testing_utils.py of the checkout imports it; the installed TRL dropped it (it only
    # gates sklearn tests, none of which are GRPO's).
    import_utils.is_joblib_available = lambda: False
    SHIMS.append("trl.import_utils.is_joblib_available -> False (missing in the installed TRL)")


def groupwise_correct(completions: list[Any], **_: Any) -> list[float]:
    """A binary correctness reward for any completion: 1.0 when its text has an even number of
    characters, else 0.0. Arbitrary, but binary and about half correct on a random policy, so
    that TRL's layouts get mixed, all-correct and all-wrong groups."""

    def text(completion: Any) -> str:
        if isinstance(completion, list):  # conversational: the messages of the completion
            return "".join(str(message.get("content", "")) for message in completion)
        return str(completion)

    return [float(len(text(completion)) % 2 == 0) for completion in completions]


def _redirect_load_dataset(load: Callable[..., Any]) -> Callable[..., Any]:
    def load_dataset(path: str, *args: Any, **kwargs: Any) -> Any:
        local = dataset_folder(STANDINS, path) if isinstance(path, str) else None
        return load(str(local) if local is not None else path, *args, **kwargs)

    return load_dataset


datasets.load_dataset = _redirect_load_dataset(datasets.load_dataset)


class AmirLensGRPOConfig(GroupwiseGRPOConfig):
    """GroupwiseGRPOConfig with AMIR_LENS_OPTIONS as defaults (module-level: Trainer pickles
    its args into every checkpoint)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**AMIR_LENS_OPTIONS, **kwargs})


class AmirLensGRPOTrainer(GroupwiseGRPOTrainer):
    """GroupwiseGRPOTrainer with `groupwise_correct` appended to the test's reward functions
    (weight 1, no processing class); a test without reward functions keeps none."""

    def __init__(
        self, model: Any, reward_funcs: Any = None, args: Any = None, *more: Any, **kwargs: Any
    ) -> None:
        if args is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            args = AmirLensGRPOConfig(f"{name.split('/')[-1]}-GRPO")
        if reward_funcs is not None and reward_funcs != []:
            funcs = reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
            if args.reward_weights is not None and len(args.reward_weights) == len(funcs):
                args.reward_weights = [*args.reward_weights, 1.0]
            processing = kwargs.get("reward_processing_classes")
            if processing is not None:
                listed = processing if isinstance(processing, list) else [processing]
                kwargs["reward_processing_classes"] = [*listed, None]
            reward_funcs = [*funcs, groupwise_correct]
        super().__init__(model, reward_funcs, args, *more, **kwargs)


SWAPS = {
    "swap": (GroupwiseGRPOTrainer, GroupwiseGRPOConfig),
    "amir_lens": (AmirLensGRPOTrainer, AmirLensGRPOConfig),
}
"""Mode -> (the class standing in for GRPOTrainer, the one for GRPOConfig)."""


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = [f"trl_suite_plugin: mode {MODE}, stand-ins {STANDINS}"]
    if MODE == "amir_lens":
        lines.append(f"trl_suite_plugin: options {AMIR_LENS_OPTIONS}")
    return lines + [f"trl_suite_plugin shim: {shim}" for shim in SHIMS]


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    if MODE == "trl":
        return
    trainer, grpo_config = SWAPS[MODE]
    modules = {item.module for item in items if getattr(item, "module", None) is not None}
    for module in modules:
        if hasattr(module, "GRPOTrainer"):
            module.GRPOTrainer = trainer
        if hasattr(module, "GRPOConfig"):
            module.GRPOConfig = grpo_config
