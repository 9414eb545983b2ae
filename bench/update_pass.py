"""The training forward and backward pass on a CPU, with glibc's default malloc and with
freed memory kept (groupwise.train.host_memory, what `groupwise train` sets on a CPU), in float32
and under bfloat16 autocast (`train.precision=bfloat16`: float32 weights and LoRA, the matmuls
in bfloat16, the log-softmax of the sampled tokens in float32).

SmolLM2-135M-Instruct + LoRA 16/16 (float32, all linear layers), the update of the
vLLM-vs-TRL bench: 2 prompts of 266 tokens x 8 completions of 128 tokens (random ids),
`groupwise.completion_logprobs.completion_logprobs` with the shared prompt pass, then backward of
the sum. Each variant runs in its own process (the malloc setting is process-wide), the variants
alternating, `--repeats` passes per process after one warm-up pass.

    python bench/update_pass.py                 # 3 rounds x 4 passes per variant

Writes bench/results/update_pass.md; the code before the one-buffer log-prob backward is a
dated row of its History.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import chosen_variants, load_average, markdown_table, median, write_results

VARIANTS = {
    "glibc default": (False, "float32"),
    "freed memory kept": (True, "float32"),
    "freed memory kept + bfloat16 autocast": (True, "bfloat16"),
}
"""name -> (freed memory kept, train.precision)."""


def measure(keep: bool, precision: str, repeats: int) -> list[tuple[float, float]]:
    """(forward s, backward s) of `repeats` passes after one warm-up, in this process."""
    import contextlib

    import torch

    from groupwise.completion_logprobs import completion_logprobs
    from groupwise.models import LoraSettings, attach_lora, load_model

    if keep:
        from groupwise.train.host_memory import keep_freed_memory

        if not keep_freed_memory():
            raise SystemExit("this C library is not glibc: nothing to compare")
    torch.manual_seed(0)
    model, _ = load_model("smollm2-135m-instruct", dtype="float32", device="cpu", seed=0)
    model = attach_lora(model, LoraSettings(r=16, alpha=16, dropout=0.0))
    model.eval()
    vocab = model.config.vocab_size
    prompts, prompt_mask = torch.randint(0, vocab, (2, 266)), torch.ones(2, 266, dtype=torch.long)
    completions = torch.randint(0, vocab, (16, 128))
    completion_mask = torch.ones(16, 128, dtype=torch.long)
    times = []
    autocast = (
        torch.autocast("cpu", dtype=torch.bfloat16)
        if precision == "bfloat16"
        else contextlib.nullcontext()
    )
    for _ in range(repeats + 1):
        start = time.perf_counter()
        with autocast:
            logp = completion_logprobs(
                model, prompts, prompt_mask, completions, completion_mask, group_size=8
            )
        middle = time.perf_counter()
        logp.sum().backward()
        times.append((middle - start, time.perf_counter() - middle))
    return times[1:]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--label", default="this checkout", help="names the code measured")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"comma-separated, of: {list(VARIANTS)}"
    )
    parser.add_argument("--child", choices=list(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(*VARIANTS[args.child], args.repeats)))
        return
    before = load_average()
    passes: dict[str, list[tuple[float, float]]] = {
        name: [] for name in chosen_variants(parser, args.variants, list(VARIANTS))
    }
    for round_ in range(args.rounds):
        for name in passes:
            command = [sys.executable, __file__, "--child", name, "--repeats", str(args.repeats)]
            out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            passes[name] += json.loads(out.splitlines()[-1])
            print(f"round {round_ + 1}: {name} done", file=sys.stderr)
    rows = [
        [
            args.label,
            name,
            len(times),
            median([f for f, _ in times]),
            median([b for _, b in times]),
            median([f + b for f, b in times]),
        ]
        for name, times in passes.items()
    ]
    table = markdown_table(
        ["code", "variant", "passes", "forward (s)", "backward (s)", "forward + backward (s)"],
        rows,
    )
    write_results(
        "update_pass",
        "The training forward + backward pass on a CPU: malloc and precision",
        [("Medians", table)],
        load_before=before,
    )


if __name__ == "__main__":
    main()
