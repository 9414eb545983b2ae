"""The SmolLM2 preset on a busy machine: its step and its held-out evaluation alone and beside
one other 2-thread process, for the code as it is and for the code at an earlier commit.

The other process is a user's other job as a user runs it: a 2-thread PyTorch training loop
(an MLP, float32) with OpenMP's default settings (`--neighbour` runs it). Each case is
`groupwise train --config configs/smollm2_arith.yaml` for `--steps` steps with a held-out set of
`--heldout` problems evaluated before the first step and after the last, in its own process and
run folder, with no OMP_* variable in its environment (the command sets what it sets). `--before
REF` adds the code at git REF (a worktree on its src/, same environment) alone and beside.

    .venv-vllm/bin/python bench/busy_machine.py --before 2dbac66

The table: the median step over steps 2..N (step 1 starts the engine's caches) and step 1, the
two held-out evaluations, each case's slowdown against its own code alone, and the neighbour's
steps per second. Writes bench/results/busy_machine.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, load_average, markdown_table, write_results

NEIGHBOUR_THREADS = 2


def neighbour(log: Path) -> None:
    """Train a 2-thread MLP forever; append the time of every 10th step to `log`."""
    import torch

    torch.set_num_threads(NEIGHBOUR_THREADS)
    torch.manual_seed(0)
    width = 1024
    model = torch.nn.Sequential(
        *[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU()) for _ in range(4)]
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    batch = torch.randn(256, width)
    steps = 0
    with log.open("a") as out:
        while True:
            model(batch).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            steps += 1
            if steps % 10 == 0:
                out.write(f"{time.time()}\n")
                out.flush()


def clean_environment(source: Path | None) -> dict[str, str]:
    """This environment without OMP_* settings; PYTHONPATH on `source` (another commit's src)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMP_")}
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    if source is not None:
        env["PYTHONPATH"] = str(source)
    return env


def train(
    folder: Path, steps: int, heldout: int, source: Path | None
) -> tuple[list[dict], list[dict]]:
    """metrics.jsonl and heldout.jsonl's records of one run of the preset."""
    held = (
        "{benchmark: arith, split: test, options: {level: easy, ops: 2, form: expression, "
        f"size: {heldout}}}}}"
    )
    command = [
        sys.executable, "-m", "groupwise", "train",
        "--config", str(REPO / "configs" / "smollm2_arith.yaml"),
        f"train.max_steps={steps}", f"train.eval_every={steps}", f"data.heldout={held}",
        f"train.save_every={steps + 1}", "train.progress=false", f"train.output_dir={folder}",
    ]  # fmt: skip
    subprocess.run(
        command, check=True, cwd=REPO, capture_output=True, text=True, env=clean_environment(source)
    )
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").open()]
    evaluations = [json.loads(line) for line in (folder / "heldout.jsonl").open()]
    return metrics, evaluations


def case(folder: Path, args: argparse.Namespace, source: Path | None, beside: bool) -> dict:
    """One run, alone or beside the neighbour: its step times, held-out times and the
    neighbour's rate over the run."""
    process, log = None, folder.with_suffix(".neighbour")
    if beside:
        process = subprocess.Popen(
            [sys.executable, __file__, "--neighbour", str(log)], env=clean_environment(None)
        )
        time.sleep(5)  # the neighbour is up before the run starts
    try:
        metrics, evaluations = train(folder, args.steps, args.heldout, source)
    finally:
        if process is not None:
            process.kill()
            process.wait()
    rate = None
    if beside:
        stamps = [float(line) for line in log.read_text().split()]
        rate = 10 * (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else None
    return {
        "step_1": metrics[0]["seconds_step"],
        "step": statistics.median(r["seconds_step"] for r in metrics[1:]),
        # heldout.jsonl's "seconds"; code older than it logged the last one in metrics only
        "heldout": [
            evaluations[0].get("seconds"),
            evaluations[-1].get("seconds", metrics[-1].get("seconds_heldout")),
        ],
        "neighbour_rate": rate,
    }


def neighbour_alone(seconds: float) -> float:
    """The neighbour's steps per second alone on the machine."""
    with tempfile.TemporaryDirectory() as root:
        log = Path(root) / "alone.neighbour"
        process = subprocess.Popen(
            [sys.executable, __file__, "--neighbour", str(log)], env=clean_environment(None)
        )
        time.sleep(seconds)
        process.kill()
        process.wait()
        stamps = [float(line) for line in log.read_text().split()]
    return 10 * (len(stamps) - 1) / (stamps[-1] - stamps[0])


def worktree(ref: str, root: Path) -> Path:
    """The src/ of a detached worktree of the repository at `ref`."""
    folder = root / f"code-{ref}"
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(folder), ref],
        check=True, cwd=REPO, capture_output=True,
    )  # fmt: skip
    return folder / "src"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--heldout", type=int, default=20, help="held-out problems")
    parser.add_argument("--before", help="also measure the code at this git commit")
    parser.add_argument("--neighbour", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.neighbour is not None:
        return neighbour(args.neighbour)
    load = load_average()
    rows = []
    with tempfile.TemporaryDirectory() as root:
        codes = [("now", None)]
        if args.before:
            codes.append((f"at {args.before}", worktree(args.before, Path(root))))
        alone_rate = neighbour_alone(30)
        for name, source in codes:
            alone = case(Path(root) / f"{name}-alone", args, source, beside=False)
            beside = case(Path(root) / f"{name}-beside", args, source, beside=True)
            for where, result in (("alone", alone), ("beside the neighbour", beside)):
                rows.append(row(name, where, result, alone, alone_rate))
            print(f"{name}: done", file=sys.stderr)
        if args.before:
            subprocess.run(["git", "worktree", "prune"], cwd=REPO, check=False)
    headers = [
        "code", "machine", "step (s, median 2..N)", "step 1 (s)", "held-out before (s)",
        "held-out after (s)", "step vs alone", "held-out after vs alone", "neighbour steps/s",
    ]  # fmt: skip
    write_results(
        "busy_machine",
        "The SmolLM2 preset alone and beside one other 2-thread process",
        [(f"{args.steps} steps, {args.heldout} held-out problems", markdown_table(headers, rows))],
        load_before=load,
    )


def row(code: str, where: str, result: dict, alone: dict, alone_rate: float) -> list[object]:
    """The table's row of one case; the slowdowns against the same code alone."""
    held = result["heldout"]
    rate = result["neighbour_rate"]
    neighbour_text = f"{alone_rate:.1f} (alone)" if rate is None else f"{rate:.1f}"
    return [
        code,
        where,
        f"{result['step']:.1f}",
        f"{result['step_1']:.1f}",
        "n/a" if held[0] is None else f"{held[0]:.0f}",
        f"{held[-1]:.0f}",
        f"{result['step'] / alone['step']:.2f}x",
        f"{held[-1] / alone['heldout'][-1]:.2f}x",
        neighbour_text,
    ]


if __name__ == "__main__":
    main()
