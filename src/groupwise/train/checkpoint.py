"""Checkpoints of a training run: written atomically, found again on resume.

Layout: RUN/checkpoints/step-N/{adapter/ | model/, trainer_state.pt}. A checkpoint is written
under a temporary name and renamed when complete, so a crash mid-write (even SIGKILL) never
leaves a half checkpoint where resume would look.
"""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

_STEP_DIR = re.compile(r"^step-(\d+)$")


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
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        match = _STEP_DIR.match(path.name)
        if match and (path / "trainer_state.pt").is_file():
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]


def latest_checkpoint(run_dir: Path) -> Path | None:
    checkpoints = list_checkpoints(run_dir)
    return checkpoints[-1] if checkpoints else None


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
