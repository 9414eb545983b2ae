"""Dynamic sampling's bookkeeping (groupwise.train.draws): which drawn groups fill a step's
slots, per process, and the step's batch assembled from several draws."""

from __future__ import annotations

import torch

from groupwise.rewards import Scores
from groupwise.rollout import Rollouts
from groupwise.train.batch import ScoredBatch
from groupwise.train.draws import Draw, assemble, choose_groups, draw_metrics, select_groups

G = 2


def rollouts(prompt_width: int, width: int, tag: int, groups: int = 2) -> Rollouts:
    """`groups` prompts x G completions whose ids encode (tag, row)."""
    rows = groups * G
    ids = torch.arange(rows).unsqueeze(1).repeat(1, width) + 100 * tag
    return Rollouts(
        prompt_ids=torch.full((groups, prompt_width), tag),
        prompt_mask=torch.ones(groups, prompt_width, dtype=torch.long),
        completion_ids=ids,
        completion_mask=torch.ones(rows, width, dtype=torch.long),
        texts=[f"d{tag}r{i}" for i in range(rows)],
        truncated=torch.zeros(rows, dtype=torch.bool),
        group_size=G,
    )


def draw(tag: int, correct: list[int], keep: list[bool], local: Rollouts) -> Draw:
    """A draw of len(keep) questions; `local` holds this process's groups of it."""
    correct_t = torch.tensor(correct, dtype=torch.bool)
    scores = Scores(
        {"binary": correct_t.float()},
        {"binary": 1.0},
        correct_t.float(),
        correct_t,
        [None] * len(correct),
    )
    texts = [f"d{tag}r{i}" for i in range(len(correct))]
    batch = ScoredBatch(
        local, torch.arange(len(local)), scores, texts, torch.zeros(len(correct), dtype=torch.bool)
    )
    return Draw([f"p{tag}q{q}" for q in range(len(keep))], batch, torch.tensor(keep))


def test_each_process_fills_its_slots_with_its_own_kept_groups_in_draw_order():
    # Q = 4 questions, two processes: rank 0 owns questions 0 and 1, rank 1 owns 2 and 3.
    slots = [[0, 1], [2, 3]]
    first = draw(0, [0] * 8, [False, True, True, True], rollouts(3, 4, 0))
    second = draw(1, [0] * 8, [True, False, False, True], rollouts(3, 4, 1))
    # after one draw rank 0 has only one kept group (question 1): not complete
    assert choose_groups([first], slots, fill=False) == []
    # after two: rank 0 takes (0, 1) then (1, 0); rank 1 its first two, both from draw 0
    assert choose_groups([first, second], slots, fill=False) == [(0, 1), (1, 0), (0, 2), (0, 3)]
    # out of draws: rank 0 fills its second slot with its first dropped group, (0, 0)
    assert choose_groups([first], slots, fill=True) == [(0, 1), (0, 0), (0, 2), (0, 3)]


def test_assemble_takes_the_chosen_groups_scores_and_this_process_rollouts():
    # one process, Q = 2 per draw; draw 0 keeps question 1, draw 1 keeps question 0
    first = draw(0, [1, 1, 1, 0], [False, True], rollouts(3, 4, 0))
    second = draw(1, [0, 1, 0, 0], [True, False], rollouts(5, 2, 1))
    chosen = choose_groups([first, second], [[0, 1]], fill=False)
    assert chosen == [(0, 1), (1, 0)]
    step = assemble([first, second], chosen, [0, 1])
    assert step.problems == ["p0q1", "p1q0"]
    assert step.batch.texts == ["d0r2", "d0r3", "d1r0", "d1r1"]
    assert step.batch.scores.correct.tolist() == [True, False, False, True]
    assert step.batch.rows.tolist() == [0, 1, 2, 3]
    ids = step.batch.rollouts.completion_ids
    # draw 0's group 1 (rows 2, 3; width 4) and draw 1's group 0 (rows 0, 1; width 2, padded)
    assert ids[:, 0].tolist() == [2, 3, 100, 101]
    assert step.batch.rollouts.completion_mask.sum(dim=1).tolist() == [4, 4, 2, 2]
    assert step.batch.rollouts.prompt_mask.sum(dim=1).tolist() == [3, 5]  # left padded
    assert step.batch.rollouts.prompt_mask[0].tolist() == [0, 0, 1, 1, 1]
    assert step.metrics == {
        "draws": 2,
        "completions_sampled": 8,
        "groups_kept": 2,
        "groups_dropped_all_correct": 1,
        "groups_dropped_all_wrong": 1,
        "groups_dropped_mixed": 0,
        "groups_filled": 0,
    }


def test_filled_groups_are_counted():
    only = draw(0, [0, 0, 0, 0], [False, False], rollouts(3, 4, 0))
    chosen = choose_groups([only], [[0, 1]], fill=True)
    assert chosen == [(0, 0), (0, 1)]
    assert draw_metrics([only], chosen)["groups_filled"] == 2
    assert draw_metrics([only], chosen)["groups_dropped_all_wrong"] == 2


def test_select_groups_keeps_the_sampler_logprobs():
    a, b = rollouts(2, 3, 0), rollouts(2, 5, 1)
    a.sampler_logp, b.sampler_logp = -torch.ones(4, 3), -2 * torch.ones(4, 5)
    picked = select_groups([(b, 1), (a, 0)])
    assert picked.sampler_logp.shape == (4, 5)
    assert picked.sampler_logp.sum(dim=1).tolist() == [-10.0, -10.0, -3.0, -3.0]
    assert picked.texts == ["d1r2", "d1r3", "d0r0", "d0r1"]
