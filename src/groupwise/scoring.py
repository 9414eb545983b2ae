"""Deprecated: renamed groupwise.completion_logprobs (CHANGELOG.md, "One job per room")."""

import warnings

from groupwise.completion_logprobs import (  # noqa: F401
    DEFAULT_MAX_LOGITS_BYTES,
    ModelScorer,
    completion_logprobs,
    completion_mean_logp,
    pad_token_rows,
    rollout_mean_logp,
)

warnings.warn(
    "groupwise.scoring is deprecated: import groupwise.completion_logprobs",
    DeprecationWarning,
    stacklevel=2,
)
