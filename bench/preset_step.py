"""The SmolLM2 preset's training step (configs/smollm2_arith.yaml, vLLM rollouts): where its time
goes and its completion tokens per second of wall, for the speed options.

Each variant is `groupwise train --config configs/smollm2_arith.yaml` for `--steps` steps in its
own process and run folder, without the held-out evaluation, one variant after the other on the
same machine; the table gives medians over steps 2..N (step 1 starts the engine's caches) of
metrics.jsonl's seconds_* (the step's split), its completion tokens per second of wall (the sum
of the steps' completion tokens over the sum of their seconds_step) and the gap between the
trainer's and the sampler's log-probs (sampling_logp_difference, nats).

    .venv-vllm/bin/python bench/preset_step.py              # 5 steps per variant

Writes bench/results/preset_step.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, chosen_variants, load_average, markdown_table, write_results

SERIAL_FLOAT32 = [
    "model.attention=null",
    "rollout.dtype=auto",
    "rollout.staleness=0",
    "rollout.importance_correction=false",
    "rollout.vllm_enforce_eager=null",
    "train.precision=float32",
    "train.micro_batch_size=16",
]
"""Overrides that give the preset its speed settings of before bench/versus_main.py's
measurement (2026-12-07): float32, vLLM eager, sampling then learning, 2 micro-batches."""
VARIANTS = {
    "recompute + float32": SERIAL_FLOAT32,
    "sampler + float32": [*SERIAL_FLOAT32, "rollout.logp_old=sampler"],
    "sampler + bfloat16": [*SERIAL_FLOAT32, "rollout.logp_old=sampler", "train.precision=bfloat16"],
}
"""name (rollout.logp_old, train.precision) -> its overrides of the preset."""
SPLIT = ["seconds_step", "seconds_generation", "seconds_training", "seconds_old_policy"]


def run(
    overrides: list[str], steps: int, folder: Path, env: dict[str, str] | None = None
) -> list[dict]:
    """metrics.jsonl's records of one run of the preset with `overrides`, `env` added to the
    environment."""
    command = [
        sys.executable,
        "-m",
        "groupwise",
        "train",
        "--config",
        str(REPO / "configs" / "smollm2_arith.yaml"),
        f"train.max_steps={steps}",
        "train.eval_every=0",
        f"train.save_every={steps + 1}",
        "train.progress=false",
        f"train.output_dir={folder}",
        *overrides,
    ]
    environment = {**os.environ, **(env or {})}
    subprocess.run(command, check=True, cwd=REPO, env=environment, capture_output=True, text=True)
    return [json.loads(line) for line in (folder / "metrics.jsonl").open()]


def row(name: str, records: list[dict]) -> list[object]:
    """The table's row of one variant: medians over steps 2..N; the gaps in 2 significant
    digits (float32's are of order 1e-6)."""
    later = records[1:]
    split = [statistics.median(r[key] for r in later) for key in SPLIT]
    tokens = sum(r["completion_tokens"] for r in later)
    wall = sum(r["seconds_step"] for r in later)
    gap = [
        f"{statistics.median(r.get(key, float('nan')) for r in later):.2g}"
        for key in ("sampling_logp_difference", "sampling_logp_difference_max")
    ]
    return [name, len(later), *split, tokens / wall, *gap]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"comma-separated, of: {list(VARIANTS)}"
    )
    args = parser.parse_args(argv)
    names = chosen_variants(parser, args.variants, list(VARIANTS))
    before = load_average()
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for name in names:
            records = run(VARIANTS[name], args.steps, Path(root) / name.replace(" + ", "-"))
            rows.append(row(name, records))
            print(f"{name}: done", file=sys.stderr)
    table = markdown_table(
        [
            "logp_old + precision",
            "steps",
            "step (s)",
            "sampling (s)",
            "training (s)",
            "of which the no-grad pass (s)",
            "completion tokens / s of wall",
            "sampler gap, mean (nats)",
            "sampler gap, max (nats)",
        ],
        rows,
    )
    write_results(
        "preset_step",
        "The SmolLM2 preset's step: logp_old and precision",
        [("Medians over steps 2..N", table)],
        load_before=before,
    )


if __name__ == "__main__":
    main()
