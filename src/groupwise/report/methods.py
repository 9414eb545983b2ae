"""What a training run's config trains, in words: the method's name after every option that
changes it (`method_label`), which groups it learns from (`groups_remark`), why its all-wrong
groups had a gradient or not (`all_wrong_remark`), its reward in words (`reward_name`); and
counts with their nouns (`plural`).
Read by the summary, the table, and the figures of `groupwise report` (docs/algorithms.md §1-3
define the methods).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from groupwise.run_reader import is_number

# What each advantage estimator is called (algorithm.advantage); another registered one is
# named by its registry name.
ESTIMATORS = {"grpo": "GRPO", "rloo": "RLOO", "lens": "LENS"}


def section(config: Mapping[str, Any], name: str) -> dict[str, Any]:
    """One section of a training config (config.yaml as read); {} where it has none."""
    value = config.get(name) if isinstance(config, Mapping) else None
    return dict(value) if isinstance(value, Mapping) else {}


def method_label(config: Mapping[str, Any]) -> str:
    """What a training config (config.yaml as read: algorithm, rollout and reward sections)
    trains, named after the method and each option that changes it, joined by " + ": the
    estimator (GRPO, RLOO, LENS; GSPO for sequence-level ratios, Dr. GRPO with neither std nor
    length normalisation), AMIR-GRPO's preference term, and then the loss aggregation, the
    std, clip-higher, dynamic sampling, the overlong penalty and filtering, a KL term and
    importance correction where set ("GRPO + dynamic sampling", "RLOO + KL 0.05"). DAPO's four
    together (token-mean loss, clip-higher, dynamic sampling, overlong penalty or filtering)
    on GRPO are "DAPO". A section the config lacks counts as its defaults."""
    algorithm = section(config, "algorithm")
    name = _base_method(algorithm)
    changes = _method_changes(algorithm, section(config, "rollout"), section(config, "reward"))
    dapo = {"token-mean loss", "clip-higher", "dynamic sampling"}
    overlong = {"overlong penalty", "overlong filtering"} & set(changes)
    if name == "GRPO" and dapo <= set(changes) and overlong:
        name, changes = "DAPO", [c for c in changes if c not in dapo | overlong]
    return " + ".join([name, *changes])


def _base_method(algorithm: Mapping[str, Any]) -> str:
    """The estimator's name with AMIR-GRPO's term: GRPO, GSPO, Dr. GRPO, RLOO, LENS,
    AMIR-GRPO, AMIR-GSPO, AMIR-GRPO + LENS, "RLOO + AMIR preferences"."""
    advantage = str(algorithm.get("advantage", "grpo"))
    amir = bool(algorithm.get("amir"))
    if advantage == "grpo":
        name = "GSPO" if algorithm.get("loss_level") == "sequence" else "GRPO"
        if _is_dr_grpo(algorithm):
            name = "Dr. GRPO"
        return f"AMIR-{name}" if amir else name
    name = ESTIMATORS.get(advantage, advantage)
    if advantage == "lens" and algorithm.get("lens_mode", "full") != "full":
        name = f"LENS ({algorithm['lens_mode']})"
    if amir:
        return f"AMIR-GRPO + {name}" if advantage == "lens" else f"{name} + AMIR preferences"
    return name


def _is_dr_grpo(algorithm: Mapping[str, Any]) -> bool:
    return algorithm.get("scale_rewards") == "none" and algorithm.get("aggregation") == "dr_grpo"


def _method_changes(
    algorithm: Mapping[str, Any], rollout: Mapping[str, Any], reward: Mapping[str, Any]
) -> list[str]:
    """The options beside the estimator that change what is trained, each as a short name."""
    changes = []
    if algorithm.get("loss_level") == "sequence" and algorithm.get("advantage", "grpo") != "grpo":
        changes.append("GSPO sequence ratio")
    if not _is_dr_grpo(algorithm):
        aggregation = {"dapo": "token-mean loss", "dr_grpo": "Dr. GRPO loss"}
        changes += [aggregation[a] for a in [algorithm.get("aggregation")] if a in aggregation]
        if algorithm.get("advantage", "grpo") in ("grpo", "lens"):
            scale = {"none": "no std (Dr. GRPO)", "batch": "batch std"}
            changes += [scale[s] for s in [algorithm.get("scale_rewards")] if s in scale]
    low, high = algorithm.get("eps_low", 0.2), algorithm.get("eps_high", 0.2)
    if algorithm.get("loss_level") != "sequence" and is_number(low) and is_number(high):
        changes += ["clip-higher"] if high > low else []
    changes += ["dynamic sampling"] if rollout.get("dynamic_sampling") else []
    changes += ["overlong penalty"] if _overlong_penalty(reward) else []
    changes += ["overlong filtering"] if algorithm.get("mask_truncated") else []
    kl = algorithm.get("kl_coef", 0.0)
    changes += [f"KL {kl:g}"] if is_number(kl) and kl > 0 else []
    changes += ["importance correction"] if rollout.get("importance_correction") else []
    return changes


def _overlong_penalty(reward: Mapping[str, Any]) -> bool:
    """reward.overlong_buffer > 0 with a non-zero reward.overlong_penalty (default 1)."""
    buffer, penalty = reward.get("overlong_buffer", 0), reward.get("overlong_penalty", 1.0)
    return is_number(buffer) and buffer > 0 and is_number(penalty) and penalty > 0


def other_reward_parts(config: Mapping[str, Any]) -> list[str] | None:
    """The reward's parts beside correctness that can differ inside a group of all-correct or
    all-wrong answers (weighted components other than reward.correctness_component, and "the
    overlong penalty"); None where the config has no reward section."""
    reward = section(config, "reward")
    if not reward:
        return None
    weights = reward.get("weights") if isinstance(reward.get("weights"), Mapping) else {}
    correctness = reward.get("correctness_component", "correctness")
    parts = [k for k, w in weights.items() if k != correctness and is_number(w) and w != 0]
    return parts + (["the overlong penalty"] if _overlong_penalty(reward) else [])


def groups_remark(config: Mapping[str, Any]) -> str:
    """Which groups the run's method learns from, as true for its estimator and reward: GRPO
    and RLOO (and AMIR-GRPO's pairs) learn from groups whose rewards differ, which are the mixed
    groups only when correctness is the whole reward; LENS (full, negative_only) also from
    all-wrong groups (docs/algorithms.md §3). '' for an estimator it does not know."""
    algorithm = section(config, "algorithm")
    advantage = str(algorithm.get("advantage", "grpo"))
    if advantage == "lens":
        if algorithm.get("lens_mode", "full") == "mixed_only":
            return "LENS mixed_only gives all-wrong groups advantage 0"
        return "LENS learns from all-wrong groups too: calibrated negative rewards"
    if advantage not in ("grpo", "rloo"):
        return ""
    name = _base_method(algorithm)
    others = other_reward_parts(config)
    if others == []:
        return f"{name} learns from mixed groups only"
    if others is None:
        return f"{name} learns from groups whose rewards differ"
    return f"{name} learns from groups whose rewards differ: mixed ones, and others through " + (
        ", ".join(others)
    )


def all_wrong_remark(config: Mapping[str, Any], share: float) -> str:
    """Why `share` (a fraction) of the all-wrong groups had a non-zero advantage: none had one,
    LENS's calibrated negatives, or their rewards differed (reward parts beside correctness)."""
    if share == 0:
        return "their advantages were all 0"
    algorithm = section(config, "algorithm")
    if algorithm.get("advantage") == "lens" and algorithm.get("lens_mode") != "mixed_only":
        return "LENS's calibrated negatives"
    others = other_reward_parts(config)
    if others:
        return "their rewards differed: " + ", ".join(others)
    return "their rewards differed"


def plural(count: int, word: str, words: str | None = None) -> str:
    """'1 step', '3 steps', '6,400 completions' ("words": the plural where it is not word +
    's')."""
    return f"{count:,} {word if count == 1 else words or word + 's'}"


def reward_name(config: Mapping[str, Any]) -> str:
    """The reward a training config defines, in words: its weighted components ("binary",
    "correctness + format + 0.5 x calibration") and "overlong penalty" where on; '' where the
    config has no reward section. Rewards of other names are on other scales, so the figures
    draw them on separate axes."""
    reward = section(config, "reward")
    if not reward:
        return ""
    weights = reward.get("weights") if isinstance(reward.get("weights"), Mapping) else {}
    parts = [
        name if weight == 1 else f"{weight:g} x {name}"
        for name, weight in weights.items()
        if is_number(weight) and weight != 0
    ]
    return " + ".join(parts + (["overlong penalty"] if _overlong_penalty(reward) else []))
