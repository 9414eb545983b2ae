"""Checkpoints of a training run: written atomically, verified on resume.

Layout: RUN/checkpoints/step-N/{adapter/ | model/, trainer_state.pt, manifest.json}. A
checkpoint is written under a temporary name and renamed when complete, so a crash mid-write
(even SIGKILL) never leaves a half checkpoint where resume would look. manifest.json, written
last, holds the size and SHA-256 of every other file: resume takes the newest checkpoint whose
files all match it (`find_resume_point`), so a checkpoint damaged afterwards (a truncated or
deleted file, a full disk) is skipped with the reason instead of failing with a traceback.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

_STEP_DIR = re.compile(r"^step-(\d+)$")
MANIFEST = "manifest.json"
_CHUNK = 1 << 20


def rng_state() -> dict[str, Any]:
    """The global random states (python, numpy, torch CPU and CUDA)."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: torch.nn.Module,
    tokenizer: Any,
    state: dict[str, Any],
    keep: int = 2,
) -> Path:
    """Writes RUN/checkpoints/step-{step} atomically; keeps the newest `keep` checkpoints.

    `model` is saved with save_pretrained: a PeftModel writes only its adapter (adapter/),
    a plain model its full weights (model/). `state` holds everything else (optimizer,
    scheduler, AdaptiveLambda, RNG, data position) and goes to trainer_state.pt.
    """
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step}"
    tmp = root / f".tmp-step-{step}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    weights_dir = tmp / ("adapter" if hasattr(model, "peft_config") else "model")
    model.save_pretrained(weights_dir)
    if tokenizer is not None:
        tokenizer.save_pretrained(weights_dir)
    torch.save(state, tmp / "trainer_state.pt")
    write_manifest(tmp, step)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    # Only checkpoints up to this step are pruned: the one just written is never among them.
    earlier = [path for path in list_checkpoints(run_dir) if checkpoint_step(path) <= step]
    for old in earlier[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def checkpoint_step(checkpoint: Path) -> int:
    """N of a checkpoint folder named step-N."""
    match = _STEP_DIR.match(Path(checkpoint).name)
    if match is None:
        raise ValueError(f"{checkpoint}: not a checkpoint folder (step-N)")
    return int(match.group(1))


def list_checkpoints(run_dir: Path) -> list[Path]:
    """The step-N folders of a run, oldest first (intact or not: see `checkpoint_problem`)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [path for path in root.iterdir() if _STEP_DIR.match(path.name) and path.is_dir()]
    return sorted(found, key=checkpoint_step)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(folder: Path, step: int) -> None:
    """Writes folder/manifest.json: {"step": N, "files": {relative path: {"bytes", "sha256"}}}
    for every file under `folder`. Called last, once everything else is written."""
    folder = Path(folder)
    files = {
        path.relative_to(folder).as_posix(): {
            "bytes": path.stat().st_size,
            "sha256": _sha256(path),
        }
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != MANIFEST
    }
    text = json.dumps({"step": step, "files": files}, indent=1)
    (folder / MANIFEST).write_text(text + "\n", encoding="utf-8")


def checkpoint_problem(checkpoint: Path) -> str | None:
    """Why `checkpoint` cannot be resumed from (one line), or None when it is intact: its
    manifest.json is readable, names its step, lists trainer_state.pt, and every file it lists
    exists with the recorded size and SHA-256."""
    checkpoint = Path(checkpoint)
    try:
        manifest = json.loads((checkpoint / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        step = manifest["step"]
    except FileNotFoundError:
        return f"no {MANIFEST} (damaged, or written before checkpoints had manifests)"
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"{MANIFEST} is unreadable ({type(error).__name__}: {error})"
    if not isinstance(files, dict) or step != checkpoint_step(checkpoint):
        return f"{MANIFEST} does not describe {checkpoint.name}"
    entries = files.values()
    if not all(isinstance(e, dict) and {"bytes", "sha256"} <= e.keys() for e in entries):
        return f"{MANIFEST} has entries without bytes and sha256"
    if "trainer_state.pt" not in files:
        return f"{MANIFEST} lists no trainer_state.pt"
    for name, expected in files.items():
        path = checkpoint / name
        if not path.is_file():
            return f"{name} is missing"
        size = path.stat().st_size
        if size != expected["bytes"]:
            return f"{name} has {size} bytes, the manifest says {expected['bytes']}"
        if _sha256(path) != expected["sha256"]:
            return f"{name} does not match its SHA-256 in {MANIFEST}"
    return None


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumed run starts: the newest intact checkpoint (None: from scratch, step 0)
    and the newer checkpoints passed over, each with the reason."""

    checkpoint: Path | None
    skipped: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def step(self) -> int:
        return 0 if self.checkpoint is None else checkpoint_step(self.checkpoint)


def find_resume_point(run_dir: Path) -> ResumePoint:
    """The newest intact checkpoint of `run_dir`, checking newest first (reads and hashes the
    files of each checkpoint it checks), and the damaged ones it skipped on the way."""
    skipped = []
    for checkpoint in reversed(list_checkpoints(run_dir)):
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            return ResumePoint(checkpoint, skipped)
        skipped.append((checkpoint, problem))
    return ResumePoint(None, skipped)


def set_aside(checkpoint: Path) -> Path:
    """Renames a damaged checkpoint step-N to step-N.damaged (step-N.damaged-2, ... if taken):
    kept for inspection, out of the way of resume and pruning. Returns the new path."""
    checkpoint = Path(checkpoint)
    target = checkpoint.with_name(f"{checkpoint.name}.damaged")
    number = 1
    while target.exists():
        number += 1
        target = checkpoint.with_name(f"{checkpoint.name}.damaged-{number}")
    return checkpoint.rename(target)


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    # The state holds numpy RNG arrays and python tuples, not only tensors.
    return torch.load(Path(checkpoint) / "trainer_state.pt", weights_only=False)


def load_weights_into(model: torch.nn.Module, checkpoint: Path) -> None:
    """Restores the trainable weights saved by save_checkpoint into an already built model."""
    adapter = Path(checkpoint) / "adapter"
    if adapter.is_dir():
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(model, load_file(str(adapter / "adapter_model.safetensors")))
        return
    from safetensors.torch import load_file

    weights = Path(checkpoint) / "model"
    state = {}
    for shard in sorted(weights.glob("*.safetensors")):
        state.update(load_file(str(shard)))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [m for m in missing if "lm_head" not in m]:
        raise RuntimeError(
            f"{weights}: weights do not fit the model: {missing[:3]} {unexpected[:3]}"
        )
