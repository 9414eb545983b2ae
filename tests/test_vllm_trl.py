"""TRL's vLLM path for real: GroupwiseGRPOTrainer with use_vllm=True, vllm_mode="colocate" on
vLLM's CPU build (run in .venv-vllm; scripts/test.sh), AMIR-GRPO + LENS, importance-sampling
correction on and off. Each run is its own process (tests/vllm_trl_run.py), since vLLM spawns
its engine there. A third run trains a LoRA adapter (TRL merges it for each weight sync). The
run without correction also evaluates held-out pass@k through the colocated engine
(PassAtKCallback).

On these real vLLM rollouts the rollout l(q, o) that LENS and AMIR use are the old policy TRL's
loss uses, the trained weights reach vLLM (its sampling log-probs follow
the policy), and the steps train.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_support import ENGINE_CORES

from groupwise.rollout.vllm_cpu import core_list

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("vllm-model") / "tiny")


@pytest.mark.parametrize(
    ("correction", "lora"),
    [("on", False), ("off", False), ("on", True)],
    ids=["correction-on", "correction-off", "lora"],
)
def test_colocate_trains_and_uses_trls_old_policy(
    model_dir: str, tmp_path: Path, correction: str, lora: bool
) -> None:
    """With lora, TRL merges the adapter for each weight sync: the merged weights must reach
    vLLM too (a learning rate of 0.5 moves LoRA's B, zero at the start, measurably in 3 steps)."""
    out = tmp_path / "run.json"
    adapter = ["--lora", "--learning-rate", "0.5"] if lora else []
    heldout = ["--heldout"] if correction == "off" else []
    subprocess.run(
        [
            sys.executable,
            str(TESTS / "vllm_trl_run.py"),
            model_dir,
            str(out),
            "--correction",
            correction,
            "--steps",
            "3",
            "--cores",
            core_list(ENGINE_CORES),
            *adapter,
            *heldout,
        ],
        check=True,
        timeout=900,
    )
    run = json.loads(out.read_text())
    # the colocated engine runs in the training process, on the cores it was given (not the
    # session server's), with as many torch threads; what was set is recorded
    binding = run["cpu_binding"]
    assert binding["process_cores"] == ENGINE_CORES
    assert binding["torch_threads"] == len(ENGINE_CORES)
    assert binding["recorded"]["cores"] == core_list(ENGINE_CORES)
    assert binding["recorded"]["OMP_NUM_THREADS"] == str(len(ENGINE_CORES))
    logs = [e for e in run["log_history"] if "loss" in e]
    assert len(logs) == 3 and all(math.isfinite(e["loss"]) for e in logs)
    assert all(e["amir/pairs"] > 0 and "groups/mixed" in e and "amir/lambda" in e for e in logs)
    # TRL computes old_per_token_logps exactly when the correction is on (one micro-batch, one
    # optimizer step per generation batch otherwise): the adapter reads the same either way
    assert run["had_old"] == [correction == "on"] * 3
    assert len(run["used"]) == len(run["trl_old"]) == 3
    for used, trl_old in zip(run["used"], run["trl_old"], strict=True):
        assert len(used) == len(trl_old) == 8
        assert max(abs(a - b) for a, b in zip(used, trl_old, strict=True)) < 1e-5
    # the trained weights reach vLLM: after the sync its log-probs of a fresh sample are the
    # trained policy's (to vLLM's CPU kernels' precision, about 1e-3), far from the initial
    # model's (the learning rate moves the policy by about 0.2 nats per token)
    assert run["vllm_vs_trained"] < 0.01
    assert run["vllm_vs_initial"] > 5 * run["vllm_vs_trained"]
    if correction == "on":
        assert all(e["sampling/sampling_logp_difference/mean"] < 0.01 for e in logs)
    if heldout:
        # PassAtKCallback sampled through TRL's colocated vLLM at steps 0-3 (2 per problem)
        evaluations = run["heldout"]
        assert [e["step"] for e in evaluations] == [0, 1, 2, 3]
        assert all(e["sampling"]["engine"] == "vllm-colocate" for e in evaluations)
        assert all(e["samples"] == 6 and len(e["correct"]) == 3 for e in evaluations)
        passes = [e for e in run["log_history"] if "heldout/pass@2" in e]
        assert [e["step"] for e in passes] == [0, 1, 2, 3]
        for e in passes:
            assert e["heldout/pass@1"] <= e["heldout/pass@2"]  # pass@k grows with k
