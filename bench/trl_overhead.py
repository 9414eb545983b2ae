"""What GroupwiseGRPOTrainer costs over TRL's own GRPOTrainer: seconds per optimizer step of
plain TRL GRPO, AMIR-GRPO, LENS and both, at equal settings, alternating step by step in one
process.

Settings shared by all four: SmolLM2-135M-Instruct from groupwise's cache, LoRA r=16 alpha=16 on
all linear layers, float32, 1 GSM8K-train question x G=8 completions per step, one generation
batch per optimizer step, in --micro-batches micro-batches (TRL keeps no old log-probs then:
with one micro-batch, AMIR and LENS read the rollout log-probs off the loss's own forward pass;
with 2 or more, from one no-grad pass of their own), --max-new-tokens new tokens,
temperature 1.0, the AMIR prompt and the five AMIR-GRPO reward components (groupwise's, as TRL
reward functions), loss "grpo", no KL, AdamW lr 2e-5, no vLLM, no gradient
checkpointing. AMIR's margin is 0.1 so that the untrained model's groups have pairs (with 2.0
they rarely do, and the AMIR term would not run); LENS calibrates the correctness reward (0 or
2.0).

Each trainer runs its own train() in a thread; a baton lets exactly one run at a time, one
optimizer step each in turn (trl, amir, lens, amir+lens, trl, ...), and the RNG is reseeded at
each step's start from the step number, so the four sample the same completions as long as their
weights agree (step 1), and similar ones after. A step is timed from TRL's on_step_begin to
on_step_end: generation, rewards, groupwise's additions, loss, backward, optimizer. Inside the
groupwise trainers, the additions are timed on their own: the no-grad rollout pass (when made)
and the batch terms (gathering, groupwise.algorithms over the gathered batch, handing out the
rows). With vLLM, TRL provides the rollout log-probs (old_per_token_logps, with its
importance-sampling correction on by default), so no pass is made in any layout: the additions
are then the batch terms alone.

    python bench/trl_overhead.py                  # 1 warm-up + 3 measured steps each
    python bench/trl_overhead.py --steps 5 --max-new-tokens 128
    python bench/trl_overhead.py --micro-batches 2 --results trl_overhead_accumulation
    python bench/trl_overhead.py --model FOLDER --bf16 --vllm --variants amir+lens   # a GPU
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from groupwise.data import build_messages, load_benchmark
from groupwise.integrations.trl import GroupwiseGRPOConfig, GroupwiseGRPOTrainer, reward_functions
from groupwise.models import load_model
from groupwise.rewards import AMIR_GRPO_CHECKING, AMIR_GRPO_WEIGHTS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    add_threads_argument,
    load_average,
    markdown_table,
    median,
    parse_with_threads,
    write_results,
)

VARIANTS = {
    "trl": None,  # TRL's own GRPOTrainer
    "amir": {"amir": True, "amir_margin": 0.1},
    "lens": {"advantage_estimator": "lens"},
    "amir+lens": {"amir": True, "amir_margin": 0.1, "advantage_estimator": "lens"},
}


class Baton:
    """Lets the trainers take one optimizer step each, in a fixed order."""

    def __init__(self, order: list[str]) -> None:
        self.order = order
        self.turn = 0
        self.done: set[str] = set()
        self.condition = threading.Condition()

    def _current(self) -> str:
        while self.order[self.turn % len(self.order)] in self.done:
            self.turn += 1
        return self.order[self.turn % len(self.order)]

    def wait(self, name: str) -> None:
        with self.condition:
            self.condition.wait_for(lambda: self._current() == name)

    def pass_on(self) -> None:
        with self.condition:
            self.turn += 1
            self.condition.notify_all()

    def finish(self, name: str) -> None:
        with self.condition:
            self.done.add(name)
            self.condition.notify_all()


def build(name: str, args: argparse.Namespace, out: Path, callback: Any) -> Any:
    """Trainer `name` with the shared settings (module docstring)."""
    problems = load_benchmark("gsm8k", split="train")[: args.warmup + args.steps]
    dataset = Dataset.from_list(
        [{"prompt": build_messages(p, "amir"), "answer": p.answer} for p in problems]
    )
    model, tokenizer = load_model(args.model)
    funcs, weights = reward_functions(AMIR_GRPO_WEIGHTS, workers=1, checking=AMIR_GRPO_CHECKING)
    settings = {
        "output_dir": str(out / name),
        "max_steps": args.warmup + args.steps,
        "per_device_train_batch_size": 8 // args.micro_batches,
        "gradient_accumulation_steps": args.micro_batches,
        "num_generations": 8,
        "max_completion_length": args.max_new_tokens,
        "temperature": 1.0,
        "loss_type": "grpo",
        "beta": 0.0,
        "learning_rate": 2e-5,
        "reward_weights": weights,
        "bf16": args.bf16,
        "use_cpu": not torch.cuda.is_available(),
        "use_vllm": args.vllm,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": 0.3,
        "gradient_checkpointing": False,
        "disable_dropout": True,
        "shuffle_dataset": False,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "disable_tqdm": True,
        "seed": 0,
        "dataloader_num_workers": 0,
    }
    lora = LoraConfig(r=16, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM")
    common = {
        "model": model,
        "reward_funcs": funcs,
        "train_dataset": dataset,
        "processing_class": tokenizer,
        "peft_config": lora,
        "callbacks": [callback],
    }
    if VARIANTS[name] is None:
        return GRPOTrainer(args=GRPOConfig(**settings), **common)
    options = {"correctness_reward": "correctness", "correctness_value": 2.0, **VARIANTS[name]}
    return TimedGroupwise(args=GroupwiseGRPOConfig(**settings, **options), **common)


class TimedGroupwise(GroupwiseGRPOTrainer):
    """Times groupwise's additions of each generation batch: the no-grad rollout pass (when
    made) and the batch terms."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pass_seconds: list[float] = []
        self.terms_seconds: list[float] = []

    def _no_grad_logps(self, batch):
        start = time.perf_counter()
        try:
            return super()._no_grad_logps(batch)
        finally:
            self.pass_seconds.append(time.perf_counter() - start)

    def _finish_terms(self, batch, pending, mean_logp):
        start = time.perf_counter()
        try:
            return super()._finish_terms(batch, pending, mean_logp)
        finally:
            self.terms_seconds.append(time.perf_counter() - start)


def run(args: argparse.Namespace, scratch: Path) -> dict[str, list[dict[str, float]]]:
    order = args.variants
    baton = Baton(order)
    records: dict[str, list[dict[str, float]]] = {name: [] for name in order}

    class Turn(TrainerCallback):
        def __init__(self, name: str) -> None:
            self.name = name
            self.started = threading.Event()

        def on_train_begin(self, args_, state, control, **kwargs):
            self.started.set()  # set-up done: the next trainer may set up

        def on_step_begin(self, args_, state, control, **kwargs):
            baton.wait(self.name)
            torch.manual_seed(1000 + state.global_step)
            self.start = time.perf_counter()

        def on_step_end(self, args_, state, control, **kwargs):
            records[self.name].append({"seconds": time.perf_counter() - self.start})
            print(
                f"[{self.name}] step {state.global_step}: {records[self.name][-1]['seconds']:.1f} s"
                f", load {load_average()}",
                flush=True,
            )
            baton.pass_on()

        def on_log(self, args_, state, control, logs=None, **kwargs):
            if logs and "completions/mean_length" in logs and records[self.name]:
                records[self.name][-1]["tokens"] = logs["completions/mean_length"] * 8
                records[self.name][-1]["pairs"] = logs.get("amir/pairs", float("nan"))

    turns = {name: Turn(name) for name in order}
    trainers = {name: build(name, args, scratch, turns[name]) for name in order}
    errors: list[BaseException] = []

    def train(name: str) -> None:
        try:
            trainers[name].train()
        except BaseException as err:  # reported after the threads end
            errors.append(err)
        finally:
            turns[name].started.set()
            baton.finish(name)

    threads = [threading.Thread(target=train, args=(name,)) for name in order]
    for name, thread in zip(order, threads, strict=True):
        thread.start()  # one at a time through train()'s set-up (accelerate's shared state)
        turns[name].started.wait()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    for name, trainer in trainers.items():
        for i, record in enumerate(records[name]):  # one generation batch per step
            if isinstance(trainer, TimedGroupwise):
                record["pass"] = trainer.pass_seconds[i] if trainer.pass_seconds else 0.0
                record["added"] = record["pass"] + trainer.terms_seconds[i]
    return {name: recs[args.warmup :] for name, recs in records.items()}


def _one_malloc_arena() -> None:
    """Restart with MALLOC_ARENA_MAX=1: glibc gives each thread its own malloc arena, which keeps
    its peak, so the four trainers' threads would hold four step peaks (about 5 GB each here)."""
    if sys.platform.startswith("linux") and os.environ.get("MALLOC_ARENA_MAX") != "1":
        environment = {**os.environ, "MALLOC_ARENA_MAX": "1"}
        os.execve(sys.executable, [sys.executable, *sys.argv], environment)


def main(argv: list[str] | None = None) -> None:
    if argv is None:
        _one_malloc_arena()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=1, help="uncounted first steps of each")
    parser.add_argument("--steps", type=int, default=3, help="measured steps of each")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="completion length cap")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"comma list of {', '.join(VARIANTS)}"
    )
    parser.add_argument(
        "--model", default="smollm2-135m-instruct", help="alias, folder or hub id to load"
    )
    parser.add_argument("--bf16", action="store_true", help="TRL's bf16 autocast (GPUs)")
    parser.add_argument(
        "--vllm", action="store_true", help="generate with vLLM colocate (one variant a process)"
    )
    parser.add_argument(
        "--micro-batches",
        type=int,
        default=1,
        choices=(1, 2, 4, 8),
        help="gradient-accumulation steps per optimizer step (the 8 completions split evenly)",
    )
    parser.add_argument("--results", default="trl_overhead", help="bench/results/NAME.md")
    add_threads_argument(parser)
    args = parse_with_threads(parser, argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; valid: {', '.join(VARIANTS)}")
    if args.vllm and len(args.variants) > 1:
        parser.error("--vllm: one variant per process (each trainer would start a vLLM engine)")
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="trl_overhead-") as scratch:
        records = run(args, Path(scratch))

    base = median([r["seconds"] for r in records["trl"]]) if "trl" in records else float("nan")
    rows, details = [], []
    for name, recs in records.items():
        seconds = median([r["seconds"] for r in recs])
        for r in recs:  # TRL's own work in the step: the step less groupwise's additions
            r["rest"] = r["seconds"] - r.get("added", 0.0)
            r["terms"] = r.get("added", 0.0) - r.get("pass", 0.0)
        rows.append(
            [
                name,
                len(recs),
                seconds,
                seconds / base,
                median([r.get("tokens", float("nan")) for r in recs]),
                median([r.get("pairs", float("nan")) for r in recs]),
                median([r.get("pass", 0.0) for r in recs]),
                median([r["terms"] for r in recs]),
                median([r.get("added", 0.0) / r["rest"] for r in recs]),
                median([r["terms"] / r["rest"] for r in recs]),
            ]
        )
        for i, r in enumerate(recs, 1):
            tokens = r.get("tokens", float("nan"))
            details.append([name, i, r["seconds"], tokens, r.get("pass", 0.0), r["terms"]])
    table = markdown_table(
        [
            "trainer",
            "steps",
            "median s/step",
            "x TRL",
            "median completion tokens",
            "median pairs",
            "rollout pass s",
            "batch terms s",
            "overhead without vLLM",
            "overhead with vLLM",
        ],
        rows,
    )
    import trl

    notes = (
        "'x TRL': median s/step over plain TRL's, whole steps (noisy: the machine is shared, "
        "and samples drift apart after step 1). 'overhead': groupwise's additions timed inside "
        "each step (the no-grad rollout pass + the batch terms, medians in the two columns "
        "before) over the rest of that same step, which is TRL's own work; the median over "
        "steps. Measured within one step, it is robust to the machine's load, which the "
        "whole-step ratio is not. 'with vLLM': the batch terms alone, since TRL then provides "
        "the rollout log-probs (no pass). Not in either: the AMIR term inside the loss (a "
        "masked mean and a dot product on the log-probs TRL's loss computes anyway). "
        f"TRL {trl.__version__}.\n\n" + __doc__.split("\n\n")[1]
    )
    details_table = markdown_table(
        ["trainer", "step", "seconds", "tokens", "rollout pass s", "batch terms s"], details
    )
    write_results(
        args.results,
        "GroupwiseGRPOTrainer over TRL's GRPOTrainer: seconds per step",
        [("Medians", table), ("Every measured step", details_table)],
        load_before=load_before,
        notes=notes,
    )


if __name__ == "__main__":
    main()
