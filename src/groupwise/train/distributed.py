"""Data-parallel training across processes, or none: what the trainer needs from
torch.distributed, behind one small object that is a no-op in a single process.

Launch: `torchrun --nproc_per_node N -m groupwise train ...` (CPU: gloo; GPUs: NCCL, one GPU per
process), or `accelerate launch --num_processes N -m groupwise train ...`; both set the
RANK / WORLD_SIZE / LOCAL_RANK environment this module reads. Every process holds the whole
model (with LoRA the trainable part is small) and takes its own questions of each step; their
losses are normalised by global counts (completions, tokens, pairs), so the sum of the
processes' gradients is the gradient of the whole batch, and one all-reduce of the trainable
gradients before clipping makes every process take the same optimizer step.

Why not DistributedDataParallel: DDP expects one forward and one backward per update; a step
here runs the prompt and the completions as two forward calls that share a cache, an
adapter-disabled reference pass, and (lambda_measure=grad) an autograd.grad of the preference
term alone, none of which fits its contract. The single all-reduce after the micro-batches
moves the same bytes as DDP's buckets (for LoRA a few MB per update) and keeps the
single-process path free of any wrapper.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

# Gradients are all-reduced in flat buckets of at most this many elements (bounded memory).
_BUCKET_ELEMENTS = 1 << 26


def requested_device(requested: str) -> str:
    """model.device with "auto" made a device type: "cuda" where a GPU is there, else "cpu"."""
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def processes_from_environment() -> int:
    """The number of processes of this run, as torchrun / accelerate set it (WORLD_SIZE)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


class Distributed:
    """Rank, world size and the few collectives of a training step.

    In a single process (no WORLD_SIZE > 1 in the environment) every method is the identity,
    so the single-process step pays nothing.
    """

    def __init__(self) -> None:
        self.world_size = processes_from_environment()
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self._owns_group = False
        if self.world_size > 1 and not dist.is_initialized():
            for unsupported in ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"):
                if os.environ.get(unsupported, "").lower() in ("1", "true"):
                    raise RuntimeError(
                        f"{unsupported} is set (accelerate config): groupwise trains data "
                        "parallel with a full model copy per process; choose 'multi-GPU' "
                        "(or 'multi-CPU') in `accelerate config`, or launch with torchrun"
                    )
            backend = "nccl" if torch.cuda.is_available() else "gloo"
            if backend == "nccl":
                torch.cuda.set_device(self.local_rank)
            dist.init_process_group(backend=backend)
            self._owns_group = True

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes logs, checkpoints and the final model."""
        return self.rank == 0

    def device(self, requested: str) -> str:
        """The torch device of this process: "auto" and "cuda" mean this process's GPU
        (cuda:LOCAL_RANK) when GPUs are there; anything else as given."""
        requested = requested_device(requested)
        if requested == "cuda" and self.world_size > 1:
            return f"cuda:{self.local_rank}"
        return requested

    def question_shard(
        self, questions: int, minibatches: int = 1, rank: int | None = None
    ) -> list[int]:
        """This process's (or process `rank`'s) questions of a step: its contiguous share of
        each of the `minibatches` consecutive parts, mini-batch-major. With one mini-batch (and
        in one process) that is a contiguous slice; the process count x minibatches must divide
        `questions`."""
        parts = self.world_size * minibatches
        if questions % parts:
            raise ValueError(
                f"{questions} questions do not split into {minibatches} mini-batches over "
                f"{self.world_size} processes"
            )
        per_minibatch, per_process = questions // minibatches, questions // parts
        return [
            m * per_minibatch + (self.rank if rank is None else rank) * per_process + i
            for m in range(minibatches)
            for i in range(per_process)
        ]

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum over processes of a list of numbers (float64)."""
        if self.world_size == 1:
            return [float(v) for v in values]
        buffer = torch.tensor(list(values), dtype=torch.float64, device=self._comm_device())
        dist.all_reduce(buffer)
        return buffer.tolist()

    def any(self, flag: bool) -> bool:
        """True when any process passes True (e.g. a stop request seen by one of them)."""
        return bool(self.sum([float(flag)])[0] > 0) if self.world_size > 1 else flag

    def gather(self, obj: Any) -> list[Any]:
        """Every process's `obj` (picklable), in rank order, on every process."""
        if self.world_size == 1:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def place(self, rows: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
        """Every process's [b] values `local` of its rows `rows` ([b] indices into the whole
        batch) placed at those rows: [B], the same on every process."""
        parts = self.gather((rows, local.cpu()))
        rows_all = torch.cat([part[0] for part in parts])
        out = torch.zeros(rows_all.numel(), dtype=local.dtype)
        out[rows_all] = torch.cat([part[1] for part in parts])
        return out

    def sum_gradients(
        self, params: Sequence[torch.Tensor], extra: Sequence[torch.Tensor] = ()
    ) -> None:
        """Replace the .grad of each parameter (a missing one counts as zeros and is created)
        and each `extra` tensor by its sum over the processes, in place: flat buckets, one
        all-reduce each. Shapes must match across processes (same model, same order)."""
        if self.world_size == 1:
            return
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        bucket: list[torch.Tensor] = []
        filled = 0
        for tensor in [*(p.grad for p in params), *extra, None]:
            if bucket and (tensor is None or filled + tensor.numel() > _BUCKET_ELEMENTS):
                flat = torch.cat([t.reshape(-1) for t in bucket])
                dist.all_reduce(flat)
                for t, part in zip(bucket, flat.split([t.numel() for t in bucket]), strict=True):
                    t.copy_(part.view_as(t))
                bucket, filled = [], 0
            if tensor is not None:
                bucket.append(tensor)
                filled += tensor.numel()

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()

    def close(self) -> None:
        """Leave the process group if this object created it."""
        if self._owns_group:
            dist.barrier()
            dist.destroy_process_group()
            self._owns_group = False

    def _comm_device(self) -> torch.device:
        return (
            torch.device("cuda", torch.cuda.current_device())
            if dist.get_backend() == "nccl"
            else torch.device("cpu")
        )
