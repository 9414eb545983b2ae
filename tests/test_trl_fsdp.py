"""GroupwiseGRPOTrainer (AMIR-GRPO + LENS) sharded for real, on the CPU (gloo, 2 processes):
`accelerate launch` with the shipped examples/accelerate/fsdp2.yaml, deepspeed_zero2.yaml and
deepspeed_zero3.yaml (docs/guides/distributed.md) against one plain process at the same global
batch (tests/trl_fsdp_run.py: 4 optimizer steps of AdamW on the fixed batch of trl_support):

- FSDP2, full fine-tuning (adaptive lambda, one micro-batch per process) and LoRA (two
  micro-batches per process): each process holds half the parameters; the final weights agree
  within TOLERANCE, every logged metric (AMIR pairs, lambda, preference loss, group shares, TRL's
  own) within TOLERANCE, counts exactly;
- a sharded checkpoint (torch.distributed.checkpoint, one file per process) saved at step 2 and
  resumed in a new launch continues bit for bit as the uninterrupted run, lambda included;
- DeepSpeed ZeRO-2 and ZeRO-3 (full fine-tuning): the same equality.

Each launch runs once per module, on first use (20-60 s each on 2 cores).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import trl_support  # imports TRL: a CI dependency, so these tests never skip

from groupwise.integrations.trl.trainer import STATE_FILE

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
CONFIGS = REPO / "examples" / "accelerate"
DRIVER = str(TESTS / "trl_fsdp_run.py")
TOLERANCE = 1e-5  # float32; measured: weights 6e-7, metrics 8e-6 (entropy ~10.8)
COUNTS = ("amir/pairs", "num_tokens", "completions/mean_length", "epoch")
TIMINGS = ("step_time",)


def accelerate(config: str, *extra: str) -> list[str]:
    """The launch command of a shipped accelerate config on 2 CPU processes in float32
    (--mixed_precision no: the yamls say bf16, for GPUs)."""
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file"]
    options = ["--num_processes", "2", "--mixed_precision", "no", *extra]
    return [*launch, str(CONFIGS / config), *options, DRIVER]


SHARDED = ("--fsdp_state_dict_type", "SHARDED_STATE_DICT")
LAUNCHES: dict[str, tuple[list[str], list[str]]] = {
    # name: (command, the driver's arguments after OUT)
    "one process": ([sys.executable, DRIVER], ["full", "lora"]),
    "fsdp2": (accelerate("fsdp2.yaml", *SHARDED), ["full", "lora"]),
    "fsdp2 resumed": (
        accelerate("fsdp2.yaml", *SHARDED),
        ["resume", "--checkpoint", "{fsdp2}/full/checkpoint-2"],
    ),
    "zero2": (accelerate("deepspeed_zero2.yaml"), ["full"]),
    "zero3": (accelerate("deepspeed_zero3.yaml"), ["full"]),
}


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """launched(name) -> the output folder of LAUNCHES[name], run on first use."""
    root = tmp_path_factory.mktemp("sharded")
    env = {
        **os.environ,
        "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "OMP_NUM_THREADS": "1",
    }
    done: dict[str, Path] = {}

    def launch(name: str) -> Path:
        if name in done:
            return done[name]
        command, arguments = LAUNCHES[name]
        if any("{fsdp2}" in argument for argument in arguments):
            arguments = [argument.format(fsdp2=launch("fsdp2")) for argument in arguments]
        out = root / name.replace(" ", "_")
        result = subprocess.run(
            [*command, str(out), *arguments],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
        )
        output = f"{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
        assert result.returncode == 0, f"{name} failed:\n{output}"
        done[name] = out
        return out

    return launch


def load(folder: Path, case: str) -> dict[str, Any]:
    return torch.load(folder / case / "run.pt", weights_only=False)


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def assert_same_logs(got: list[dict], want: list[dict], exact: bool = False) -> None:
    """Per optimizer step, every logged value but the timings: counts exactly, the rest within
    TOLERANCE (absolute, or relative above 1); everything bit for bit with `exact`."""
    assert [entry["step"] for entry in got] == [entry["step"] for entry in want] == [1, 2, 3, 4]
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys()
        for key in sorted(a.keys() - set(TIMINGS)):
            if exact or key in COUNTS:
                assert a[key] == b[key], (a["step"], key)
            else:
                near = pytest.approx(b[key], rel=TOLERANCE, abs=TOLERANCE)
                assert a[key] == near, (a["step"], key)


def assert_moved(weights: dict[str, torch.Tensor], lora: bool) -> None:
    """The run moved the weights far beyond TOLERANCE from the initial model (LoRA: the
    adapters only, the base weights not at all)."""
    model, _ = trl_support.tiny_model()
    initial = model.state_dict()
    base = {k: v for k, v in weights.items() if "lora_" not in k}
    names = {k: k.replace("base_model.model.", "").replace(".base_layer", "") for k in base}
    assert sorted(names.values()) == sorted(initial)
    moved = max(float((base[k] - initial[names[k]].float()).abs().max()) for k in base)
    if lora:
        assert moved == 0.0
        adapters = [float(v.abs().max()) for k, v in weights.items() if "lora_B" in k]
        assert len(adapters) == 14 and min(adapters) > 100 * TOLERANCE  # lora_B starts at 0
    else:
        assert moved > 100 * TOLERANCE


def assert_equal_runs(sharded: dict[str, Any], single: dict[str, Any], lora: bool) -> None:
    assert (single["processes"], sharded["processes"]) == (1, 2)
    assert max_difference(sharded["weights"], single["weights"]) < TOLERANCE
    assert_same_logs(sharded["logs"], single["logs"])
    assert sharded["lambda"] == pytest.approx(single["lambda"], abs=TOLERANCE)
    assert_moved(single["weights"], lora)


# ---------------------------------------------------------------------------------------------
# FSDP2


@pytest.mark.parametrize("case", ["full", "lora"])
def test_fsdp2_shards_the_model_over_the_processes(launched, case: str) -> None:
    run = load(launched("fsdp2"), case)
    assert (run["processes"], run["distributed_type"]) == (2, "FSDP")
    assert run["share"] == pytest.approx(0.5, abs=0.01)  # each process holds half
    assert load(launched("one process"), case)["share"] == 1.0


@pytest.mark.parametrize("case", ["full", "lora"])
def test_fsdp2_two_processes_equal_one(launched, case: str) -> None:
    sharded, single = load(launched("fsdp2"), case), load(launched("one process"), case)
    assert_equal_runs(sharded, single, lora=case == "lora")
    lambdas = [entry["amir/lambda"] for entry in single["logs"]]
    if case == "full":  # the rule grew, held and shrank lambda on the measured losses
        assert lambdas[0] > 0.01 and lambdas[1] == lambdas[0] > lambdas[2] > lambdas[3]
    else:
        assert lambdas == [0.05] * 4


def test_fsdp2_resumes_from_a_sharded_checkpoint_as_if_uninterrupted(launched) -> None:
    through = launched("fsdp2")
    checkpoint = through / "full" / "checkpoint-2"
    # torch.distributed.checkpoint: model and optimizer state, one file per process
    for part in ("pytorch_model_fsdp_0", "optimizer_0"):
        files = sorted(path.name for path in (checkpoint / part).glob("*.distcp"))
        assert files == ["__0_0.distcp", "__1_0.distcp"], part
    uninterrupted = load(through, "full")
    # the checkpoint's lambda is not the initial one, so a resume that lost it would show
    saved = json.loads((checkpoint / STATE_FILE).read_text())["lambda_reg"]["value"]
    assert saved == uninterrupted["logs"][1]["amir/lambda"] != 0.01
    resumed = load(launched("fsdp2 resumed"), "resume")
    assert (resumed["processes"], resumed["distributed_type"]) == (2, "FSDP")
    assert max_difference(resumed["weights"], uninterrupted["weights"]) == 0.0
    assert_same_logs(resumed["logs"], uninterrupted["logs"], exact=True)
    assert resumed["lambda"] == uninterrupted["lambda"]


# ---------------------------------------------------------------------------------------------
# DeepSpeed ZeRO


@pytest.mark.parametrize(("stage", "share"), [("zero2", 1.0), ("zero3", 0.5)])
def test_deepspeed_two_processes_equal_one(launched, stage: str, share: float) -> None:
    sharded, single = load(launched(stage), "full"), load(launched("one process"), "full")
    assert sharded["distributed_type"] == "DEEPSPEED"
    assert sharded["share"] == pytest.approx(share, abs=0.01)  # ZeRO-3 partitions the weights
    assert_equal_runs(sharded, single, lora=False)


# ---------------------------------------------------------------------------------------------
# The guide's launch commands


def test_every_launch_command_of_the_guide_is_run_or_says_why_not() -> None:
    """docs/guides/distributed.md: each line that starts with `accelerate launch` or `torchrun`
    ends with `# run by tests/FILE.py::TEST` (a test that exists) or `# not run here: REASON`,
    and the accelerate configs it names exist."""
    guide = (REPO / "docs" / "guides" / "distributed.md").read_text()
    commands = re.compile(r"\s*(accelerate launch|torchrun) ")
    lines = [line for line in guide.splitlines() if commands.match(line)]
    assert len(lines) >= 5
    for line in lines:
        for config in re.findall(r"examples/accelerate/[\w.]+\.yaml", line):
            assert (REPO / config).is_file(), line
        ran = re.search(r"# run by (tests/\w+\.py)::(\w+)", line)
        if ran:
            assert f"def {ran[2]}(" in (REPO / ran[1]).read_text(), line
        else:
            assert re.search(r"# not run here: \w", line), line
