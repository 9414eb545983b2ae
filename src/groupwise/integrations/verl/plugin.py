"""The `verl.plugins` entry point (docs/guides/verl.md, "The entry point").

`import verl` imports this module in the driver and in every Ray worker. It registers
groupwise's advantage estimators with verl's `register_adv_est` as groupwise_NAME
(groupwise.integrations.verl.advantages). verl logs a plugin whose import fails at debug level
only, so a failure here never propagates: it is logged as an error and every groupwise_NAME is
registered as an estimator that raises it, so that a run that asks for one stops with the cause
instead of verl's "Unknown advantage estimator".
"""

from __future__ import annotations

import logging
from collections.abc import Callable

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
