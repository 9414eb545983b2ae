"""Checkpoints carry a manifest (sizes and SHA-256 of every file, written last) and resume takes
the newest intact one, naming each damaged one it skipped and why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from groupwise.models import LoraSettings, attach_lora, load_model
from groupwise.train.checkpoint import (
    MANIFEST,
    checkpoint_problem,
    find_resume_point,
    list_checkpoints,
    load_trainer_state,
    load_weights_into,
    save_checkpoint,
    set_aside,
    write_manifest,
)


def fake_checkpoint(run: Path, step: int, manifest: bool = True) -> Path:
    """A checkpoint folder as save_checkpoint lays it out, with small files."""
    folder = run / "checkpoints" / f"step-{step}"
    (folder / "adapter").mkdir(parents=True)
    (folder / "adapter" / "adapter_model.safetensors").write_bytes(bytes(range(256)) * (step + 1))
    (folder / "adapter" / "adapter_config.json").write_text('{"r": 16}')
    torch.save({"step": step}, folder / "trainer_state.pt")
    if manifest:
        write_manifest(folder, step)
    return folder


def test_manifest_lists_every_file_with_size_and_sha256(tmp_path: Path) -> None:
    import hashlib

    folder = fake_checkpoint(tmp_path, 3)
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["step"] == 3
    assert sorted(manifest["files"]) == [
        "adapter/adapter_config.json",
        "adapter/adapter_model.safetensors",
        "trainer_state.pt",
    ]
    weights = folder / "adapter" / "adapter_model.safetensors"
    entry = manifest["files"]["adapter/adapter_model.safetensors"]
    assert entry == {"bytes": 1024, "sha256": hashlib.sha256(weights.read_bytes()).hexdigest()}
    assert checkpoint_problem(folder) is None


DAMAGES = {
    "truncated weights": (
        lambda f: (f / "adapter/adapter_model.safetensors").write_bytes(b"\0" * 100),
        "adapter/adapter_model.safetensors has 100 bytes, the manifest says 1024",
    ),
    "truncated trainer state": (
        lambda f: (f / "trainer_state.pt").write_bytes((f / "trainer_state.pt").read_bytes()[:50]),
        "trainer_state.pt has 50 bytes",
    ),
    "same size, other bytes": (
        lambda f: (f / "adapter/adapter_model.safetensors").write_bytes(b"\1" * 1024),
        "adapter/adapter_model.safetensors does not match its SHA-256",
    ),
    "deleted file": (
        lambda f: (f / "adapter/adapter_config.json").unlink(),
        "adapter/adapter_config.json is missing",
    ),
    "deleted manifest": (lambda f: (f / MANIFEST).unlink(), "no manifest.json"),
    "torn manifest": (
        lambda f: (f / MANIFEST).write_text((f / MANIFEST).read_text()[:30]),
        "manifest.json is unreadable",
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_resume_skips_a_damaged_newest_checkpoint_and_says_why(tmp_path: Path, damage: str) -> None:
    older = fake_checkpoint(tmp_path, 2)
    newest = fake_checkpoint(tmp_path, 3)
    harm, reason = DAMAGES[damage]
    harm(newest)
    point = find_resume_point(tmp_path)
    assert point.checkpoint == older and point.step == 2
    assert [path for path, _ in point.skipped] == [newest]
    assert reason in point.skipped[0][1]


def test_no_intact_checkpoint_and_no_checkpoint_at_all(tmp_path: Path) -> None:
    assert find_resume_point(tmp_path).checkpoint is None
    assert find_resume_point(tmp_path).skipped == []
    damaged = fake_checkpoint(tmp_path, 1, manifest=False)
    point = find_resume_point(tmp_path)
    assert point.checkpoint is None and point.step == 0
    assert point.skipped == [
        (damaged, "no manifest.json (damaged, or written before checkpoints had manifests)")
    ]


def test_a_manifest_of_another_step_is_not_trusted(tmp_path: Path) -> None:
    folder = fake_checkpoint(tmp_path, 4)
    moved = folder.rename(folder.with_name("step-5"))
    assert checkpoint_problem(moved) == "manifest.json does not describe step-5"


def test_set_aside_renames_out_of_the_way_of_resume_and_pruning(tmp_path: Path) -> None:
    first = set_aside(fake_checkpoint(tmp_path, 3, manifest=False))
    second = set_aside(fake_checkpoint(tmp_path, 3, manifest=False))
    assert (first.name, second.name) == ("step-3.damaged", "step-3.damaged-2")
    assert list_checkpoints(tmp_path) == []


class _Saveable(torch.nn.Module):
    """A model with save_pretrained, as save_checkpoint needs (full weights: model/)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)

    def save_pretrained(self, folder: Path) -> None:
        from safetensors.torch import save_file

        Path(folder).mkdir(parents=True)
        save_file(self.state_dict(), str(Path(folder) / "model.safetensors"))


def test_save_checkpoint_writes_an_intact_manifest_and_prunes_only_earlier_steps(
    tmp_path: Path,
) -> None:
    model = _Saveable()
    # A checkpoint of a later step (left by another run): the one just written is never pruned.
    stray = fake_checkpoint(tmp_path, 9)
    for step in (1, 2, 3):
        saved = save_checkpoint(tmp_path, step, model, None, {"step": step}, keep=2)
        assert checkpoint_problem(saved) is None
        assert saved.is_dir()
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == ["step-2", "step-3", "step-9"] and stray.is_dir()
    assert sorted(json.loads((saved / MANIFEST).read_text())["files"]) == [
        "model/model.safetensors",
        "trainer_state.pt",
    ]


def test_a_real_lora_checkpoint_falls_back_to_the_previous_one(tmp_path: Path) -> None:
    model, tokenizer = load_model("tiny-random", seed=0)
    model = attach_lora(model, LoraSettings(r=2, alpha=2))
    lora = [p for n, p in model.named_parameters() if "lora_B" in n]
    weights = {}
    for step in (1, 2):
        with torch.no_grad():
            for p in lora:
                p.fill_(float(step))
        weights[step] = [p.detach().clone() for p in lora]
        save_checkpoint(tmp_path, step, model, tokenizer, {"step": step}, keep=2)
    adapter = tmp_path / "checkpoints" / "step-2" / "adapter" / "adapter_model.safetensors"
    adapter.write_bytes(adapter.read_bytes()[: adapter.stat().st_size // 2])  # a full disk

    point = find_resume_point(tmp_path)
    assert point.step == 1
    assert "adapter/adapter_model.safetensors has" in point.skipped[0][1]
    with torch.no_grad():
        for p in lora:
            p.zero_()
    load_weights_into(model, point.checkpoint)
    assert all(torch.equal(p, w) for p, w in zip(lora, weights[1], strict=True))
    assert load_trainer_state(point.checkpoint) == {"step": 1}
