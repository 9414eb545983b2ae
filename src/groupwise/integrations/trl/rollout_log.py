"""OUTPUT_DIR/rollouts.jsonl of GroupwiseGRPOTrainer with `log_rollouts=True`: one line per
generation batch in the format of groupwise's own trainer (groupwise.train.step_metrics'
`step_samples`), so that `groupwise view OUTPUT_DIR` shows a TRL run's steps, groups,
completions, rewards, advantages and AMIR pairs (docs/guides/trl.md, "Its rollouts, for
groupwise view"; docs/guides/view.md, "What the page reads").

A line's step is TRL's global step when the batch was generated plus 1: the first optimizer
step that learns from it (a generation batch that serves several optimizer steps,
steps_per_generation > gradient_accumulation_steps or num_iterations > 1, has one line, and the
steps it also serves have none).

What a line holds of the gathered generation batch (every process's rows, group-major, in the
row order of TRL's [B, F] rewards): the prompts and completions TRL keeps for its completions
table (`_logs`) as text, one question per group; the problem id, a hash of the group's prompt
text (the same prompt has the same id in every step and run: two runs side by side match by
it); the gold answers (the dataset's `log_rollouts_answer_column`, null where it has none); the
reward columns by reward function name; correctness from the correctness reward where it is
known and binary (null otherwise); the cut flags (no EOS token among a completion's tokens);
the sampler's mean token log-prob where TRL has the sampler's log-probs (vLLM with its
importance-sampling correction; null otherwise); and the rewards, advantages and pairs as used:
under LENS the calibrated rewards with the totals before shaping, groupwise's advantages where
they replaced TRL's (TRL's own otherwise), AMIR's pairs as whole-batch rows. `settings` says
what the page cannot read from a config.yaml: the method, G, the model, and under LENS the
correctness reward's name, weight and correct value times weight.

Every process gathers (the gathers are collective); only the main process writes.
"""

from __future__ import annotations

import hashlib
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import gather_object
from torch import Tensor

from groupwise.algorithms import GroupTargets
from groupwise.integrations.trl.terms import Correctness, correct_rows, reward_totals
from groupwise.train.metrics_log import ROLLOUTS_FILE, JsonlLog

SOURCE = "TRL GroupwiseGRPOTrainer"
"""`settings.source` of a line: the page names the run's origin with it."""


@dataclass(frozen=True)
class GenerationBatch:
    """What TRL gives of one gathered generation batch of B rows (group-major), for its line.

    step: the line's step (module docstring). prompts, completions: [B] as TRL logs them
    (strings, or conversations). reward_names: [F] TRL's reward_func_names. rewards_per_func:
    [B, F] (NaN where a function returned None). weights: [F] TRL's reward_weights.
    advantages: [B] TRL's own. golds: [B] or None. truncated: [B] bool or None.
    sampler_mean_logp: [B] or None.
    """

    step: int
    prompts: list[Any]
    completions: list[Any]
    reward_names: list[str]
    rewards_per_func: Tensor
    weights: Tensor
    advantages: Tensor
    golds: list[Any] | None = None
    truncated: Tensor | None = None
    sampler_mean_logp: Tensor | None = None


@dataclass(frozen=True)
class LineSettings:
    """What every line of a run shares: G, the correctness reward (None where unknown),
    whether groupwise's advantages replaced TRL's, and the `settings` object of the line."""

    group_size: int
    correctness: Correctness | None = None
    own_advantages: bool = False
    settings: dict[str, Any] | None = None


def as_text(value: Any) -> str:
    """A prompt or completion as TRL passes it, as text: a string as it is; a conversation as
    its messages' contents (each after its role where there are several)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        return str(value)
    parts = []
    for message in value:
        content = message.get("content", "") if isinstance(message, dict) else message
        if isinstance(content, list):  # multimodal: the text parts
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        role = message.get("role", "") if isinstance(message, dict) else ""
        parts.append(f"{role}: {content}" if len(value) > 1 and role else str(content))
    return "\n\n".join(parts)


def problem_id(prompt_text: str) -> str:
    """A group's problem id: "prompt-" and 10 hex digits of the SHA-1 of its prompt text."""
    return "prompt-" + hashlib.sha1(prompt_text.encode("utf-8")).hexdigest()[:10]


def _floats(values: Tensor) -> list[float | None]:
    """A tensor's values as floats, NaN and infinities as None (JSON has neither)."""
    return [v if math.isfinite(v) else None for v in values.detach().float().cpu().tolist()]


def _jsonable(value: Any) -> Any:
    return value if value is None or isinstance(value, str | int | float | bool) else str(value)


def rollout_line(
    batch: GenerationBatch, line: LineSettings, targets: GroupTargets | None = None
) -> dict[str, Any]:
    """The rollouts.jsonl line of a generation batch (module docstring). `targets`: groupwise's
    targets of the batch (AMIR or a non-"grpo" estimator), None where TRL's are the ones."""
    size, group_size = len(batch.completions), line.group_size
    if size % group_size or len(batch.prompts) != size or batch.rewards_per_func.shape[0] != size:
        raise ValueError(f"a generation batch of {size} rows is not whole groups of {group_size}")
    questions = [as_text(p) for p in batch.prompts[::group_size]]
    correct = correct_rows(batch.rewards_per_func, line.correctness, required=False)
    rewards = reward_totals(batch.rewards_per_func, batch.weights)
    advantages, unshaped, pairs = batch.advantages, None, [[], []]
    if targets is not None:
        rewards, unshaped = targets.rewards, targets.unshaped_rewards
        pairs = [targets.chosen.tolist(), targets.rejected.tolist()]
        if line.own_advantages:
            advantages = targets.advantages
    return {
        "step": batch.step,
        "problem_ids": [problem_id(q) for q in questions],
        "questions": questions,
        "truncated": None if batch.truncated is None else batch.truncated.bool().tolist(),
        "unshaped_rewards": None if unshaped is None else _floats(unshaped),
        "sampler_mean_logp": None
        if batch.sampler_mean_logp is None
        else _floats(batch.sampler_mean_logp),
        "completions": [as_text(c) for c in batch.completions],
        "golds": None if batch.golds is None else [_jsonable(g) for g in batch.golds],
        "correct": None if correct is None else correct.tolist(),
        "reward_columns": {
            name: _floats(batch.rewards_per_func[:, i]) for i, name in enumerate(batch.reward_names)
        },
        "rewards": _floats(rewards),
        "advantages": _floats(advantages),
        "pairs": pairs,
        "settings": line.settings or {"source": SOURCE},
    }


def _completion_mask(batch: dict[str, Any]) -> Tensor:
    mask = batch["completion_mask"].bool()
    if batch.get("tool_mask") is not None:
        mask = mask & batch["tool_mask"].bool()
    return mask


def local_truncated(batch: dict[str, Any], eos_token_ids: list[int]) -> Tensor | None:
    """[b] bool: this process's completions with no EOS token among their tokens (cut at
    max_completion_length; TRL's own test, `completions/clipped_ratio`); None without EOS ids."""
    if not eos_token_ids:
        return None
    ids = batch["completion_ids"]
    eos = torch.tensor(list(eos_token_ids), device=ids.device)
    return ~(torch.isin(ids, eos) & batch["completion_mask"].bool()).any(dim=1)


def local_sampler_mean_logp(batch: dict[str, Any]) -> Tensor | None:
    """[b] the sampler's mean token log-prob of this process's completions where TRL kept the
    sampler's log-probs (`sampling_per_token_logps`; tokens it could not score, NaN, left
    out); None otherwise."""
    logps = batch.get("sampling_per_token_logps")
    if logps is None:
        return None
    mask = _completion_mask(batch) & ~torch.isnan(logps)
    sums = (logps.nan_to_num(0.0) * mask).sum(dim=1)
    return sums / mask.sum(dim=1).clamp(min=1)


class RolloutLog:
    """OUTPUT_DIR/rollouts.jsonl of a GroupwiseGRPOTrainer run (module docstring).

    `collect` runs on every process after TRL scored a generation batch (it gathers); `finish`
    runs once the batch's targets are known and writes the line on the main process. The file
    is opened at the first line: emptied in a fresh run (TRL's global step 0), cut back to the
    global step in a run resumed from a checkpoint (groupwise.train.metrics_log.trim_jsonl:
    later lines go to rollouts.jsonl.set-aside, said on stderr)."""

    def __init__(
        self, output_dir: str | Path, answer_column: str, line: LineSettings, writer: bool
    ):
        self.path = Path(output_dir) / ROLLOUTS_FILE
        self.answer_column = answer_column
        self.line = line
        self.writer = writer
        self.log: JsonlLog | None = None
        self.pending: GenerationBatch | None = None

    def collect(
        self, trainer: Any, inputs: list[dict[str, Any]], batch: dict[str, Any], rewards: Tensor
    ) -> None:
        """Keeps what TRL has of the generation batch just scored (`trainer`: the
        GroupwiseGRPOTrainer; `inputs`: this process's dataset rows; `batch`: the dict TRL's
        _generate_and_score_completions returned; `rewards`: the gathered [B, F])."""
        if rewards is None:
            raise RuntimeError(
                "TRL's _generate_and_score_completions did not call _calculate_rewards; "
                "log_rollouts cannot see the rewards (unsupported TRL version?)"
            )
        size, gather = rewards.shape[0], trainer.accelerator.gather
        golds = gather_object([row.get(self.answer_column) for row in inputs])
        truncated = local_truncated(batch, trainer.eos_token_ids)
        sampler = local_sampler_mean_logp(batch)
        logs = trainer._logs
        self.pending = GenerationBatch(
            step=trainer.state.global_step + 1,
            prompts=list(logs["prompt"])[-size:],
            completions=list(logs["completion"])[-size:],
            reward_names=list(trainer.reward_func_names),
            rewards_per_func=rewards.detach().cpu(),
            weights=trainer.reward_weights.detach().cpu(),
            advantages=torch.tensor(list(logs["advantages"])[-size:]),
            golds=golds if any(g is not None for g in golds) else None,
            truncated=None if truncated is None else gather(truncated).cpu(),
            sampler_mean_logp=None if sampler is None else gather(sampler.contiguous()).cpu(),
        )

    def finish(self, targets: GroupTargets | None) -> None:
        """Writes the collected batch's line (main process) with groupwise's `targets` (None:
        TRL's own advantages and no pairs); nothing where no batch waits."""
        pending, self.pending = self.pending, None
        if pending is None or not self.writer:
            return
        line = rollout_line(pending, self.line, targets)
        if self.log is None:
            self.log = JsonlLog(self.path, pending.step - 1 if pending.step > 1 else None)
            for note in self.log.notes:
                print(f"groupwise: {note}", file=sys.stderr)
        self.log.write(line)


def line_settings(trainer: Any, advantage: str, amir: bool) -> LineSettings:
    """A GroupwiseGRPOTrainer's LineSettings (after its algorithm is built): `settings` with
    the method, G and the model, and under LENS the correctness reward's name, weight and
    weighted correct value (the page turns a calibrated reward back into p / D(q) with them)."""
    correctness = trainer.correctness
    config = getattr(trainer.model, "config", None)
    settings: dict[str, Any] = {
        "source": SOURCE,
        "advantage": advantage,
        "amir": bool(amir),
        "group_size": trainer.num_generations,
        "model": getattr(config, "_name_or_path", None) or None,
    }
    if advantage == "lens" and correctness is not None and correctness.weight:
        settings["component"], settings["weight"] = correctness.name, correctness.weight
        settings["correct_reward"] = correctness.weight * correctness.value
    return LineSettings(trainer.num_generations, correctness, trainer._own_advantages, settings)
