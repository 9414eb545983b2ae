"""Fixtures of the TRL integration tests: a fixed generation batch, its rewards, recorders, and
the direct (loop-by-loop) formulas the trainer's numbers are compared with.

The batch: 3 prompts x G = 4 completions (12 rows, group-major). Sampling is replaced by
`FixedCompletions`: row r of the generation batch (every process's rows, in TRL's order) gets
COMPLETIONS[r], so the batch is the same whatever the layout (processes, micro-batches).

    group 0: mixed       correct 1 0 0 1
    group 1: all wrong   correct 0 0 0 0   (LENS gives it negative advantages, GRPO zero)
    group 2: all correct correct 1 1 1 1

A second reward function, `bonus`, varies inside every group, so that AMIR-GRPO mines pairs
in each (margin 0.5). Run as a script (`python tests/trl_support.py OUT`, under torchrun for
several processes) it takes one optimizer step and writes rank 0's gradient to OUT.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback
from trl import GRPOConfig

from groupwise.algorithms import sequence_mean_logp
from groupwise.integrations.trl import GroupwiseGRPOConfig, GroupwiseGRPOTrainer
from groupwise.integrations.trl.trainer import COEFFICIENTS_KEY, ROWS_KEY, loss_mask
from groupwise.models import load_model

G = 4
PROMPTS = ["Add 2 and 3.", "Name a prime", "Is 7 odd?"]
COMPLETIONS = [[101 + 7 * r + k for k in range(2 + r % 4)] for r in range(3 * G)]
CORRECT = [1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1]
BONUS = [0.3, 1.9, 0.0, 1.2, 1.5, 0.2, 0.9, 0.0, 0.1, 1.0, 2.2, 0.4]
ROW = {tuple(ids): r for r, ids in enumerate(COMPLETIONS)}
TEMPERATURE = 0.7


def correct(prompts: Sequence[Any], completions: Sequence[Any], completion_ids, **_) -> list:
    return [float(CORRECT[ROW[tuple(ids)]]) for ids in completion_ids]


def bonus(prompts: Sequence[Any], completions: Sequence[Any], completion_ids, **_) -> list:
    return [BONUS[ROW[tuple(ids)]] for ids in completion_ids]


class FixedCompletions:
    """Stands in for sampling (see the module docstring); the generation batch's row r gets
    COMPLETIONS[first_row + r]."""

    first_row = 0

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, **_):
        start = self.first_row + self.accelerator.process_index * len(prompt_ids)
        rows = range(start, start + len(prompt_ids))
        return [list(COMPLETIONS[r % len(COMPLETIONS)]) for r in rows], None


class Recording(FixedCompletions, GroupwiseGRPOTrainer):
    """Records, for every loss computation, the rows it saw, the values the loss used and
    lambda_reg as the loss used it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[dict[str, Any]] = []
        self.no_grad_passes = 0

    def _no_grad_logps(self, batch):
        self.no_grad_passes += 1
        return super()._no_grad_logps(batch)

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        completion, prompt = inputs["completion_ids"], inputs["prompt_ids"]
        rows = [
            ROW[tuple(c[m.bool()].tolist())]
            for c, m in zip(completion, inputs["completion_mask"], strict=True)
        ]
        prompts = [p[m.bool()].tolist() for p, m in zip(prompt, inputs["prompt_mask"], strict=True)]
        coefficients = inputs.get(COEFFICIENTS_KEY)
        self.seen.append(
            {
                "rows": rows,
                "prompts": prompts,
                "advantages": inputs["advantages"].detach().clone(),
                "coefficients": None if coefficients is None else coefficients.clone(),
                "lambda": None if self.lambda_reg is None else self.lambda_reg.value,
                "has_old": inputs.get("old_per_token_logps") is not None,
            }
        )
        return loss


class OldPolicyRecorder(GroupwiseGRPOTrainer):
    """Records, per loss computation, TRL's old policy: old_per_token_logps where the batch has
    it, else the loss forward pass's own log-probs (TRL's `per_token_logps.detach()`), in
    `old_policy` as (rows, per-row mean log-prob, whether the batch had old_per_token_logps)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.old_policy: list[tuple[list[int], list[float], bool]] = []
        self._forward: torch.Tensor | None = None

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, **kwargs
    ):
        result = super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, **kwargs
        )
        if self._loss_pass is not None and self._forward is None:
            self._forward = result[0].detach()
        return result

    def _compute_loss(self, model, inputs):
        self._forward = None
        loss = super()._compute_loss(model, inputs)
        old = inputs.get("old_per_token_logps")
        means = sequence_mean_logp(self._forward if old is None else old, loss_mask(inputs))
        self.old_policy.append((inputs[ROWS_KEY].tolist(), means.tolist(), old is not None))
        return loss


class Gradients(TrainerCallback):
    """Keeps the gradient of each optimizer step (taken before the step)."""

    def __init__(self) -> None:
        self.steps: list[list[torch.Tensor]] = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        params = [p for p in model.parameters() if p.requires_grad]
        self.steps.append([p.grad.detach().clone() for p in params])


GROUPWISE_OPTIONS = {"correctness_reward": "correct", "amir_margin": 0.5}


def settings(out: Path, **options: Any) -> dict[str, Any]:
    """Test settings: SGD without clipping (the gradient is compared raw), float32, 8 tokens,
    2 micro-batches of 6 rows per generation batch, temperature 0.7."""
    return {
        "output_dir": str(out),
        "max_steps": 1,
        "per_device_train_batch_size": 6,
        "gradient_accumulation_steps": 2,
        "num_generations": G,
        "max_completion_length": 8,
        "temperature": TEMPERATURE,
        "loss_type": "grpo",
        "learning_rate": 0.1,
        "lr_scheduler_type": "constant",
        "optim": "sgd",
        "max_grad_norm": 0.0,
        "use_cpu": True,
        "bf16": False,
        "gradient_checkpointing": False,
        "disable_dropout": True,
        "shuffle_dataset": False,
        "report_to": [],
        "logging_steps": 1,
        "save_strategy": "no",
        "dataloader_num_workers": 0,
        "seed": 0,
        **options,
    }


def config(out: Path, **options: Any) -> GroupwiseGRPOConfig:
    """GroupwiseGRPOConfig with the test settings (correctness reward `correct`, margin 0.5)."""
    return GroupwiseGRPOConfig(**settings(out, **{**GROUPWISE_OPTIONS, **options}))


def trl_config(out: Path, **options: Any) -> GRPOConfig:
    """TRL's own GRPOConfig with the same test settings."""
    return GRPOConfig(**settings(out, **options))


def tiny_model() -> tuple[torch.nn.Module, Any]:
    model, tokenizer = load_model("tiny-random", seed=3)
    tokenizer.padding_side = "left"
    return model, tokenizer


def dataset(prompts: Sequence[str] = PROMPTS):
    from datasets import Dataset

    return Dataset.from_list([{"prompt": p} for p in prompts])


def trainer(
    out: Path,
    cls: type = Recording,
    reward_funcs: Sequence[Any] = (correct, bonus),
    prompts: Sequence[str] = PROMPTS,
    args: Any = None,
    **options: Any,
) -> tuple[Any, torch.nn.Module, Gradients]:
    """A trainer of class `cls` on the fixed batch, the untouched initial model, and the
    gradient recorder it reports to."""
    model, tokenizer = tiny_model()
    initial = copy.deepcopy(model)
    grads = Gradients()
    built = cls(
        model=model,
        reward_funcs=list(reward_funcs),
        args=config(out, **options) if args is None else args,
        train_dataset=dataset(prompts),
        processing_class=tokenizer,
        callbacks=[grads],
    )
    return built, initial, grads


def prompt_ids(tokenizer: Any, row: int) -> list[int]:
    """The prompt tokens of a row, tokenized as TRL does for plain-text prompts."""
    return tokenizer(text=[PROMPTS[row // G]])["input_ids"][0]


def row_logps(model: torch.nn.Module, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """log pi(o_t | q, o_<t) of one completion at the sampling temperature, from its own
    unpadded forward pass (with gradient)."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / TEMPERATURE
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(completion)[:, None]).squeeze(1)


def main(out: Path) -> None:
    """One optimizer step of AMIR-GRPO + LENS on the fixed batch, in two layouts, whatever the
    process count: one micro-batch per process (rollout log-probs from the loss's own forward
    pass; lambda from the first micro-batch's loss) and two micro-batches per process (from a
    no-grad pass; fixed lambda, since the first micro-batch's rows depend on the layout). With
    two processes, process 0 holds rows 0-5 then 0-2 and 6-8... of the gathered batch, so group
    1 (rows 4-7) straddles the processes. Rank 0 saves each run's gradient."""
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    layouts = {
        "one micro-batch": {"gradient_accumulation_steps": 1},
        "two micro-batches": {
            "gradient_accumulation_steps": 2,
            "amir_lambda_measure": "fixed",
            "amir_lambda_init": 0.05,
        },
    }
    record = {}
    for name, layout in layouts.items():
        rows = len(COMPLETIONS) // processes // layout["gradient_accumulation_steps"]
        built, _, grads = trainer(
            out / name,
            cls=Recording,
            amir=True,
            advantage_estimator="lens",
            per_device_train_batch_size=rows,
            **layout,
        )
        built.train()
        record[name] = {
            "grads": grads.steps[0],
            "lambda": built.lambda_reg.value,
            "processes": built.accelerator.num_processes,
            "rows_per_process": len(COMPLETIONS) // processes,
            "no_grad_passes": built.no_grad_passes,
        }
    if built.accelerator.is_main_process:
        torch.save(record, out / "step.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
