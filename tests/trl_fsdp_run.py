"""A few optimizer steps of GroupwiseGRPOTrainer (AMIR-GRPO + LENS) on trl_support's fixed batch,
in one process or under `accelerate launch` (FSDP2, DeepSpeed ZeRO; on a CPU with gloo, on GPUs
with NCCL), for tests/test_trl_fsdp.py and scripts/gpu_check.sh's sharded stage; see
docs/guides/distributed.md.

    python tests/trl_fsdp_run.py OUT full lora
    accelerate launch --config_file examples/accelerate/fsdp2.yaml --num_processes 2 \\
        --mixed_precision no --fsdp_state_dict_type SHARDED_STATE_DICT \\
        tests/trl_fsdp_run.py OUT full lora
    accelerate launch ... tests/trl_fsdp_run.py OUT2 resume --checkpoint OUT/full/checkpoint-2

Each case (CASES) is a fresh trainer on a fresh model for STEPS optimizer steps. The global
batch is the same whatever the process count: 12 rows (3 prompts x G = 4) per optimizer step,
split evenly over the processes and the case's micro-batches. Rank 0 writes OUT/CASE/run.pt: the
final weights (gathered from the shards), the logged metrics per step, and what the run was
(processes, accelerate's distributed type, the share of the parameters each process held, the
checkpoint's folders).

On a CPU accelerate does not shard: with `use_cpu` it keeps its MULTI_CPU (plain data parallel)
type and drops the FSDP plugin; without `use_cpu` it sets up no process group. `shard_on_cpu`
is the documented override (docs/guides/distributed.md, "FSDP2 on a CPU"): it keeps accelerate's
own FSDP plugin, built from the shipped fsdp2.yaml, and sets the distributed type to FSDP, so that
accelerate's fully_shard, sharded checkpoints and state-dict gathering run unchanged on gloo.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import Any

import torch
import trl_support as fx
from transformers import TrainerCallback


def shard_on_cpu() -> None:
    """Under `accelerate launch` with an FSDP config and no GPU: make AcceleratorState keep the
    FSDP plugin and the FSDP distributed type on the CPU (gloo) instead of falling back to
    MULTI_CPU. Does nothing with a GPU, without FSDP, or in a single process."""
    if torch.cuda.is_available() or os.environ.get("ACCELERATE_USE_FSDP", "").lower() != "true":
        return
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    original = AcceleratorState.__init__

    def init(self, *args: Any, fsdp_plugin: Any = None, **kwargs: Any) -> None:
        original(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin
            PartialState._shared_state["distributed_type"] = DistributedType.FSDP

    AcceleratorState.__init__ = init


def gloo_reductions() -> None:
    """Under DeepSpeed on a CPU: DeepSpeed's reductions through torch.distributed (gloo) instead
    of its shared-memory kernel, which it compiles on first use (3 minutes here, on every fresh
    machine); numerically the same sums. Does nothing with a GPU or without DeepSpeed."""
    if (
        torch.cuda.is_available()
        or os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() != "true"
    ):
        return
    # by module name: the package attribute deepspeed.comm.torch is torch itself
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None


class Shards(TrainerCallback):
    """At the start of training: the share of the model's parameters this process holds (1.0
    unsharded; 1 / processes under FSDP2 or ZeRO-3)."""

    def __init__(self) -> None:
        self.share: float | None = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        total = held = 0
        for p in model.parameters():
            local = p.to_local() if hasattr(p, "to_local") else p  # FSDP2: DTensor shards
            full = getattr(p, "ds_numel", p.numel())  # ZeRO-3: the full size of a partition
            held += getattr(p, "ds_tensor", local).numel()
            total += full
        self.share = held / total


CASES: dict[str, dict[str, Any]] = {
    # full fine-tuning, one micro-batch per process (the rollout log-probs from the loss's own
    # forward pass), the adaptive lambda; a checkpoint at step 2 of 4
    "full": {"lora": False, "accumulation": 1, "measure": "loss", "save_at": 2},
    # the same run resumed from that checkpoint (--checkpoint), for steps 3 and 4
    "resume": {"lora": False, "accumulation": 1, "measure": "loss", "save_at": 0},
    # LoRA (r 8, every linear layer), two micro-batches per process (a no-grad pass gives the
    # rollout log-probs); lambda fixed, since the rule reads the first micro-batch's loss,
    # whose rows depend on the layout (docs/guides/distributed.md)
    "lora": {"lora": True, "accumulation": 2, "measure": "fixed", "save_at": 0},
}
STEPS = 4


def run(out: Path, case: str, checkpoint: Path | None) -> None:
    """One case of CASES: STEPS optimizer steps into `out`; rank 0 writes out/run.pt."""
    setting = CASES[case]
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    deepspeed = os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true"
    peft_config = None
    if setting["lora"]:
        from peft import LoraConfig

        peft_config = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear")
    fixed = setting["measure"] == "fixed"
    args = fx.config(
        out,
        amir=True,
        advantage_estimator="lens",
        amir_lambda_measure=setting["measure"],
        amir_lambda_init=0.05 if fixed else 0.01,
        max_steps=STEPS,
        per_device_train_batch_size=len(fx.COMPLETIONS) // processes // setting["accumulation"],
        gradient_accumulation_steps=setting["accumulation"],
        optim="adamw_torch",
        learning_rate=1e-3 if setting["lora"] else 3e-4,
        max_grad_norm=1.0,
        # TRL's default loss. On-policy its L_GRPO is small, so the official band (0.3, 0.7)
        # would shrink lambda at every step whatever the losses; with this band lambda grows,
        # holds and shrinks within the 4 steps, on the losses measured
        loss_type="dapo",
        amir_lambda_low=5.0,
        amir_lambda_high=20.0,
        save_strategy="steps" if setting["save_at"] else "no",
        save_steps=setting["save_at"] or 500,
        # On a CPU: DeepSpeed sets its process group up itself (gloo, from ddp_backend), and
        # with use_cpu accelerate would leave it out (plain MULTI_CPU); FSDP2 and one process
        # take accelerate's CPU path (shard_on_cpu). On GPUs: NCCL, as TRL sets it up.
        use_cpu=not (deepspeed or torch.cuda.is_available()),
        ddp_backend="gloo" if processes > 1 and not torch.cuda.is_available() else None,
    )
    model, tokenizer = fx.tiny_model()
    shards = Shards()
    trainer = type("Run", (fx.FixedCompletions, fx.GroupwiseGRPOTrainer), {})(
        model=model,
        reward_funcs=[fx.correct, fx.bonus],
        args=args,
        train_dataset=fx.dataset(),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[shards],
    )
    trainer.train(resume_from_checkpoint=None if checkpoint is None else str(checkpoint))
    # gathered from every process's shards (ZeRO-3: from the engine, model_wrapped)
    state = trainer.accelerator.get_state_dict(trainer.model_wrapped)
    if trainer.accelerator.is_main_process:
        torch.save(
            {
                "weights": {k: v.detach().float().cpu().clone() for k, v in state.items()},
                "logs": [entry for entry in trainer.state.log_history if "loss" in entry],
                "lambda": trainer.lambda_reg.value,
                "processes": trainer.accelerator.num_processes,
                "distributed_type": str(trainer.accelerator.distributed_type).split(".")[-1],
                "share": shards.share,
                "checkpoint_folders": sorted(
                    path.name for path in out.glob("checkpoint-*/*") if path.is_dir()
                ),
            },
            out / "run.pt",
        )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder: one sub-folder per case")
    parser.add_argument("cases", nargs="+", choices=list(CASES))
    parser.add_argument("--checkpoint", type=Path, help="the checkpoint the resume case loads")
    options = parser.parse_args(argv)
    if "resume" in options.cases and options.checkpoint is None:
        parser.error("the resume case needs --checkpoint")
    shard_on_cpu()
    gloo_reductions()
    for case in options.cases:
        checkpoint = options.checkpoint if case == "resume" else None
        run(options.out / case, case, checkpoint)


if __name__ == "__main__":
    main(sys.argv[1:])
