"""One run of verl's real entry point on a CPU, and what it logged and wrote.

    python -m verl.trainer.main_ppo  (COMMON_KEYS + the run's own keys)

with the model `arith-base` (groupwise's shipped 0.9 M-weight testbed policy, given the chat
template verl's dataset and agent loop apply: the message text alone), the synthetic "arith"
easy problems as verl's Parquet rows (groupwise.integrations.verl.data, template "plain"), and
groupwise's reward (`pkg://groupwise.integrations.verl.reward`). `VERL_USE_EXTERNAL_MODULES`
loads `verl_cpu.plugin` in every process; verl's file logger writes each step's metrics, the rollout
dump each step's batch (verl_cpu.record), the rollout server each weight sync
(verl_cpu.rollout).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from groupwise.data.synthetic import generate_problems
from groupwise.integrations.verl.data import verl_rows, write_parquet
from groupwise.models import ARITH_BASE_DIR

TESTS = Path(__file__).resolve().parent.parent
SRC = TESTS.parent / "src"
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
BATCH = 4
"""Prompts per step (data.train_batch_size)."""
N = 8
"""Responses per prompt (actor_rollout_ref.rollout.n)."""
LEVEL = "mid"
"""The arith level: arith-base solves about 22 % of its problems at temperature 1 (most groups of
N then mixed); on "easy" it mostly repeats one solution per prompt."""
COMMON_KEYS = [
    "reward.custom_reward_function.path=pkg://groupwise.integrations.verl.reward",
    "reward.custom_reward_function.name=compute_score",
    f"data.train_batch_size={BATCH}",
    "data.max_prompt_length=96",
    "data.max_response_length=64",
    "data.dataloader_num_workers=0",
    "data.seed=0",
    "actor_rollout_ref.rollout.name=hf_cpu",
    f"actor_rollout_ref.rollout.n={N}",
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.ref.strategy=fsdp2",
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
    f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}",
    f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={BATCH * N}",
    f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={BATCH * N}",
    "actor_rollout_ref.actor.optim.optimizer=SGD",
    "actor_rollout_ref.actor.optim.lr=0.1",
    "actor_rollout_ref.actor.optim.weight_decay=0",
    "actor_rollout_ref.actor.use_kl_loss=false",
    "algorithm.use_kl_in_reward=false",
    "reward.num_workers=1",
    "trainer.device=cpu",
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
    "trainer.total_training_steps=2",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
    "trainer.logger=[console,file]",
    "trainer.project_name=groupwise_cpu",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    "ray_kwargs.ray_init.num_cpus=8",
    "+ray_kwargs.ray_init.num_gpus=1",
    "+ray_kwargs.ray_init.include_dashboard=false",
]


def model_folder(root: Path) -> Path:
    """arith-base with a chat template (the message text alone: the policy was taught on the
    bare question), in `root`/model."""
    folder = root / "model"
    if not folder.exists():
        shutil.copytree(ARITH_BASE_DIR, folder)
        settings = json.loads((folder / "tokenizer_config.json").read_text())
        settings["chat_template"] = CHAT_TEMPLATE
        (folder / "tokenizer_config.json").write_text(json.dumps(settings, indent=2))
    return folder


def data_file(root: Path) -> Path:
    """The first 16 "arith" LEVEL train problems as verl's Parquet rows, in `root`/train.parquet."""
    path = root / "train.parquet"
    if not path.exists():
        problems = generate_problems("train", level=LEVEL, size=16, seed=0)
        write_parquet(verl_rows(problems, "arith", "plain", "groupwise"), path)
    return path


@dataclass
class Run:
    """A finished run: its per-step metrics (verl's file logger), batches (verl_cpu.record),
    weight syncs (step -> state dict), its folder and its wall time (s)."""

    folder: Path
    metrics: dict[int, dict[str, float]]
    batches: dict[int, dict]
    weights: dict[int, dict[str, torch.Tensor]]
    seconds: float


def main_ppo(assets: Path, folder: Path, *keys: str, timeout: float = 600) -> Run:
    """Run verl's main_ppo with COMMON_KEYS + `keys` in `folder` (logs in `folder`/main_ppo.log;
    a failure raises with its error lines); its process group is killed afterwards either way."""
    folder.mkdir(parents=True)
    (folder / "weights").mkdir()
    data = data_file(assets)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "VERL_USE_EXTERNAL_MODULES": "verl_cpu.plugin",
        "VERL_PLATFORM": "cpu",
        "VERL_FILE_LOGGER_PATH": str(folder / "metrics.jsonl"),
        "VERL_CPU_RECORD": str(folder / "weights"),
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "HYDRA_FULL_ERROR": "1",
        "RAY_DEDUP_LOGS": "0",
        # Ray's memory monitor kills its workers when the whole machine passes 95 %, whoever
        # holds the memory: in CI the other test lanes (a vLLM engine, a TRL run) did so
        "RAY_memory_monitor_refresh_ms": "0",
    }
    command = [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        *COMMON_KEYS,
        f"data.train_files={data}",
        f"data.val_files={data}",
        f"actor_rollout_ref.model.path={model_folder(assets)}",
        f"trainer.default_local_dir={folder / 'checkpoints'}",
        f"trainer.rollout_data_dir={folder / 'rollouts'}",
        f"trainer.experiment_name={folder.name}",
        f"hydra.run.dir={folder / 'hydra'}",
        *keys,
    ]
    start = time.monotonic()
    log = folder / "main_ppo.log"
    with log.open("w") as out:
        # its own session: on a timeout the whole group (main_ppo and the Ray cluster it
        # started) goes, and nothing else on the machine
        process = subprocess.Popen(
            command,
            env=env,
            cwd=folder,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    seconds = time.monotonic() - start
    if returncode != 0:
        raise RuntimeError(f"main_ppo exited {returncode}:\n{error_lines(log)}")
    return Run(
        folder,
        read_metrics(folder / "metrics.jsonl"),
        read_batches(folder / "rollouts"),
        read_weights(folder / "weights"),
        seconds,
    )


def error_lines(log: Path) -> str:
    """The lines of `log` that name an error (Ray interleaves many processes), then its tail."""
    lines = log.read_text(errors="replace").splitlines()
    marks = ("Error", "error:", "Traceback", "Exception", "Killed")
    errors = list(dict.fromkeys(line for line in lines if any(mark in line for mark in marks)))
    return "\n".join([*errors[:60], "--- tail ---", *lines[-40:]])


def read_metrics(path: Path) -> dict[int, dict[str, float]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {row["step"]: row["data"] for row in rows}


def read_batches(folder: Path) -> dict[int, dict]:
    return {
        int(path.stem.split("_")[1]): torch.load(path, weights_only=False)
        for path in folder.glob("batch_*.pt")
    }


def read_weights(folder: Path) -> dict[int, dict[str, torch.Tensor]]:
    return {int(path.stem.split("_")[1]): torch.load(path) for path in folder.glob("weights_*.pt")}
