"""Checkpoints of a training run: written atomically, verified on resume.

Layout: RUN/checkpoints/step-N/{adapter/ | model/, trainer_state.pt, manifest.json}. A
checkpoint is written under a temporary name and renamed when complete, so a crash mid-write
(even SIGKILL) never leaves a half checkpoint where resume would look. manifest.json, written
last, holds the size and SHA-256 of every other file: resume takes the newest checkpoint whose
files all match it (`find_resume_point`), so a checkpoint damaged afterwards (a truncated or
deleted file, a full disk) is skipped with the reason instead of failing with a traceback.

Loading a checkpoint never runs code from it (docs/design.md, "Choices already made"): the
manifest guards against damage, not against a file made to deceive, so trainer_state.pt is read
with torch's weights-only unpickler. It holds tensors, dicts, lists, tuples, numbers, strings
and None only (the RNG states included: `rng_state` stores numpy's as a tensor), so a new plain
field needs no change of format; anything else is refused (`CheckpointError`, naming the file).
"""

from __future__ import annotations

import hashlib
import json
import pickle
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
TRAINER_STATE = "trainer_state.pt"
_CHUNK = 1 << 20
# Checkpoints written before numpy's RNG state was stored as a tensor hold it as a numpy array:
# these globals rebuild an array from its shape, dtype and bytes, and call nothing else.
_NUMPY_CORE = getattr(np, "_core", None) or np.core
_OLDER_STATE_GLOBALS = [
    _NUMPY_CORE.multiarray._reconstruct,
    (_NUMPY_CORE.multiarray._reconstruct, "numpy.core.multiarray._reconstruct"),
    np.ndarray,
    np.dtype,
    type(np.dtype(np.uint32)),
]
_REFUSED_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


class CheckpointError(ValueError):
    """A checkpoint file that cannot be loaded (refused, unreadable, or not fitting the run);
    the message is one line naming the file."""


def rng_state() -> dict[str, Any]:
    """The global random states (python, numpy, torch CPU and CUDA), in types a weights-only
    load accepts: numpy's MT19937 state is (name, keys as an int64 tensor [624], pos, has_gauss,
    cached_gaussian)."""
    name, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached_gaussian),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restores what `rng_state` returned (or an older checkpoint's numpy state as an array)."""
    random.setstate(state["python"])
    name, keys, *rest = state["numpy"]
    if isinstance(keys, torch.Tensor):
        keys = keys.numpy()
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), *rest))
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
    torch.save(state, tmp / TRAINER_STATE)
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
    if TRAINER_STATE not in files:
        return f"{MANIFEST} lists no {TRAINER_STATE}"
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
    """CHECKPOINT/trainer_state.pt, read with torch's weights-only unpickler (module docstring):
    a file holding any other pickled object is refused before that object is built.

    Raises CheckpointError (one line naming the file) when it is refused, cannot be read (not a
    torch file, truncated), or is not a dict.
    """
    path = Path(checkpoint) / TRAINER_STATE
    try:
        with torch.serialization.safe_globals(_OLDER_STATE_GLOBALS):
            state = torch.load(path, weights_only=True)
    except pickle.UnpicklingError as error:
        refused = _REFUSED_GLOBAL.search(str(error))
        what = f"a pickled {refused.group(1)}" if refused else "a pickled object"
        raise CheckpointError(
            f"{path}: refused: it holds {what}, outside what a checkpoint may hold (tensors, "
            "numbers, strings, containers); loading it could run code, so nothing was loaded"
        ) from None
    # A damaged pickle can fail the unpickler in any of these ways (a flipped byte: KeyError)
    except (RuntimeError, OSError, EOFError, ValueError, KeyError, IndexError, TypeError) as error:
        raise _unreadable(path, error) from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: holds a {type(state).__name__}, not a trainer state")
    return state


def load_weights_into(model: torch.nn.Module, checkpoint: Path) -> None:
    """Restores the trainable weights saved by save_checkpoint into an already built model.
    Raises CheckpointError naming the file when a weights file cannot be read or does not fit."""
    adapter = Path(checkpoint) / "adapter"
    if adapter.is_dir():
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, _read_weights(adapter / "adapter_model.safetensors"))
        return
    weights = Path(checkpoint) / "model"
    state = {}
    for shard in sorted(weights.glob("*.safetensors")):
        state.update(_read_weights(shard))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [m for m in missing if "lm_head" not in m]:
        raise CheckpointError(
            f"{weights}: weights do not fit the model: {missing[:3]} {unexpected[:3]}"
        )


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of one safetensors file (a format that holds tensors only)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as error:
        raise _unreadable(path, error) from None


def _unreadable(path: Path, error: Exception) -> CheckpointError:
    """The one-line error for a checkpoint file that could not be read (the reason shortened)."""
    reason = " ".join(str(error).split())[:200]
    return CheckpointError(f"{path}: cannot be read ({type(error).__name__}: {reason})")
