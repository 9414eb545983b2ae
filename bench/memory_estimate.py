"""The memory estimate against the peak: for each case, one step of a preset in its own process,
the estimate `groupwise train` made before its sampler started (RUN/memory.json, by part) beside
the peak resident memory the process reached (ru_maxrss, memory.json's peak_gib).

    .venv-vllm/bin/python bench/memory_estimate.py

Cases: the quickstart preset (arith-base, transformers engine), the SmolLM2 preset (vLLM in the
process) at micro-batches of 8, 16 and 32 and at rollout.vllm_memory 0.3, and the same with the
transformers engine. A case the estimate refuses on this machine is listed as refused. Writes
bench/results/memory_estimate.md (docs/guides/train.md, "Memory").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, load_average, markdown_table, write_results

SMOLLM2 = "configs/smollm2_arith.yaml"
CASES = {
    "quickstart (arith-base, transformers)": ("configs/quickstart.yaml", []),
    "SmolLM2, vLLM, micro-batch 8": (SMOLLM2, ["train.micro_batch_size=8"]),
    "SmolLM2, vLLM, micro-batch 16 (preset)": (SMOLLM2, []),
    "SmolLM2, vLLM, micro-batch 32": (SMOLLM2, ["train.micro_batch_size=32"]),
    "SmolLM2, vLLM, vllm_memory 0.3": (SMOLLM2, ["rollout.vllm_memory=0.3"]),
    "SmolLM2, transformers, micro-batch 16": (SMOLLM2, ["rollout.engine=transformers"]),
}
"""name -> (config, overrides)."""


def one_step(config: str, overrides: list[str], folder: Path) -> tuple[dict | None, str]:
    """memory.json of one step of `config` (None when refused) and the refusal's line."""
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    command = [
        sys.executable, "-m", "groupwise", "train", "--config", str(REPO / config),
        "train.max_steps=1", "train.eval_every=0", "train.save_every=2",
        "train.progress=false", f"train.output_dir={folder}", *overrides,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env)
    if done.returncode == 2:
        return None, done.stderr.strip().splitlines()[-1]
    if done.returncode != 0:
        raise RuntimeError(f"{config} {overrides}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return json.loads((folder / "memory.json").read_text()), ""


def main() -> None:
    load = load_average()
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for index, (name, (config, overrides)) in enumerate(CASES.items()):
            note, refusal = one_step(config, overrides, Path(root) / str(index))
            if note is None:
                rows.append([name, "refused", "", "", "", refusal])
                continue
            parts = note["estimate_gib"]
            estimate, peak = sum(parts.values()), note["peak_gib"]
            described = ", ".join(f"{k} {v:.2f}" for k, v in parts.items())
            error = f"{(estimate - peak) / peak:+.0%}"
            rows.append([name, f"{estimate:.2f}", f"{peak:.2f}", error, "", described])
            print(f"{name}: estimate {estimate:.2f} GiB, peak {peak:.2f} GiB", file=sys.stderr)
    table = markdown_table(
        ["case", "estimate (GiB)", "peak (GiB)", "estimate vs peak", "", "parts (GiB)"], rows
    )
    write_results(
        "memory_estimate",
        "The memory estimate of `groupwise train` against the peak",
        [("One step each, no held-out evaluation", table)],
        load_before=load,
    )


if __name__ == "__main__":
    main()
