"""How groupwise's step time and peak memory grow with the group size G (4, 8, 16), the
completion length limit (64, 128, 256 new tokens) and the questions per step (1, 2, 4), one
axis at a time from the quickstart point (G=8, 128 tokens, 1 question; plain GRPO, SmolLM2-135M
+ LoRA 16/16, micro-batches of 8 completions rounded to whole groups), and which part of the
step (generation, scoring, training) dominates where.

Each setting runs in its own process (peak memory is per process: the peak resident set on the
CPU, torch's peak allocation on a GPU): --warmup uncounted steps, then the median of --steps.

    python bench/scaling.py                        # 7 settings, 1 warm-up + 2 steps each
    python bench/scaling.py --steps 1 --warmup 0 model.dtype=bfloat16
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    REPO,
    add_threads_argument,
    load_average,
    markdown_table,
    median,
    parse_with_threads,
    write_results,
)

BASE = (8, 128, 1)  # G, max new tokens, questions per step
SETTINGS = [
    ("base", BASE),
    ("G", (4, 128, 1)),
    ("G", (16, 128, 1)),
    ("length", (8, 64, 1)),
    ("length", (8, 256, 1)),
    ("questions", (8, 128, 2)),
    ("questions", (8, 128, 4)),
]
PARTS = ("generation", "scoring", "training")


def resident_gib() -> float:
    """The current resident set size of this process (GiB)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**30


def one_setting(setting: tuple[int, int, int], warmup: int, steps: int, extra: list[str]) -> dict:
    """Runs in its own process: the step records of one (G, length, questions) setting."""
    from groupwise.train.preflight import load_run_config
    from groupwise.train.trainer import Trainer

    group, length, questions = setting
    with tempfile.TemporaryDirectory(prefix="scaling-") as scratch:
        config = load_run_config(
            REPO / "configs" / "quickstart_gsm8k.yaml",
            [
                "algorithm.amir=false",
                f"rollout.group_size={group}",
                f"rollout.max_new_tokens={length}",
                f"rollout.questions_per_step={questions}",
                f"train.max_steps={warmup + steps}",
                "train.progress=false",
                "train.log_rollouts=false",
                f"train.output_dir={scratch}",
                *extra,
            ],
        )
        trainer = Trainer(config)
        cuda = trainer.device.type == "cuda"
        setup = (
            torch.cuda.memory_allocated() / 2**30 if cuda else resident_gib()
        )  # model, copy, optimizer
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        records = []
        for _ in range(warmup + steps):
            metrics, _ = trainer.train_step()
            trainer.step += 1
            records.append(metrics)
        peak = (
            torch.cuda.max_memory_allocated() / 2**30
            if cuda
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        )
    return {"records": records[warmup:], "setup_gib": setup, "peak_gib": peak}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: G,length,questions
    parser.add_argument("--json", help=argparse.SUPPRESS)  # internal: where --one writes
    parser.add_argument("overrides", nargs="*", help="extra config overrides (key=value)")
    add_threads_argument(parser)
    args = parse_with_threads(parser, argv)

    if args.one:
        setting = tuple(int(x) for x in args.one.split(","))
        result = one_setting(setting, args.warmup, args.steps, args.overrides)
        Path(args.json).write_text(json.dumps(result))
        return

    load_before = load_average()
    rows = []
    with tempfile.TemporaryDirectory(prefix="scaling-") as scratch:
        for axis, setting in SETTINGS:
            out = Path(scratch) / "one.json"
            command = [
                sys.executable,
                __file__,
                "--one",
                ",".join(map(str, setting)),
                "--json",
                str(out),
                f"--warmup={args.warmup}",
                f"--steps={args.steps}",
                *([f"--threads={args.threads}"] if args.threads else []),
                *args.overrides,
            ]
            subprocess.run(command, check=True)
            result = json.loads(out.read_text())
            recs = result["records"]
            parts = {p: median([r[f"seconds_{p}"] for r in recs]) for p in PARTS}
            step = median([r["seconds_step"] for r in recs])
            dominant = max(parts, key=parts.get)
            group, length, questions = setting
            rows.append(
                [
                    axis,
                    group,
                    length,
                    questions,
                    group * questions,
                    median([r["completion_length_mean"] for r in recs]),
                    step,
                    *(parts[p] for p in PARTS),
                    f"{dominant} ({parts[dominant] / step:.0%})",
                    median([r["tokens_per_second"] for r in recs]),
                    result["setup_gib"],
                    result["peak_gib"],
                ]
            )
            print(rows[-1], f"load {load_average()}", flush=True)

    memory = "GPU allocated" if torch.cuda.is_available() else "resident set"
    table = markdown_table(
        [
            "axis",
            "G",
            "max new tokens",
            "questions",
            "completions",
            "mean length",
            "s/step",
            "generation s",
            "scoring s",
            "training s",
            "dominant",
            "completion tokens/s",
            f"{memory} after setup (GiB)",
            f"peak {memory} (GiB)",
        ],
        rows,
    )
    write_results(
        "scaling",
        "Step time and memory as G, completion length and questions per step grow",
        [("Medians per setting", table)],
        load_before=load_before,
        notes=__doc__.split("\n\n")[1] + "\n\n" + __doc__.split("\n\n")[2],
    )


if __name__ == "__main__":
    main()
