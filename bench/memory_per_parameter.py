"""What one process of `groupwise train` holds per parameter of the model: weights, gradients,
AdamW's state and the inference copy, in bytes per parameter, for full fine-tuning and LoRA in
float32 and bfloat16 (docs/guides/distributed.md, "Where the line is").

groupwise's own trainer is data parallel: every process holds all of this, so a model fits when
bytes per parameter x parameters + activations fit in one device's memory. The counts are of
the tensors themselves after one real training step (gradients as they stand just before
AdamW's step, each storage counted once: tied embeddings share one), divided by the model's
parameter count (adapters excluded); the peak resident set of the process (activations,
libraries, the Python heap) is given beside them.

    python bench/memory_per_parameter.py                 # SmolLM2-135M, 6 settings
    python bench/memory_per_parameter.py --model tiny-random
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    REPO,
    add_threads_argument,
    load_average,
    markdown_table,
    parse_with_threads,
    write_results,
)

SETTINGS = {
    # name: config overrides (full fine-tuning: AMIR reference-free, since its reference is the
    # model with the adapter disabled)
    "full float32": ["model.lora=false", "algorithm.ref_free=true"],
    "full bfloat16": ["model.lora=false", "algorithm.ref_free=true", "model.dtype=bfloat16"],
    "LoRA float32": [],
    "LoRA float32, bfloat16 inference copy": ["rollout.dtype=bfloat16"],
    "LoRA float32, no inference copy": ["rollout.inference_copy=false"],
    "LoRA bfloat16": ["model.dtype=bfloat16"],
}
PARTS = ("weights", "gradients", "optimizer", "inference copy")


def tensor_bytes(tensors: Iterable[torch.Tensor], seen: set[int]) -> int:
    """Bytes of the storages behind `tensors`, each storage once (over calls sharing `seen`)."""
    total = 0
    for tensor in tensors:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total


def one_setting(model: str, overrides: list[str]) -> dict:
    """Runs in its own process: one training step, then the bytes each part holds."""
    from groupwise.train.preflight import load_run_config
    from groupwise.train.trainer import Trainer

    with tempfile.TemporaryDirectory(prefix="memory-") as scratch:
        config = load_run_config(
            REPO / "configs" / "quickstart_gsm8k.yaml",
            [
                f"model.name={model}",
                "rollout.group_size=4",
                "rollout.max_new_tokens=16",
                "train.micro_batch_size=4",
                "train.max_steps=1",
                "train.progress=false",
                "train.log_rollouts=false",
                f"train.output_dir={scratch}",
                *overrides,
            ],
        )
        trainer = Trainer(config)
        optimizer = trainer.updater.optimizer
        gradients: dict[str, int] = {}

        def before_step(opt, args, kwargs) -> None:
            params = [p for group in opt.param_groups for p in group["params"]]
            gradients["bytes"] = tensor_bytes((p.grad for p in params if p.grad is not None), set())

        optimizer.register_step_pre_hook(before_step)
        trainer.train_step()
        model_ = trainer.model
        seen: set[int] = set()
        named = list(model_.named_parameters())
        base = [p for name, p in named if "lora_" not in name]
        weights = tensor_bytes([p for _, p in named] + list(model_.buffers()), seen)
        decoder = trainer.generator.decoder_model
        copy = 0 if decoder is model_ else tensor_bytes(decoder.state_dict().values(), seen)
        states = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
        unique = {p.untyped_storage().data_ptr(): p.numel() for p in base}  # tied: once
        result = {
            "parameter_count": sum(unique.values()),
            "trainable": sum(p.numel() for p in trainer.params),
            "weights": weights,
            "gradients": gradients["bytes"],
            "optimizer": tensor_bytes(states, set()),
            "inference copy": copy,
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        }
        trainer.close()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: a SETTINGS name
    parser.add_argument("--json", help=argparse.SUPPRESS)  # internal: where --one writes
    add_threads_argument(parser)
    args = parse_with_threads(parser, argv)

    if args.one:
        Path(args.json).write_text(json.dumps(one_setting(args.model, SETTINGS[args.one])))
        return

    load_before = load_average()
    rows = []
    with tempfile.TemporaryDirectory(prefix="memory-") as scratch:
        for name in SETTINGS:
            out = Path(scratch) / "one.json"
            threads = [f"--threads={args.threads}"] if args.threads else []
            command = [sys.executable, __file__, "--model", args.model, "--one", name]
            subprocess.run([*command, "--json", str(out), *threads], check=True)
            result = json.loads(out.read_text())
            count = result["parameter_count"]
            per = [result[part] / count for part in PARTS]
            rows.append(
                [
                    name,
                    f"{count / 1e6:.1f} M",
                    f"{result['trainable'] / count:.2%}",
                    *per,
                    sum(per),
                    result["peak_rss"] / 2**30,
                ]
            )
            print(rows[-1], f"load {load_average()}", flush=True)

    table = markdown_table(
        [
            "setting",
            "parameters",
            "trainable",
            *(f"{part} B/param" for part in PARTS),
            "total B/param",
            "peak resident set (GiB)",
        ],
        rows,
    )
    write_results(
        "memory_per_parameter",
        f"Bytes per parameter one process of `groupwise train` holds ({args.model})",
        [("After one training step", table)],
        load_before=load_before,
        notes=__doc__.split("\n\n")[1] + "\n\n" + __doc__.split("\n\n")[2],
    )


if __name__ == "__main__":
    main()
