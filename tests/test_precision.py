"""train.precision=bfloat16 (docs/guides/train.md, "Mixed precision"): the training passes run
their matmuls in bfloat16 under torch.autocast, while the weights, the LoRA adapters, the
optimizer state and the log-probs stay float32; on the tiny-random trainer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from test_run_folder import checkpoint, log_lines
from test_trainer import base_overrides

from groupwise.config import ConfigError
from groupwise.train.config_file import load_config
from groupwise.train.precision import autocast_dtype, cpu_flags, native_bfloat16, resolved_precision
from groupwise.train.preflight import load_run_config
from groupwise.train.run_folder import RunFolder, RunFolderError
from groupwise.train.trainer import Trainer


def _trainer(tmp_path: Path, precision: str) -> Trainer:
    return Trainer(
        load_run_config(None, [*base_overrides(tmp_path), f"train.precision={precision}"])
    )


def _rollouts(trainer: Trainer):
    problems = trainer.sampler.batch(0)
    questions = list(range(len(problems)))
    return trainer.batches.rollout(problems, questions, trainer.batches.position)


def test_bfloat16_passes_keep_float32_log_probs_and_gradients_near_float32(tmp_path) -> None:
    """The same weights and completions: the bfloat16 pass's log-probs are float32, within
    bfloat16's rounding of the float32 pass's and not equal to them (the matmuls did run in
    bfloat16); the gradient of their sum reaches the float32 adapters, within a few percent."""
    full = _trainer(tmp_path / "fp32", "float32")
    mixed = _trainer(tmp_path / "bf16", "bfloat16")
    mixed.model.load_state_dict(full.model.state_dict())
    rollouts = _rollouts(full)
    rows = slice(0, len(rollouts))
    mask = rollouts.completion_mask.bool()
    results = []
    for trainer in (full, mixed):
        trainer.model.zero_grad()
        logp = trainer.passes.logprobs(rollouts, rows)
        logp[mask].sum().backward()
        grads = torch.cat([p.grad.reshape(-1) for p in trainer.params])
        results.append((logp.detach(), grads))
        assert logp.dtype == torch.float32
        assert all(p.dtype == torch.float32 for p in trainer.params)
    (logp32, grad32), (logp16, grad16) = results
    difference = (logp16 - logp32)[mask].abs()
    assert 0 < float(difference.max()) < 0.1
    cosine = torch.nn.functional.cosine_similarity(grad16, grad32, dim=0)
    assert float(cosine) > 0.99
    assert float((grad16 - grad32).norm() / grad32.norm()) < 0.1
    full.close()
    mixed.close()


def test_a_bfloat16_step_trains_the_float32_weights(tmp_path) -> None:
    """One step in bfloat16: the adapters move and stay float32, as does the optimizer's state."""
    trainer = _trainer(tmp_path, "bfloat16")
    before = [p.detach().clone() for p in trainer.params]
    trainer.train()
    after = list(trainer.params)
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert all(p.dtype == torch.float32 for p in after)
    state = trainer.updater.optimizer.state_dict()["state"]
    assert state and all(
        t.dtype == torch.float32
        for s in state.values()
        for t in s.values()
        if t.is_floating_point()
    )
    trainer.close()


def test_bfloat16_passes_need_float32_weights() -> None:
    with pytest.raises(ConfigError, match=r"train.precision=bfloat16 runs float32 weights' pass"):
        load_run_config(None, ["train.precision=bfloat16", "model.dtype=bfloat16"])


def test_bfloat16_is_native_on_cpus_with_amx_or_avx512_bf16_only(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile\n")
    assert cpu_flags(cpuinfo) == {"fpu", "avx2", "avx512f", "amx_bf16", "amx_tile"}
    assert cpu_flags(tmp_path / "absent") == set()
    assert native_bfloat16("cpu", {"avx512_bf16"}) and native_bfloat16("cpu", {"amx_bf16"})
    # no bfloat16 units: AVX2 (100x slower in bfloat16, bench/matmul_dtype.py), AVX512 without BF16
    assert not native_bfloat16("cpu", {"avx2", "fma"})
    assert not native_bfloat16("cpu", {"avx512f", "avx512bw"})
    assert not native_bfloat16("mps", {"avx512_bf16"})  # not measured there: float32


@pytest.mark.parametrize(
    ("native", "model_dtype", "precision", "sampler"),
    [
        (True, "float32", "bfloat16", "bfloat16"),
        (False, "float32", "float32", "auto"),
        # bfloat16 passes need float32 weights; bfloat16 weights run in their own dtype
        (True, "bfloat16", "float32", "auto"),
    ],
)
def test_auto_precision_is_bfloat16_only_where_the_device_multiplies_it(
    native: bool, model_dtype: str, precision: str, sampler: str
) -> None:
    config = load_config(
        None, ["train.precision=auto", "rollout.dtype=precision", f"model.dtype={model_dtype}"]
    )
    resolved = resolved_precision(config, native=native)
    assert (resolved.train.precision, resolved.rollout.dtype) == (precision, sampler)
    # named values are what the user asked for, on any machine
    named = load_config(None, ["train.precision=bfloat16", "rollout.dtype=float16"])
    assert resolved_precision(named, native=False) is named


def test_preflight_resolves_auto_precision_and_the_run_folder_records_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from groupwise.train import precision

    overrides = [*base_overrides(tmp_path), "train.precision=auto", "rollout.dtype=precision"]
    monkeypatch.setattr(precision, "native_bfloat16", lambda device: False)
    resolved = load_run_config(None, overrides)
    assert (resolved.train.precision, resolved.rollout.dtype) == ("float32", "auto")
    RunFolder.open(tmp_path, resolved, "fresh").close()
    (tmp_path / "metrics.jsonl").write_text(log_lines([1, 2]))  # then it ran two steps
    checkpoint(tmp_path, 2)
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert (saved["train"]["precision"], saved["rollout"]["dtype"]) == ("float32", "auto")
    # resumed where bfloat16 is native, the run would change precision: refused, key named
    monkeypatch.setattr(precision, "native_bfloat16", lambda device: True)
    elsewhere = load_run_config(None, overrides)
    assert (elsewhere.train.precision, elsewhere.rollout.dtype) == ("bfloat16", "bfloat16")
    with pytest.raises(RunFolderError, match=r"train.precision: 'float32' -> 'bfloat16' \(where"):
        RunFolder.open(tmp_path, elsewhere, "resume")


def test_an_unresolved_precision_is_refused_where_a_run_is_built() -> None:
    from groupwise.train.rollout_engine import build_generator

    with pytest.raises(ValueError, match=r"train.precision=auto is resolved when a run starts"):
        autocast_dtype("auto")
    assert autocast_dtype("bfloat16") is torch.bfloat16 and autocast_dtype("float32") is None
    unresolved = load_config(None, ["rollout.dtype=precision"])
    with pytest.raises(ValueError, match=r"dtype precision are resolved when a run starts"):
        build_generator(unresolved, None, None)
