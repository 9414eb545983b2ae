"""The trainer on tiny-random: every algorithm path steps and learns something, GRPO ignores an
all-equal group while LENS does not, logged pairs match mine_pairs, the reference policy is the
untouched base, and a resumed run logs what an uninterrupted one logs."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

import groupwise.train.trainer as trainer_module
from groupwise.algorithms import mine_pairs
from groupwise.completion_logprobs import completion_logprobs
from groupwise.models import load_model, reference_policy
from groupwise.records import iter_jsonl
from groupwise.train.config_file import config_from_dict
from groupwise.train.preflight import load_run_config
from groupwise.train.trainer import Trainer


def logged(path: Path) -> list[dict]:
    """The JSON objects of a run's JSON-lines log, in order."""
    return [row for _, row in iter_jsonl(path)]


TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

# Timing keys differ between any two runs; everything else must be reproducible.
TIMING = {
    "seconds_generation",
    "seconds_scoring",
    "seconds_training",
    "seconds_old_policy",
    "seconds_step",
    "tokens_per_second",
    "peak_memory_gib",  # the process's peak so far: a later run in the same process reads higher
}


def base_overrides(run_dir: Path) -> list[str]:
    return [
        "model.name=tiny-random",
        "data.benchmark=gsm8k",
        "data.prompt=boxed",
        "rollout.group_size=4",
        "rollout.questions_per_step=2",
        "rollout.max_new_tokens=8",
        "train.micro_batch_size=4",  # two micro-batches: gradient accumulation is exercised
        "train.max_steps=2",
        "train.progress=false",
        "optim.lr=1e-2",
        "optim.warmup_ratio=0",
        "optim.max_grad_norm=1.0",
        "reward.plugins=[reward_plugin]",
        "reward.weights={text_hash: 1.0}",
        f"train.output_dir={run_dir}",
    ]


def make_trainer(tmp_path: Path, *extra: str, resume: bool = False) -> Trainer:
    return Trainer(load_run_config(None, [*base_overrides(tmp_path), *extra]), resume=resume)


def trainable(trainer: Trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.params]


PATHS = {
    "grpo": [],
    "grpo_dapo": ["algorithm.aggregation=dapo"],
    "grpo_dr_grpo": ["algorithm.aggregation=dr_grpo", "algorithm.scale_rewards=none"],
    "grpo_batch_scale_kl": ["algorithm.scale_rewards=batch", "algorithm.kl_coef=0.1"],
    "gspo_two_iterations": [
        "algorithm.loss_level=sequence",
        "algorithm.num_iterations=2",
        "algorithm.eps_low=3e-4",
        "algorithm.eps_high=4e-4",
    ],
    "amir": ["algorithm.amir=true"],
    "amir_with_reference": ["algorithm.amir=true", "algorithm.ref_free=false"],
    "amir_grad_lambda": ["algorithm.amir=true", "algorithm.lambda_measure=grad"],
    "lens": [
        "algorithm.advantage=lens",
        "reward.weights={binary: 1.0}",
        "reward.correctness_component=binary",
    ],
    "lens_negative_only_two_iterations": [
        "algorithm.advantage=lens",
        "algorithm.lens_mode=negative_only",
        "reward.weights={binary: 1.0}",
        "reward.correctness_component=binary",
        "algorithm.num_iterations=2",
    ],
    "amir_plus_lens": [
        "algorithm.advantage=lens",
        "algorithm.amir=true",
        "reward.weights={binary: 1.0, text_hash: 1.0}",
        "reward.correctness_component=binary",
    ],
    "full_finetune": ["model.lora=false"],
}


@pytest.mark.parametrize("name", list(PATHS))
def test_every_algorithm_path_steps_and_changes_weights(tmp_path: Path, name: str) -> None:
    trainer = make_trainer(tmp_path, *PATHS[name])
    before = trainable(trainer)
    trainer.train()
    after = trainable(trainer)
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True)), name

    records = logged(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        for key in ("policy_loss", "kl", "preference_loss", "grad_norm", "reward_mean"):
            assert math.isfinite(record[key]), (name, key, record[key])
        assert ("lambda" in record) == ("amir" in name)
        assert record["grad_norm"] > 0
    if "amir" in name:
        assert sum(r["pairs"] for r in records) > 0
        assert any(r["preference_loss"] > 0 for r in records)
    assert (tmp_path / "final" / ("model" if name == "full_finetune" else "adapter")).is_dir()


def test_all_equal_group_gives_zero_gradient_under_grpo_but_not_lens(tmp_path: Path) -> None:
    # tiny-random never answers a GSM8K question: every group is all wrong, all rewards equal.
    # No weight decay: AdamW's decoupled decay moves weights even with a zero gradient.
    binary = [
        "reward.weights={binary: 1.0}",
        "reward.correctness_component=binary",
        "train.max_steps=1",
        "optim.weight_decay=0",
    ]
    grpo = make_trainer(tmp_path / "grpo", *binary)
    before = trainable(grpo)
    grpo.train()
    record = logged(tmp_path / "grpo" / "metrics.jsonl")[0]
    assert record["group_all_wrong"] == 1.0
    assert record["grad_norm"] == 0.0 and record["advantage_abs_mean"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, trainable(grpo), strict=True))

    lens = make_trainer(tmp_path / "lens", *binary, "algorithm.advantage=lens")
    lens.train()
    record = logged(tmp_path / "lens" / "metrics.jsonl")[0]
    assert record["group_all_wrong"] == 1.0
    assert record["grad_norm"] > 0 and record["advantage_abs_mean"] > 0
    # Negative groups: |A| <= alpha / G (docs/algorithms.md §3).
    samples = logged(tmp_path / "lens" / "rollouts.jsonl")[0]
    assert max(abs(a) for a in samples["advantages"]) <= 0.25 / 4 + 1e-6


@pytest.mark.parametrize(
    ("name", "pass_runs"),
    [("grpo", False), ("lens", False), ("amir_plus_lens", True), ("amir", False)],
)
def test_the_old_policy_pass_is_timed_where_it_runs(
    tmp_path: Path, name: str, pass_runs: bool
) -> None:
    """seconds_old_policy: the no-grad rollout-policy pass (LENS with AMIR needs every row's
    logp_old before the first update; GRPO, AMIR alone and LENS alone take it from the first
    update's own pass, train.step_targets), a part of seconds_training."""
    trainer = make_trainer(tmp_path, *PATHS[name], "train.max_steps=1")
    trainer.train()
    record = logged(tmp_path / "metrics.jsonl")[0]
    if pass_runs:
        assert 0 < record["seconds_old_policy"] < record["seconds_training"]
    else:
        assert record["seconds_old_policy"] == 0.0


def test_a_cpu_run_keeps_freed_host_memory(tmp_path: Path, monkeypatch) -> None:
    """On a CPU the trainer sets glibc to keep freed blocks (docs/guides/train.md, "Host
    memory"), once, before the policy is loaded."""
    calls = []
    monkeypatch.setattr(
        "groupwise.train.trainer.keep_freed_memory", lambda: calls.append("set") or True
    )
    monkeypatch.setattr(
        "groupwise.train.trainer.load_trainable_policy",
        _recording(calls, "policy", trainer_module.load_trainable_policy),
    )
    make_trainer(tmp_path, "model.device=cpu").close()
    assert calls == ["set", "policy"]


def _recording(calls: list[str], name: str, function):
    def wrapped(*args, **kwargs):
        calls.append(name)
        return function(*args, **kwargs)

    return wrapped


def test_logged_pairs_equal_mine_pairs_on_logged_rewards(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, "algorithm.amir=true", "train.max_steps=3")
    trainer.train()
    metrics = logged(tmp_path / "metrics.jsonl")
    samples = logged(tmp_path / "rollouts.jsonl")
    assert len(metrics) == len(samples) == 3
    for record, sample in zip(metrics, samples, strict=True):
        chosen, rejected = mine_pairs(torch.tensor(sample["rewards"]), 4, 2.0)
        assert record["pairs"] == chosen.numel()
        assert sample["pairs"] == [chosen.tolist(), rejected.tolist()]
        assert record["pairs_per_group"] == chosen.numel() / 2


def test_reference_policy_is_the_untouched_base_model(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, "train.max_steps=1")
    trainer.train()
    base, _ = load_model("tiny-random", seed=0)
    batch = (
        torch.tensor([[0, 5, 6, 7]]),
        torch.tensor([[0, 1, 1, 1]]),
        torch.tensor([[8, 9, 10]]),
        torch.tensor([[1, 1, 1]]),
    )
    with torch.no_grad():
        with reference_policy(trainer.model):
            reference = completion_logprobs(trainer.model, *batch)
        policy = completion_logprobs(trainer.model, *batch)
        untouched = completion_logprobs(base.eval(), *batch)
    torch.testing.assert_close(reference, untouched, atol=1e-6, rtol=1e-6)
    assert not torch.allclose(policy, untouched)  # training did move the policy


def _comparable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in records]


@pytest.mark.parametrize(
    "method",
    [
        ["algorithm.amir=true"],
        # below its target (a random model's token entropy is about 10 nats) the adaptive
        # entropy coefficient rises by its delta every update: a resume that restarted it
        # would log other coefficients and losses
        ["algorithm.entropy_adaptive=true", "algorithm.entropy_target=100"],
    ],
    ids=["amir", "adaptive_entropy"],
)
def test_resume_logs_the_same_metrics_as_an_uninterrupted_run(
    tmp_path: Path, method: list[str]
) -> None:
    extra = [*method, "train.max_steps=4", "train.save_every=2"]
    make_trainer(tmp_path / "straight", *extra).train()

    # Interrupted after step 3 (a checkpoint exists only at step 2), then resumed.
    interrupted = make_trainer(tmp_path / "resumed", *extra)
    for _ in range(3):
        record, _ = interrupted.train_step()
        interrupted.step += 1
        interrupted.log.write(record)
        if interrupted.step % 2 == 0:
            interrupted.save()
    interrupted.close()  # its process would have died: the folder's lock goes with it
    resumed = make_trainer(tmp_path / "resumed", *extra, resume=True)
    assert resumed.step == 2
    resumed.train()

    straight = logged(tmp_path / "straight" / "metrics.jsonl")
    again = logged(tmp_path / "resumed" / "metrics.jsonl")
    assert [r["step"] for r in again] == [1, 2, 3, 4]
    assert _comparable(again) == _comparable(straight)
    coefficients = [r.get("entropy_coef") for r in straight]
    assert coefficients[0] is None or coefficients[3] > coefficients[0]


@pytest.mark.slow
def test_sigkill_then_resume_matches_uninterrupted_run(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    extra = ["algorithm.amir=true", "train.max_steps=4", "train.save_every=1"]

    def command(run_dir: Path, *flags: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "groupwise",
            "train",
            *base_overrides(run_dir),
            *extra,
            *flags,
        ]

    subprocess.run(command(tmp_path / "straight"), env=env, check=True, capture_output=True)

    killed_dir = tmp_path / "killed"
    process = subprocess.Popen(
        command(killed_dir), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while not (killed_dir / "checkpoints" / "step-2").is_dir():
        assert process.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not (killed_dir / "final").exists()

    subprocess.run(command(killed_dir, "--resume"), env=env, check=True, capture_output=True)
    straight = logged(tmp_path / "straight" / "metrics.jsonl")
    resumed = logged(killed_dir / "metrics.jsonl")
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]
    assert _comparable(resumed) == _comparable(straight)


def test_bad_config_is_a_clear_cli_error(tmp_path: Path, capsys) -> None:
    from groupwise.cli import main

    code = main(["train", f"train.output_dir={tmp_path}", "algorithm.advantage=ppo"])
    assert code == 2
    err = capsys.readouterr().err
    assert "algorithm.advantage" in err and "grpo, lens" in err
    assert not (tmp_path / "metrics.jsonl").exists()


def test_print_config_shows_resolved_values(capsys) -> None:
    from groupwise.cli import main

    assert (
        main(
            [
                "train",
                "--config",
                str(REPO / "configs" / "quickstart_gsm8k.yaml"),
                "--print-config",
                "optim.lr=3e-5",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    resolved = yaml.safe_load(printed)
    assert resolved["optim"]["lr"] == 3e-5 and resolved["model"]["name"] == "smollm2-135m-instruct"
    # every option comes with its documentation, and the output loads back as the same config
    assert "  # beta_DPO, temperature of the pair logit z" in printed
    assert "Valid: > 0." in printed.split("beta_dpo:")[0].rsplit("beta_DPO", 1)[1]
    assert printed.count("\n  # ") >= sum(len(section) for section in resolved.values())
    assert config_from_dict(resolved) == load_run_config(
        REPO / "configs" / "quickstart_gsm8k.yaml", ["optim.lr=3e-5"]
    )
