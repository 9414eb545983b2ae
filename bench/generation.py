"""Completion tokens per second of groupwise's rollout engine against plain `model.generate` and
TRL's GRPOTrainer generation path, at batch 8 / 32 / 64 (questions x G=8 completions).

Model: SmolLM2-135M-Instruct with a LoRA adapter (r=16, alpha=16, all linear layers, random B
so the adapter is not a no-op) as during training; prompts: GSM8K train with the AMIR prompt;
sampling: temperature 1.0, top-p 1.0, at most --max-new-tokens tokens, each row stopping at
EOS. Tokens counted: generated tokens up to and including each row's EOS.

Methods:
- engine, merged fp32 copy / merged bf16 copy: TransformersGenerator(inference_copy=True), as
  the trainer runs it (shared prompt prefill, LoRA merged into a plain copy).
- engine through peft: TransformersGenerator on the peft model (shared prefill, adapter matmuls).
- model.generate (peft): `peft_model.generate(do_sample=True, num_return_sequences=8)`.
- TRL generation path: GRPOTrainer._generate_single_turn (what TRL without vLLM runs each step:
  prompts repeated G times, left padded, `model.generate` on the peft model).

Each cell: a warm-up call, then the median of --repeats timed calls, the methods alternating.

    python bench/generation.py                     # batches 8,32,64, 128 new tokens
    python bench/generation.py --batches 8 --max-new-tokens 32 --repeats 1
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    add_threads_argument,
    load_average,
    markdown_table,
    median,
    parse_with_threads,
    write_results,
)

GROUP = 8


def policy(name: str, device: str):
    """The model + LoRA with a random (seeded) B, the tokenizer, and the prompts."""
    from groupwise.data import load_benchmark, render_prompt
    from groupwise.models import LoraSettings, attach_lora, load_model

    model, tokenizer = load_model(name, device=device)
    model = attach_lora(model, LoraSettings())
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator).to(param) * 1e-3)
    problems = load_benchmark("gsm8k", split="train")[:8]
    prompts = [render_prompt(p, "amir", tokenizer) for p in problems]
    return model.eval(), tokenizer, prompts


def eos_lengths(completions: torch.Tensor, eos: list[int]) -> int:
    """Generated tokens up to and including each row's first EOS (all of a row without one)."""
    is_eos = torch.isin(completions, torch.tensor(eos, device=completions.device))
    width = completions.shape[1]
    first = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, width)
    return int(first.sum())


def methods(model, tokenizer, max_new_tokens: int, scratch: Path) -> dict[str, Callable]:
    """name -> fn(prompts) -> completion tokens generated."""
    from transformers import GenerationConfig

    from groupwise.rollout import SamplingParams, TransformersGenerator
    from groupwise.rollout.transformers_engine import stop_token_ids

    sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens)
    eos = stop_token_ids(model, tokenizer)
    engines = {
        "engine, merged fp32 copy": TransformersGenerator(model, tokenizer, inference_copy=True),
        "engine, merged bf16 copy": TransformersGenerator(
            model, tokenizer, inference_copy=True, dtype=torch.bfloat16
        ),
        "engine through peft": TransformersGenerator(model, tokenizer),
    }

    def engine(generator):
        def run(prompts: list[str]) -> int:
            return int(generator.generate(prompts, GROUP, sampling).completion_mask.sum())

        return run

    config = GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_new_tokens=max_new_tokens,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
        num_return_sequences=GROUP,
    )

    def plain_generate(prompts: list[str]) -> int:
        inputs = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        inputs = inputs.to(next(model.parameters()).device)
        with torch.no_grad():
            out = model.generate(**inputs, generation_config=config)
        return eos_lengths(out[:, inputs["input_ids"].shape[1] :], eos)

    found = {name: engine(g) for name, g in engines.items()}
    found["model.generate (peft)"] = plain_generate
    trl = trl_generation(model, tokenizer, max_new_tokens, scratch)
    if trl is not None:
        found["TRL generation path"] = trl
    return found


def trl_generation(model, tokenizer, max_new_tokens: int, scratch: Path) -> Callable | None:
    """TRL's own per-step generation call on a GRPOTrainer around the same peft model."""
    try:
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer
    except ImportError:
        print("trl not installed: skipping the TRL column (pip install trl==1.16.0)")
        return None
    args = GRPOConfig(
        output_dir=str(scratch / "trl"),
        per_device_train_batch_size=GROUP,
        num_generations=GROUP,
        max_completion_length=max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        bf16=False,
        use_cpu=not torch.cuda.is_available(),
        gradient_checkpointing=False,
        report_to=[],
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **_: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_list([{"prompt": "x"}]),
        processing_class=tokenizer,
    )

    def run(prompts: list[str]) -> int:
        ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
        repeated = [row for row in ids for _ in range(GROUP)]  # TRL's RepeatSampler layout
        completions, _ = trainer._generate_single_turn(repeated, None, {}, GROUP)
        return sum(len(c) for c in completions)

    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="8,32,64", help="completion rows per call")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2, help="timed calls per cell")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="alias or folder")
    add_threads_argument(parser)
    args = parse_with_threads(parser, argv)
    batches = [int(b) for b in args.batches.split(",")]
    if any(b % GROUP for b in batches):
        parser.error(f"batches must be multiples of G={GROUP}")

    load_before = load_average()
    model, tokenizer, prompts = policy(args.model, args.device)
    with tempfile.TemporaryDirectory(prefix="generation-") as scratch:
        runs = methods(model, tokenizer, args.max_new_tokens, Path(scratch))
        rows = []
        for batch in batches:
            chunk = prompts[: batch // GROUP]
            speeds: dict[str, list[float]] = {name: [] for name in runs}
            for repeat in range(args.repeats + 1):
                for name, run in runs.items():
                    start = time.perf_counter()
                    tokens = run(chunk)
                    seconds = time.perf_counter() - start
                    if repeat > 0:  # the first round warms up
                        speeds[name].append(tokens / seconds)
                    print(f"batch {batch} {name}: {tokens} tokens in {seconds:.1f} s", flush=True)
            reference = median(speeds["model.generate (peft)"])
            for name, values in speeds.items():
                rows.append([batch, name, median(values), median(values) / reference])

    table = markdown_table(
        ["batch (questions x 8)", "method", "completion tokens/s", "x model.generate"], rows
    )
    write_results(
        "generation",
        "Rollout engine throughput against model.generate and TRL",
        [("Completion tokens per second (median)", table)],
        load_before=load_before,
        notes=__doc__.split("\n\n")[1] + "\n\n" + __doc__.split("\n\n")[2],
    )


if __name__ == "__main__":
    main()
