"""The `verl.plugins` entry point (docs/guides/verl.md, "The entry point").

`import verl` imports this module in the driver and in every Ray worker. It registers
groupwise's advantage estimators with verl's `register_adv_est` as groupwise_NAME
(groupwise.integrations.verl.advantages), and the trainer mode `groupwise`
(groupwise.integrations.verl.trainer) as soon as verl's v1 trainer package is imported, so that
workers that never train import neither. verl logs a plugin whose import fails at debug level
only, so a failure here never propagates: it is logged as an error and every groupwise_NAME (and
the trainer mode) is registered as one that raises it, so that a run that asks for one stops
with the cause instead of verl's "Unknown advantage estimator" or "Unknown trainer mode".
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

from groupwise.algorithms import ADVANTAGE_ESTIMATORS

LOG = logging.getLogger("groupwise.integrations.verl")
FAILURE: BaseException | None = None
"""Why the plugin could not register its estimators, or None when it did."""


def _failed(name: str, error: BaseException) -> Callable[..., None]:
    def estimate(*args: object, **kwargs: object) -> None:
        raise RuntimeError(
            f"algorithm.adv_estimator={name}: groupwise's verl plugin failed to load: "
            f"{type(error).__name__}: {error}"
        ) from error

    return estimate


try:
    from groupwise.integrations.verl.advantages import register_estimators

    REGISTERED = register_estimators(register_adv_est)
except Exception as error:  # verl swallows it: say it loudly, and keep it for the estimators
    FAILURE = error
    LOG.error("groupwise's verl plugin failed to load: %s: %s", type(error).__name__, error)
    REGISTERED = []
    for _name in ADVANTAGE_ESTIMATORS:
        if f"groupwise_{_name}" not in ADV_ESTIMATOR_REGISTRY:
            register_adv_est(f"groupwise_{_name}")(_failed(f"groupwise_{_name}", error))


V1 = "verl.trainer.ppo.v1"
"""verl's v1 trainer package: the trainer mode is registered once it is imported."""


def register_trainer_mode() -> None:
    """Import groupwise.integrations.verl.trainer (its @register_trainer); where that fails, log
    it as an error and register the mode as a trainer that raises the cause."""
    try:
        import groupwise.integrations.verl.trainer  # noqa: F401
    except Exception as error:  # verl swallows it: say it loudly, and keep it for the trainer
        from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, register_trainer

        LOG.error(
            "groupwise's verl trainer mode failed to load: %s: %s", type(error).__name__, error
        )
        if "groupwise" not in TRAINER_REGISTRY:
            register_trainer("groupwise")(_refusing_trainer(error))


def _refusing_trainer(error: BaseException) -> type:
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    def refuse(self: Any, config: Any) -> None:
        raise RuntimeError(
            "trainer.v1.trainer_mode=groupwise: groupwise's verl trainer mode failed to load: "
            f"{type(error).__name__}: {error}"
        ) from error

    return type("GroupwiseTrainer", (PPOTrainerSync,), {"__init__": refuse})


class _ThenRegister(importlib.abc.Loader):
    """verl's own loader of the v1 package, then register_trainer_mode."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        register_trainer_mode()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class _AfterV1(importlib.abc.MetaPathFinder):
    """Finds verl's v1 package as Python would, with _ThenRegister around its loader."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != V1:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenRegister(spec.loader)
        return spec


if V1 in sys.modules:
    register_trainer_mode()
elif not any(isinstance(finder, _AfterV1) for finder in sys.meta_path):
    sys.meta_path.insert(0, _AfterV1())
