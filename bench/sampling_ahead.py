"""The SmolLM2 preset with the sampler running ahead of learning (rollout.staleness=1) against
the same preset sampling then learning, in float32 and bfloat16, and the placements of the
sampler and the learner on the machine's cores: the step's split and its completion tokens per
second of wall (docs/guides/train.md, "Sampling ahead of learning").

Placements: the sampler (vLLM in the training process, on every core the process may use: its
CPU attention needs the thread count its engine started with) and the learner (torch's threads,
as many) take turns ("serial"), or run at once with waiting OpenMP threads asleep (the preset:
groupwise sets OMP_WAIT_POLICY=PASSIVE) or spinning (ACTIVE, OpenMP's own default).

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
from preset_step import SERIAL_FLOAT32, run

AHEAD = ["rollout.staleness=1", "rollout.importance_correction=true"]
BF16 = ["train.precision=bfloat16"]
SERIAL = ["rollout.staleness=0", "rollout.importance_correction=false", "rollout.logp_old=sampler"]
VARIANTS = {
    "float32": SERIAL_FLOAT32,
    "float32 ahead": [*SERIAL_FLOAT32, *AHEAD],
    "bfloat16": [*SERIAL_FLOAT32, *BF16],
    "bfloat16 ahead": [*SERIAL_FLOAT32, *BF16, *AHEAD],
    "preset serial": SERIAL,
    "preset": [],
    "preset spinning": [],
    "preset sdpa": ["model.attention=null"],
    "preset compiled": ["rollout.vllm_enforce_eager=false"],
}
"""name -> its overrides of the preset (ahead: staleness 1 with the token-truncated
correction; the first four start from the preset's settings before its speed-up,
preset_step.SERIAL_FLOAT32; "preset serial": the preset sampling then learning, logp_old from
the sampler; "preset sdpa": the model's own attention kernel; "preset compiled": vLLM
compiled, not eager)."""
ENVIRONMENTS = {"preset spinning": {"OMP_WAIT_POLICY": "ACTIVE"}}
"""name -> what its run adds to the environment: waiting OpenMP threads spin instead of
sleeping (groupwise sets PASSIVE where the environment does not say: groupwise.cpu_threads)."""
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
            folder = Path(root) / str(number)
            records = run(VARIANTS[name], args.steps, folder, ENVIRONMENTS.get(name))
            rows.append(row(name, records))
            print(f"{name}: done", file=sys.stderr)
    table = markdown_table(
        [
            "variant",
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
