"""A run's memory (groupwise.train.memory_budget; docs/guides/train.md, "Memory"): the estimate
by hand, the refusal naming the setting to lower and a value that fits, the warning near the
limit, memory.json as a run writes it, the note a killed session leaves, and an allocation
failure ending in one line with the checkpoints intact."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

import groupwise.train.learner as learner_module
import groupwise.train.memory_budget as budget
from groupwise.cli import main
from groupwise.config import ConfigError
from groupwise.train.config_file import load_config
from groupwise.train.memory_budget import (
    GIB,
    HostMemory,
    MemoryEstimate,
    MemoryNote,
    ModelShape,
    check_memory,
    estimate_memory,
    unfinished_session,
)

SHAPE = ModelShape(
    parameters=2**28, trainable=2**20, layers=2, hidden=64, intermediate=128, heads=4, vocab=1000
)


def config(*overrides: str):
    return load_config(None, ["rollout.engine=transformers", *overrides])


def test_host_memory_reads_total_and_available(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       25165824 kB\nMemFree: 1 kB\nMemAvailable:   8388608 kB\n")
    assert HostMemory.read(str(meminfo)) == HostMemory(total=24.0, available=8.0)


def test_the_estimate_by_hand_transformers_engine() -> None:
    """micro_batch_size 6 with groups of 4 rounds to 8 rows (two groups); 100 new tokens and a
    20-token prompt: 8 x 100 + 2 x 20 = 840 tokens, each of
    4 x (2 x (10 x 64 + 4 x 128 + 4 x 120) + 4 x 1000) bytes. The engine decodes 4 x 4 = 16
    completions together (rollout.batch_size 64): 4 copies of 16 x 20 prompt logits, and the
    cache of 16 x 120 tokens."""
    cfg = config(
        "rollout.group_size=4",
        "rollout.max_new_tokens=100",
        "train.micro_batch_size=6",
        "model.dtype=float32",
        "model.lora=true",
        "rollout.questions_per_step=4",
    )
    estimate = estimate_memory(cfg, SHAPE, prompt_tokens=20)
    per_token = 4 * (2 * (10 * 64 + 4 * 128 + 4 * 120) + 4 * 1000)
    buffers = 4 * (4 * 16 * 20 * 1000 + 16 * 120 * 2 * 2 * 64)
    assert estimate.rows == 8
    assert estimate.parts == pytest.approx(
        {
            "model": 1.0,  # 2**28 float32 parameters
            "gradients and optimizer": 12 * 2**20 / GIB,
            "runtime": budget.RUNTIME_GIB["transformers"],
            "sampler's copy": 1.0,  # inference_copy in model.dtype
            "sampler's buffers": buffers / GIB,
            "update": 840 * per_token / GIB,
        }
    )
    no_copy = estimate_memory(config("rollout.inference_copy=false"), SHAPE, 20)
    assert "sampler's copy" not in no_copy.parts


def test_gradient_checkpointing_keeps_one_layer_and_each_layers_input() -> None:
    plain = estimate_memory(config(), SHAPE, 20).parts["update"]
    checkpointed = estimate_memory(config("model.gradient_checkpointing=true"), SHAPE, 20)
    assert checkpointed.parts["update"] < plain
    tokens = 8 * 256 + 1 * 20  # the defaults: 8 rows of one group of 8, 256 new tokens
    per_layer = 10 * 64 + 4 * 128 + 4 * 276
    expected = tokens * 4 * (2 * 64 + per_layer + 4 * 1000) / GIB
    assert checkpointed.parts["update"] == pytest.approx(expected)


def test_vllms_share_fills_the_process_up_to_vllm_memory_of_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM's CPU worker reserves vllm_memory x total for the process; the KV cache is what the
    process does not hold yet; VLLM_CPU_KVCACHE_SPACE replaces it."""
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.setattr(HostMemory, "read", classmethod(lambda cls: HostMemory(20.0, 18.0)))
    estimate = estimate_memory(config("rollout.engine=vllm", "rollout.vllm_memory=0.25"), SHAPE, 20)
    held = 1.0 + 12 * 2**20 / GIB + budget.RUNTIME_GIB["vllm"] + 1.0
    assert estimate.parts["vLLM's KV cache"] == pytest.approx(5.0 - held)
    buffers = budget.VLLM_BUFFERS * budget.VLLM_STEP_TOKENS * 1000 * 4 / GIB
    assert estimate.parts["vLLM's buffers"] == pytest.approx(buffers)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    fixed = estimate_memory(config("rollout.engine=vllm", "rollout.vllm_memory=0.25"), SHAPE, 20)
    assert fixed.parts["vLLM's KV cache"] == 3.0


@pytest.mark.parametrize(
    ("vllm_memory", "parts", "host", "expected"),
    [
        # (16 - 4 - 2) / 24 = 0.4166: vLLM's share holds all but the buffers and the update
        (
            0.9,
            {"model": 0.5, "vLLM's KV cache": 20.0, "vLLM's buffers": 2.0, "update": 4.0},
            HostMemory(total=24.0, available=16.0),
            [
                "rollout.vllm_memory=0.9: lower it to at most 0.41: ",
                "needs about 26.5 GiB",
                "16.0 GiB available of 24.0",
            ],
        ),
        # the SmolLM2 preset's parts where CI's other lanes left 11.6 of 23.5 GiB:
        # 11.6 - 9.8 - 2.6 < 0, no share of vLLM's fits beside this update
        (
            0.95,
            {"model": 0.5, "vLLM's KV cache": 19.9, "vLLM's buffers": 2.6, "update": 9.8},
            HostMemory(total=23.5, available=11.6),
            ["rollout.vllm_memory=0.95: lower it to 0.01, and lower the update's memory: "],
        ),
    ],
    ids=["a-share-fits", "no-share-fits-beside-the-update"],
)
def test_a_share_that_cannot_fit_names_rollout_vllm_memory_and_a_value_that_fits(
    monkeypatch: pytest.MonkeyPatch,
    vllm_memory: float,
    parts: dict[str, float],
    host: HostMemory,
    expected: list[str],
) -> None:
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    cfg = config("rollout.engine=vllm", f"rollout.vllm_memory={vllm_memory}")
    with pytest.raises(ConfigError) as refused:
        check_memory(MemoryEstimate(parts, rows=16), cfg, host)
    assert str(refused.value).startswith(expected[0])
    for text in expected[1:]:
        assert text in str(refused.value)


def test_an_update_that_cannot_fit_names_micro_batch_size_in_whole_groups() -> None:
    cfg = config("rollout.group_size=8", "train.micro_batch_size=32")
    parts = {"model": 1.0, "runtime": 1.0, "update": 16.0}  # 0.5 GiB a row
    with pytest.raises(ConfigError) as refused:
        check_memory(MemoryEstimate(parts, rows=32), cfg, HostMemory(24.0, 12.0))
    # 10 GiB left for the update: 20 rows, 16 in whole groups of 8
    assert str(refused.value).startswith("train.micro_batch_size=32: lower it to at most 16: ")


def test_an_estimate_near_the_limit_warns_and_one_well_below_passes() -> None:
    cfg = config()
    near = MemoryEstimate({"model": 1.0, "update": 8.0}, rows=8)
    with pytest.warns(UserWarning, match="close to the limit"):
        check_memory(near, cfg, HostMemory(24.0, 10.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_memory(near, cfg, HostMemory(24.0, 20.0))


def test_memory_json_and_the_note_of_a_killed_session(tmp_path: Path) -> None:
    note = MemoryNote(
        tmp_path, MemoryEstimate({"model": 1.25, "update": 2.0}, 8), HostMemory(24, 20)
    )
    record = json.loads((tmp_path / "memory.json").read_text())
    assert record["finished"] is False and record["step"] is None
    assert record["estimate_gib"] == {"model": 1.25, "update": 2.0}
    assert "before its first step" in unfinished_session(tmp_path)
    note.after_step(3)
    line = unfinished_session(tmp_path)
    assert line.startswith("the previous session of this run ended without finishing after step 3")
    assert "reserved by estimate: model 1.2, update 2.0 GiB" in line
    note.finished()
    assert unfinished_session(tmp_path) is None
    assert unfinished_session(tmp_path / "elsewhere") is None


def tiny(run: Path, *extra: str) -> list[str]:
    return [
        "train",
        "model.name=tiny-random",
        "data.benchmark=arith",
        "rollout.group_size=2",
        "rollout.max_new_tokens=4",
        "train.micro_batch_size=2",
        "train.progress=false",
        "train.eval_every=0",
        "train.save_every=1",
        f"train.output_dir={run}",
        *extra,
    ]


def test_a_run_records_its_peak_and_finishes_its_note(tmp_path: Path) -> None:
    assert main(tiny(tmp_path / "run", "train.max_steps=1")) == 0
    record = json.loads((tmp_path / "run" / "memory.json").read_text())
    assert record["finished"] is True and record["step"] == 1
    metrics = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert 0 < record["estimate_gib"]["update"] < 1
    assert metrics["peak_memory_gib"] == pytest.approx(record["peak_gib"], abs=0.01)


def test_an_allocation_failure_is_one_line_and_the_checkpoints_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Step 2 asks torch's CPU allocator for a petabyte: its real error, in one line naming
    train.micro_batch_size, exit 1, step 1's checkpoint intact."""
    run = tmp_path / "run"
    assert main(tiny(run, "train.max_steps=1")) == 0
    capsys.readouterr()
    monkeypatch.setattr(
        learner_module.Learner,
        "learn",
        lambda self, batch, step: torch.empty(2**50, dtype=torch.uint8),
    )
    assert main(tiny(run, "train.max_steps=2", "--resume")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("groupwise train: resuming from "), err
    assert err[1].startswith("groupwise train: out of memory in step 2 (")
    assert "can't allocate memory" in err[1] and "lower train.micro_batch_size (now 2)" in err[1]
    # one group of 2 cannot be halved: the command is the resume as it was
    assert err[1].endswith("train.max_steps=2 --resume")
    assert (run / "checkpoints" / "step-1").is_dir()
