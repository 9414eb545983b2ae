"""groupwise against TRL's GRPOTrainer: seconds per training step and completion tokens per
second at equal settings, in one process, alternating step by step.

Settings shared by both (configs/quickstart_gsm8k.yaml with AMIR off, i.e. plain GRPO):
SmolLM2-135M-Instruct from groupwise's cache folder, LoRA r=16 alpha=16 on all linear layers,
1 GSM8K-train question x G=8 completions of at most 128 new tokens, temperature 1.0, top-p 1.0,
no top-k, loss "grpo" (token mean per completion, then mean), clip 0.2, group-scaled
advantages (eps 1e-4), no KL (beta 0), one update per batch, AdamW lr 2e-5 (wd 0.1, betas
0.9/0.99), grad-norm clip 0.1, cosine schedule with 10 % warm-up, the AMIR prompt and the same
five reward components (groupwise's RewardSuite, wrapped as TRL's reward function), the same
questions in the same order, no vLLM, no gradient checkpointing.

Precision variants (--variants):
- fp32: both train in float32; groupwise samples from its merged float32 inference copy.
- fp32-bf16rollout: both train in float32; groupwise samples from a bfloat16 inference copy
  (as a vLLM-in-bf16 setup would).
- bf16: TRL's default bf16=True (autocast, float32 master weights); groupwise's
  model.dtype=bfloat16 (bfloat16 base weights, float32 LoRA weights and optimizer).

TRL runs its own train() loop; a callback times each of its steps (step begin to step end:
generation, scoring, loss, backward, optimizer) and, once a TRL step has ended, runs and times
one groupwise step, so the two alternate and share whatever the machine is doing. The first
--warmup steps of each are not counted. TRL is a bench-only dependency (pip install trl==1.16.0).

    python bench/step_vs_trl.py                       # fp32, 1 warm-up + 3 measured steps each
    python bench/step_vs_trl.py --variants fp32,fp32-bf16rollout,bf16 --steps 5
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    REPO,
    add_threads_argument,
    load_average,
    lora_config,
    markdown_table,
    median,
    parse_with_threads,
    trl_grpo_settings,
    write_results,
)

VARIANTS = {
    # name: (groupwise overrides, TRL bf16)
    "fp32": (["model.dtype=float32", "rollout.dtype=auto"], False),
    "fp32-bf16rollout": (["model.dtype=float32", "rollout.dtype=bfloat16"], False),
    "bf16": (["model.dtype=bfloat16", "rollout.dtype=auto"], True),
}


def groupwise_trainer(overrides: list[str], steps: int, out: Path):
    from groupwise.train.preflight import load_run_config
    from groupwise.train.trainer import Trainer

    config = load_run_config(
        REPO / "configs" / "quickstart_gsm8k.yaml",
        [
            "algorithm.amir=false",
            f"train.max_steps={steps}",
            "train.progress=false",
            "train.log_rollouts=false",
            f"train.output_dir={out}",
            *overrides,
        ],
    )
    return Trainer(config)


def trl_trainer(gw, problems: list, bf16: bool, steps: int, out: Path, callback):
    """TRL's GRPOTrainer configured as the groupwise trainer `gw` (module docstring)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from groupwise.data.prompts import build_messages
    from groupwise.shipped_models import smollm2_model_dir

    cfg = gw.config
    folder = smollm2_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    # Conversational prompts: TRL applies the chat template with the generation prompt, which
    # is exactly groupwise's render_prompt; the dataset holds the questions groupwise sees.
    dataset = Dataset.from_list(
        [{"prompt": build_messages(p, cfg.data.prompt), "answer": p.answer} for p in problems]
    )

    def rewards(prompts, completions, answer, **_):
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        return gw.rewards.score(texts, list(answer)).total.tolist()

    args = GRPOConfig(
        **trl_grpo_settings(cfg, out, steps),
        bf16=bf16,
        use_cpu=not torch.cuda.is_available(),
    )
    peft_config = lora_config(cfg)
    return GRPOTrainer(
        model=model,
        reward_funcs=rewards,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[callback],
    )


def run_variant(name: str, warmup: int, steps: int, scratch: Path) -> dict[str, list[dict]]:
    """Alternating steps of both trainers; returns per-step records for each."""
    from transformers import TrainerCallback

    overrides, bf16 = VARIANTS[name]
    total = warmup + steps
    gw = groupwise_trainer(overrides, total, scratch / f"groupwise-{name}")
    problems = [p for s in range(total) for p in gw.sampler.batch(s)]
    records: dict[str, list[dict]] = {"groupwise": [], "trl": []}

    class Alternate(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            records["trl"].append({"seconds": time.perf_counter() - self.start})
            start = time.perf_counter()
            metrics, _ = gw.train_step()
            gw.step += 1
            records["groupwise"].append(
                {
                    "seconds": time.perf_counter() - start,
                    "tokens": metrics["completion_tokens"],
                    "generation": metrics["seconds_generation"],
                    "scoring": metrics["seconds_scoring"],
                    "training": metrics["seconds_training"],
                }
            )
            print(
                f"[{name}] step {state.global_step}: TRL {records['trl'][-1]['seconds']:.1f} s, "
                f"groupwise {records['groupwise'][-1]['seconds']:.1f} s "
                f"({metrics['completion_tokens']} tokens), load {load_average()}",
                flush=True,
            )

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "completions/mean_length" in logs and records["trl"]:
                # Logged after the step it describes: 8 completions of this mean length.
                rows = gw.config.rollout.group_size * gw.config.rollout.questions_per_step
                records["trl"][-1]["tokens"] = logs["completions/mean_length"] * rows

    trl = trl_trainer(gw, problems, bf16, total, scratch / f"trl-{name}", Alternate())
    trl.train()
    return {who: recs[warmup:] for who, recs in records.items()}


def summarize(name: str, records: dict[str, list[dict]]) -> list[list[object]]:
    rows = []
    stats = {}
    for who in ("trl", "groupwise"):
        recs = records[who]
        seconds = median([r["seconds"] for r in recs])
        tokens = median([r.get("tokens", float("nan")) for r in recs])
        tok_s = median([r.get("tokens", float("nan")) / r["seconds"] for r in recs])
        stats[who] = (seconds, tok_s)
        split = (
            " / ".join(
                f"{median([r[k] for r in recs]):.1f}" for k in ("generation", "scoring", "training")
            )
            if who == "groupwise"
            else "n/a"
        )
        label = "TRL GRPOTrainer" if who == "trl" else "groupwise"
        rows.append([name, label, len(recs), seconds, tokens, tok_s, split])
    speed = stats["groupwise"][1] / stats["trl"][1]
    rows.append(
        [name, "**groupwise / TRL**", "", stats["trl"][0] / stats["groupwise"][0], "", speed, ""]
    )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="fp32", help=f"comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted first steps of each")
    parser.add_argument("--steps", type=int, default=3, help="measured steps of each")
    add_threads_argument(parser)
    args = parse_with_threads(parser, argv)
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; valid: {', '.join(VARIANTS)}")

    load_before = load_average()
    rows, details = [], []
    with tempfile.TemporaryDirectory(prefix="step_vs_trl-") as scratch:
        for name in names:
            records = run_variant(name, args.warmup, args.steps, Path(scratch))
            rows += summarize(name, records)
            for who, recs in records.items():
                for i, r in enumerate(recs, 1):
                    details.append([name, who, i, r["seconds"], r.get("tokens", float("nan"))])

    table = markdown_table(
        [
            "precision",
            "trainer",
            "steps",
            "median s/step",
            "median completion tokens/step",
            "median completion tokens/s",
            "groupwise split gen / score / train (s)",
        ],
        rows,
    )
    notes = (
        "Ratio row: 'median s/step' holds TRL's s/step over groupwise's (how many times faster a "
        "step is), 'median completion tokens/s' holds groupwise's tokens/s over TRL's (the "
        "target: >= 2). Completion lengths differ between the two (independent samples), hence "
        "tokens/s as the fair measure. TRL " + _trl_version() + "."
    )
    details_table = markdown_table(["precision", "trainer", "step", "seconds", "tokens"], details)
    write_results(
        "step_vs_trl",
        "groupwise vs TRL GRPOTrainer: step time at equal settings",
        [("Medians", table), ("Every measured step", details_table)],
        load_before=load_before,
        notes=notes + "\n\n" + __doc__.split("\n\n")[1],
    )


def _trl_version() -> str:
    import trl

    return trl.__version__


if __name__ == "__main__":
    main()
