"""The progress bar's line (groupwise.train.progress): all-wrong groups with a gradient by hand,
and each method's signal in the postfix."""

from __future__ import annotations

import torch

from groupwise.train.progress import ProgressLine, all_wrong_with_gradient


def test_all_wrong_with_gradient_by_hand() -> None:
    # 4 groups of G = 2: all-wrong with advantages (-0.1, 0.0) -> counts; all-wrong with 0, 0
    # -> not; mixed; all-correct. One of four groups.
    correct = torch.tensor([False, False, False, False, True, False, True, True])
    advantages = torch.tensor([-0.1, 0.0, 0.0, 0.0, 1.0, -1.0, 0.0, 0.0])
    assert all_wrong_with_gradient(correct, advantages, 2) == 0.25
    assert all_wrong_with_gradient(correct, torch.zeros(8), 2) == 0.0  # GRPO's all-wrong groups


RECORD = {
    "reward_mean": 0.40625,
    "accuracy": 0.40625,
    "group_mixed": 0.5625,
    "group_all_correct": 0.125,
    "group_all_wrong": 0.3125,
    "group_all_wrong_active": 0.0,
    "tokens_per_second": 812.4,
}


def test_postfix_shows_groups_and_all_wrong_groups_with_a_gradient() -> None:
    line = ProgressLine().postfix(RECORD)
    assert line == {
        "reward": "0.406",
        "acc": "0.41",
        "groups mixed/right/wrong": "56/12/31%",
        "all-wrong with grad": "0%",
        "tok/s": "812",
    }


def test_postfix_shows_amir_pairs_and_lambda() -> None:
    line = ProgressLine().postfix({**RECORD, "lambda": 0.005, "pairs_per_group": 6.875})
    assert (line["pairs/group"], line["lam"]) == ("6.9", "0.0050")


def test_postfix_keeps_the_latest_heldout_accuracy() -> None:
    progress = ProgressLine()
    assert "heldout" not in progress.postfix(RECORD)
    assert progress.postfix({**RECORD, "heldout_accuracy": 0.3125})["heldout"] == "31.2%"
    assert progress.postfix(RECORD)["heldout"] == "31.2%"  # a step without an evaluation
    assert progress.postfix({**RECORD, "heldout_accuracy": 0.4})["heldout"] == "40.0%"


def test_postfix_counts_answer_checks_only_in_a_step_that_had_some() -> None:
    # a count in the bar, not a warning line under it at every step
    quiet = {**RECORD, "answers_unparsed": 0, "answers_timeout": 0, "answers_error": 0}
    assert "checks text/timeout/err" not in ProgressLine().postfix(quiet)
    noisy = {**quiet, "answers_unparsed": 1, "answers_error": 2}
    assert ProgressLine().postfix(noisy)["checks text/timeout/err"] == "1/0/2"
