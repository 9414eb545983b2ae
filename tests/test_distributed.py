"""Multi-process training: two processes (torchrun, gloo on CPU) take the same optimizer steps as
one process on the same global batch, and the collectives are the identity in one process.

The 2-process run splits each step's 2 questions one per process (groups never straddle), draws
each question's completions from its own seeded stream (so they equal the 1-process ones), and
normalises by the global counts: batch-scale advantages (global std), dapo (global tokens), AMIR
pairs pooled over both processes and lambda updated from the pooled losses.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from groupwise.config import ConfigError
from groupwise.records import iter_jsonl
from groupwise.train.distributed import Distributed
from groupwise.train.preflight import load_run_config


def logged(path: Path) -> list[dict]:
    """The JSON objects of a run's JSON-lines log, in order."""
    return [row for _, row in iter_jsonl(path)]


TESTS = Path(__file__).resolve().parent

OVERRIDES = [
    "model.name=tiny-random",
    "data.benchmark=gsm8k",
    "data.prompt=boxed",
    "rollout.group_size=4",
    "rollout.questions_per_step=2",
    "rollout.max_new_tokens=6",
    "train.micro_batch_size=8",  # one loss computation per step in both layouts
    "train.max_steps=2",
    "train.save_every=1",
    "train.progress=false",
    # Plain SGD: an update is lr x the clipped gradient, linear in it, so two processes' float
    # rounding moves the weights by as little as it moves the gradient (AdamW divides each
    # gradient by its own magnitude: a near-zero one, all rounding, still moves by up to lr).
    "optim.optimizer=sgd",
    "optim.weight_decay=0",
    "optim.lr=1.0",
    "optim.max_grad_norm=0.1",
    "optim.warmup_ratio=0",
    "reward.plugins=[reward_plugin]",
    "reward.weights={text_hash: 1.0}",
    "reward.workers=1",
    "algorithm.amir=true",
    "algorithm.aggregation=dapo",
    "algorithm.scale_rewards=batch",
]
TIMING = {
    "seconds_generation",
    "seconds_scoring",
    "seconds_training",
    "seconds_old_policy",
    "seconds_step",
    "peak_memory_gib",
}


# A second layout: 2 PPO mini-batches of 2 questions (each process takes one question of each),
# LENS advantages from the gathered rollout log-probs, AMIR pairs on the calibrated totals.
LAYOUTS = {
    "one_minibatch": [],
    "two_minibatches_lens_amir": [
        "rollout.questions_per_step=4",
        "algorithm.minibatches=2",
        "algorithm.advantage=lens",
        "reward.weights={text_hash: 1.0, binary: 1.0}",
        "reward.correctness_component=binary",
    ],
    # LENS alone: each process computes its groups' advantages from its own training pass
    "lens_alone": [
        "algorithm.amir=false",
        "algorithm.advantage=lens",
        "reward.weights={text_hash: 1.0, binary: 1.0}",
        "reward.correctness_component=binary",
    ],
}


# How several processes are started (docs/guides/distributed.md): torchrun, or accelerate's
# launcher without a config file (it starts them through torchrun).
LAUNCHERS = {
    "torchrun": ["torch.distributed.run", "--standalone", "--nproc_per_node={n}"],
    # --multi_gpu: without it accelerate starts one process where there is no GPU
    "accelerate": ["accelerate.commands.launch", "--multi_gpu", "--num_processes={n}"],
}


def _launch(
    run_dir: Path, processes: int, extra: list[str], launch: str = "torchrun"
) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "OMP_NUM_THREADS": "1",
        "LAUNCH_PROBE_DIR": str(run_dir.parent / f"probe{processes}"),
    }
    (run_dir.parent / f"probe{processes}").mkdir()
    launcher = [sys.executable, "-m", "groupwise"]
    if processes > 1:
        options = [option.format(n=processes) for option in LAUNCHERS[launch]]
        launcher = [sys.executable, "-m", *options, "-m", "groupwise"]
    probe = ["reward.plugins=[reward_plugin, launch_probe]"]  # records each process's rank
    command = [*launcher, "train", *OVERRIDES, *extra, *probe, f"train.output_dir={run_dir}"]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.mark.parametrize(
    ("layout", "launch"),
    # each layout once, and each launcher at least once (CI's time: a layout under a second
    # launcher took 70-100 s and showed the launcher alone)
    [
        ("one_minibatch", "torchrun"),
        ("two_minibatches_lens_amir", "torchrun"),
        ("lens_alone", "accelerate"),
    ],
)
def test_two_processes_take_the_same_steps_as_one(tmp_path: Path, layout: str, launch: str) -> None:
    runs = {n: _launch(tmp_path / f"procs{n}", n, LAYOUTS[layout], launch) for n in (1, 2)}
    for n, process in runs.items():
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, f"{n} process(es) failed:\n{output.decode()[-3000:]}"
        started = sorted(path.name for path in (tmp_path / f"probe{n}").iterdir())
        assert started == [f"{rank}-of-{n}" for rank in range(n)], launch

    one = logged(tmp_path / "procs1" / "metrics.jsonl")
    two = logged(tmp_path / "procs2" / "metrics.jsonl")  # rank 0 alone writes it
    assert [r["step"] for r in two] == [1, 2]
    # The comparison means something: completions disagree, pairs are mined, lambda moves.
    assert all(r["grad_norm"] > 0 and r["advantage_abs_mean"] > 0 for r in one)
    if "algorithm.amir=false" not in LAYOUTS[layout]:
        assert all(r["pairs"] > 0 for r in one)
        assert one[-1]["lambda"] != 0.01
    for a, b in zip(one, two, strict=True):
        assert a.keys() == b.keys()
        for key in a.keys() - TIMING - {"tokens_per_second"}:
            if isinstance(a[key], float):
                assert math.isclose(a[key], b[key], rel_tol=1e-4, abs_tol=1e-6), key
            else:
                assert a[key] == b[key], key
    # The same completions, rewards and pairs; LENS's calibrated rewards (and so advantages)
    # come from log-probs of other micro-batch compositions: equal to float rounding.
    for a, b in zip(
        logged(tmp_path / "procs1" / "rollouts.jsonl"),
        logged(tmp_path / "procs2" / "rollouts.jsonl"),
        strict=True,
    ):
        assert a.keys() == b.keys()
        for key in a:
            if key in ("rewards", "advantages"):
                torch.testing.assert_close(
                    torch.tensor(b[key]), torch.tensor(a[key]), atol=1e-5, rtol=0, msg=key
                )
            else:
                assert a[key] == b[key], key

    # The bound: each update moves the adapter by lr x the clipped gradient, a vector of norm at
    # most lr x max_grad_norm. The two runs' gradients are the same terms summed in another
    # order (float32: a relative change of about n x 2^-24, ~1e-6 here) from advantages that
    # agree to 1e-5 (above), and the gradient is linear in them; so no weight may differ by more
    # than 1e-4 of the largest change the updates could make. A wrong scale shows in grad_norm.
    per_step = 2 if "algorithm.minibatches=2" in LAYOUTS[layout] else 1
    for where, steps in (("checkpoints/step-1", 1), ("final", 2)):
        largest_change = steps * per_step * 1.0 * 0.1  # updates x lr (at most) x max_grad_norm
        weights_one = load_file(
            str(tmp_path / "procs1" / where / "adapter/adapter_model.safetensors")
        )
        weights_two = load_file(
            str(tmp_path / "procs2" / where / "adapter/adapter_model.safetensors")
        )
        assert weights_one.keys() == weights_two.keys()
        for name, value in weights_one.items():
            torch.testing.assert_close(
                weights_two[name], value, atol=1e-4 * largest_change, rtol=0, msg=name
            )


def test_collectives_are_the_identity_in_one_process() -> None:
    single = Distributed()
    assert (single.world_size, single.rank, single.is_main) == (1, 0, True)
    assert single.sum([1.5, 2]) == [1.5, 2.0]
    assert single.gather({"a": 1}) == [{"a": 1}]
    assert single.any(True) and not single.any(False)
    grad = torch.ones(3)
    param = torch.nn.Parameter(torch.zeros(3))
    param.grad = grad
    single.sum_gradients([param])
    assert param.grad is grad and torch.equal(grad, torch.ones(3))
    assert single.device("cpu") == "cpu"


def test_question_shard_gives_each_process_its_questions_of_each_minibatch() -> None:
    layout = Distributed()
    layout.world_size = 3
    one, two = [], []
    for rank in range(3):
        layout.rank = rank
        one.append(layout.question_shard(6))
        two.append(layout.question_shard(12, minibatches=2))
    assert one == [[0, 1], [2, 3], [4, 5]]
    # mini-batch 0 is questions 0..5, mini-batch 1 is 6..11; each process takes 2 of each
    assert two == [[0, 1, 6, 7], [2, 3, 8, 9], [4, 5, 10, 11]]
    assert sorted(q for part in two for q in part) == list(range(12))
    with pytest.raises(ValueError, match="7 questions do not split into 1 mini-batches over 3"):
        layout.question_shard(7)


def test_questions_per_step_must_split_over_the_processes(tmp_path: Path, monkeypatch) -> None:
    """Checked at preflight, from the launcher's WORLD_SIZE: before any model loads."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    overrides = ["rollout.questions_per_step=3", f"train.output_dir={tmp_path}", "model.name=x"]
    with pytest.raises(
        ConfigError, match=r"questions_per_step=3 must be a multiple of .* processes \(2\)"
    ):
        load_run_config(None, overrides)
    with pytest.raises(ConfigError, match=r"processes \(2\) x algorithm.minibatches \(2\)"):
        load_run_config(
            None, [*overrides[1:], "rollout.questions_per_step=6", "algorithm.minibatches=2"]
        )
    fits = load_run_config(None, [*overrides[1:], "rollout.questions_per_step=4"])
    assert fits.rollout.questions_per_step == 4
