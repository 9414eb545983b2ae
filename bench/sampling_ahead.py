"""The SmolLM2 preset with the sampler running ahead of learning (rollout.staleness=1) against
the same preset sampling then learning, in float32 and bfloat16: the step's split and its
completion tokens per second of wall (docs/guides/train.md, "Sampling ahead of learning").

Each variant is `groupwise train --config configs/smollm2_arith.yaml` for `--steps` steps in its
own process (bench/preset_step.py's `run`: no held-out evaluation), one after the other on the
same machine; medians over steps 2..N. With staleness 1, "sampling" is the time the step waited
for its batch and "sampled ahead" the background thread's time sampling it; the sampler gap is
then the update plus the kernels' difference (sampler_k3_kl: the k3 estimate of
KL(pi_sampler || pi_old) per token).

    .venv-vllm/bin/python bench/sampling_ahead.py --steps 6

Writes bench/results/sampling_ahead.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import chosen_variants, load_average, markdown_table, write_results
from preset_step import run

AHEAD = ["rollout.staleness=1", "rollout.importance_correction=true"]
BF16 = ["train.precision=bfloat16"]
VARIANTS = {
    "float32": [],
    "float32 ahead": AHEAD,
    "bfloat16": BF16,
    "bfloat16 ahead": [*BF16, *AHEAD],
}
"""name -> its overrides of the preset (ahead: staleness 1 with the token-truncated
correction)."""
SPLIT = ["seconds_step", "seconds_generation", "seconds_sampling_ahead", "seconds_training"]


def row(name: str, records: list[dict]) -> list[object]:
    """A variant's row: medians over steps 2..N (0 where a metric is absent)."""
    later = records[1:]
    split = [statistics.median(r.get(key, 0.0) for r in later) for key in SPLIT]
    tokens = sum(r["completion_tokens"] for r in later)
    wall = sum(r["seconds_step"] for r in later)
    gaps = [
        statistics.median(r.get(key, float("nan")) for r in later)
        for key in ("sampling_logp_difference", "sampler_k3_kl")
    ]
    return [name, len(later), *split, tokens / wall, *(f"{gap:.2g}" for gap in gaps)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"comma-separated, of: {list(VARIANTS)}"
    )
    args = parser.parse_args(argv)
    names = chosen_variants(parser, args.variants, list(VARIANTS))
    before = load_average()
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for number, name in enumerate(names):
            records = run(VARIANTS[name], args.steps, Path(root) / str(number))
            rows.append(row(name, records))
            print(f"{name}: done", file=sys.stderr)
    table = markdown_table(
        [
            "precision, sampling",
            "steps",
            "step (s)",
            "sampling (s)",
            "sampled ahead (s)",
            "training (s)",
            "completion tokens / s of wall",
            "sampler gap, mean (nats)",
            "sampler k3 KL (nats)",
        ],
        rows,
    )
    write_results(
        "sampling_ahead",
        "The SmolLM2 preset sampling ahead of learning",
        [("Medians over steps 2..N", table)],
        load_before=before,
    )


if __name__ == "__main__":
    main()
