"""One matrix product of SmolLM2-135M's MLP in float32 and in bfloat16 on this CPU, and what
`train.precision: auto` picks here (groupwise.train.precision): the reason the SmolLM2 preset
trains in bfloat16 on some machines and in float32 on others (docs/guides/train.md, "Mixed
precision").

The product is the MLP's up projection for a batch of `--rows` token rows (rows x 576 by
576 x 1536), plain and under torch.autocast from float32 operands (what train.precision=bfloat16
runs); each timing is the median of `--repeats` products after 3 warm-up ones.

    python bench/matmul_dtype.py               # 512 rows, 20 repeats

Writes bench/results/matmul_dtype.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
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

from groupwise.train.precision import BFLOAT16_CPU_FLAGS, cpu_flags, native_bfloat16

HIDDEN, INTERMEDIATE = 576, 1536
"""SmolLM2-135M's hidden and MLP sizes."""

VARIANTS = {
    "float32": (torch.float32, False),
    "bfloat16": (torch.bfloat16, False),
    "float32 under bfloat16 autocast": (torch.float32, True),
}
"""name -> (operands' dtype, under torch.autocast to bfloat16)."""


def seconds(dtype: torch.dtype, autocast: bool, rows: int, repeats: int) -> float:
    """The median wall time (s) of one rows x HIDDEN by HIDDEN x INTERMEDIATE product."""
    a = torch.randn(rows, HIDDEN).to(dtype)
    b = torch.randn(HIDDEN, INTERMEDIATE).to(dtype)
    context = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    times = []
    with context:
        for i in range(3 + repeats):
            start = time.perf_counter()
            a @ b
            if i >= 3:
                times.append(time.perf_counter() - start)
    return median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=20)
    add_threads_argument(parser)
    args = parse_with_threads(parser, argv)
    load_before = load_average()
    flops = 2 * args.rows * HIDDEN * INTERMEDIATE
    measured = {
        name: seconds(dtype, autocast, args.rows, args.repeats)
        for name, (dtype, autocast) in VARIANTS.items()
    }
    rows = [
        [name, 1e3 * s, flops / s / 1e9, measured["float32"] / s] for name, s in measured.items()
    ]
    present = sorted(set(BFLOAT16_CPU_FLAGS) & cpu_flags()) or ["none"]
    picked = "bfloat16" if native_bfloat16("cpu") else "float32"
    table = markdown_table(["operands", "ms (median)", "GFLOP/s", "speed vs float32"], rows)
    write_results(
        "matmul_dtype",
        "A SmolLM2 matrix product in float32 and bfloat16 on this CPU",
        [
            (
                f"{args.rows} x {HIDDEN} by {HIDDEN} x {INTERMEDIATE}",
                f"{table}\n\nbfloat16 units of this CPU ({', '.join(BFLOAT16_CPU_FLAGS)}): "
                f"{', '.join(present)}; `train.precision: auto` picks {picked} here.",
            )
        ],
        load_before=load_before,
    )


if __name__ == "__main__":
    main()
