"""Load a policy model and its tokenizer; attach, load and merge LoRA adapters.

`load_model(name)` accepts a shipped alias (see `model_aliases()`), a local folder (a saved
model, a run's merged model, or a checkpoint's LoRA adapter folder) or a hub id. Every tokenizer
it returns pads on the left, which is what batched generation needs (the prompt's last token
sits in the last column for every row), and has a pad token (the EOS token where the checkpoint
defines none).

Aliases (groupwise.shipped_models; its registry functions are re-exported here): the shipped
``smollm2-135m-instruct`` (SmolLM2's GGUF converted once into `cache_dir()`), ``tiny-random``
and ``arith-base``; `register_model_alias(name, loader)` adds one.

LoRA (docs/algorithms.md §2, paper defaults r = alpha = 16 on all linear layers): full
fine-tuning is training the plain model; `attach_lora` wraps it in a peft model, and
`reference_policy` turns the adapter off to evaluate the frozen starting policy without a
second copy of the weights.

Evaluation and analysis load a trained policy with `load_policy(model, adapter)`: the adapter may
be given as a training run, a checkpoint or an adapter folder (`resolve_adapter`).

Two notices of the libraries loading goes through are dropped, each by its logger (or warning
module) and its message, every other line of theirs kept (`quiet_harmless_notices`):
transformers' "Ignoring clean_up_tokenization_spaces=True for BPE tokenizer" (groupwise decodes
without the clean-up on purpose) and peft's "Unable to fetch remote file" (its hub lookup of an
adapter's base model, made even for a local alias, failing offline).
"""

from __future__ import annotations

import copy
import inspect
import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from peft import LoraConfig, PeftModel, get_peft_model
from peft.utils import load_peft_weights, set_peft_model_state_dict
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from groupwise.folders import cache_dir, write_folder
from groupwise.hub import hub_unreachable, names_a_path
from groupwise.records import read_json
from groupwise.shipped_models import (
    ARITH_BASE_DIR,
    alias_loader,
    load_saved_llama,
    model_aliases,
    register_model_alias,
)

__all__ = [
    "ARITH_BASE_DIR",
    "DTYPES",
    "LoraSettings",
    "attach_lora",
    "cache_dir",
    "cache_kwarg",
    "check_model_name",
    "default_device",
    "frozen_copy",
    "load_adapter",
    "load_model",
    "load_policy",
    "load_saved_llama",
    "model_aliases",
    "quiet_harmless_notices",
    "reference_policy",
    "register_model_alias",
    "resolve_adapter",
    "resolve_device",
    "save_merged",
]

DTYPES: dict[str, torch.dtype | None] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "auto": None,  # the checkpoint's own dtype
}

_ADAPTER_CONFIG = "adapter_config.json"

# transformers (5.10 to 5.25: tokenization_utils_tokenizers.py) logs this once per tokenizer class
# when a BPE tokenizer asked for the clean-up of spaces decodes: it then skips the clean-up,
# which is what groupwise wants (`_prepare_tokenizer`), so the line says nothing to act on.
TOKENIZER_LOGGER = "transformers.tokenization_utils_tokenizers"
BPE_CLEAN_UP_NOTICE = "Ignoring clean_up_tokenization_spaces=True for BPE tokenizer"
# peft (utils/other.py, check_file_exists_on_hf_hub) warns this when saving an adapter looks its
# base model's config.json up on the hub and the lookup fails: offline, or for a base named by a
# groupwise alias ("arith-base"), which is no hub repository. peft then assumes the vocabulary
# was not resized (true: groupwise never resizes it) and says so in a warning of its own, kept.
PEFT_WARNING_MODULE = "peft.utils.other"
PEFT_LOOKUP_NOTICE = "Unable to fetch remote file due to the following error"


class _DropNotice(logging.Filter):
    """Drops a logger's records whose message starts with `prefix`; passes every other one."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


def quiet_harmless_notices() -> None:
    """Drop transformers' BPE clean-up notice (a filter on its logger TOKENIZER_LOGGER) and
    peft's failed hub lookup (a warnings filter on its module PEFT_WARNING_MODULE and message);
    every other record of that logger and warning of that module still shows. Idempotent;
    called when this module loads and again by the functions that load or wrap models (a
    `warnings.catch_warnings` block ended since may have dropped the warnings filter)."""
    logger = logging.getLogger(TOKENIZER_LOGGER)
    if not any(isinstance(f, _DropNotice) for f in logger.filters):
        logger.addFilter(_DropNotice(BPE_CLEAN_UP_NOTICE))
    # An identical filter is replaced, not added again (warnings._add_filter).
    warnings.filterwarnings(
        "ignore", message=PEFT_LOOKUP_NOTICE, category=UserWarning, module=PEFT_WARNING_MODULE
    )


quiet_harmless_notices()


# ---------------------------------------------------------------------------------------------
# load_model


def _resolve_dtype(dtype: str) -> torch.dtype | None:
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; valid choices: {', '.join(DTYPES)}")
    return DTYPES[dtype]


def _prepare_tokenizer(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    # Left padding: in a batch of prompts, each row's next token is predicted from the last column.
    tokenizer.padding_side = "left"
    # Decoded text is what gets graded, so it is the tokens' own text under every transformers:
    # the clean-up strips spaces before punctuation, which transformers >= 5.25 skips for BPE
    # tokenizers (with a warning) and earlier versions apply, and a converted tokenizer's config
    # may ask for it (SmolLM2's, written by transformers < 5.25).
    tokenizer.clean_up_tokenization_spaces = False
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise ValueError("tokenizer has neither a pad token nor an EOS token to pad with")
        # Padding positions are masked everywhere, so reusing EOS as the pad token is harmless.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _load_folder(
    folder: Path, *, dtype: torch.dtype | None, seed: int
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    adapter_config = folder / _ADAPTER_CONFIG
    if not adapter_config.is_file():
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype or "auto")
        return model, AutoTokenizer.from_pretrained(folder)
    base_name = read_json(adapter_config).get("base_model_name_or_path")
    if not base_name:
        raise ValueError(
            f"{adapter_config}: field 'base_model_name_or_path' is empty, so the base model of "
            "this adapter is unknown; load the base with load_model() and call load_adapter()"
        )
    base, tokenizer = _load_any(str(base_name), dtype=dtype, seed=seed)
    if any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        tokenizer = AutoTokenizer.from_pretrained(folder)
    return PeftModel.from_pretrained(base, folder), tokenizer


def check_model_name(name: str) -> None:
    """Raise ValueError unless `name` is an alias, an existing folder or a well-formed hub id
    (whether the hub holds it shows only when it loads). A name that reads as a local path
    (`groupwise.hub.names_a_path`) but names no folder is refused at once, without the hub."""
    if alias_loader(name) is not None or Path(name).expanduser().is_dir():
        return
    if names_a_path(name):
        raise ValueError(
            f"unknown model {name!r}: no such folder (a hub id reads 'org/name'; aliases: "
            f"{', '.join(model_aliases())})"
        )
    try:
        validate_repo_id(name)
    except HFValidationError:
        raise ValueError(
            f"unknown model {name!r}: not an alias ({', '.join(model_aliases())}), not an "
            "existing folder, and not a valid hub id ('org/name')"
        ) from None


def _load_any(
    name: str, *, dtype: torch.dtype | None, seed: int
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    loader = alias_loader(name)
    if loader is not None:
        model, tokenizer = loader(dtype=dtype, seed=seed)
        # Adapters saved from this model then record the alias as their base, so a checkpoint
        # folder reloads through load_model().
        model.name_or_path = name
        return model, tokenizer
    path = Path(name).expanduser()
    if path.is_dir():
        return _load_folder(path, dtype=dtype, seed=seed)
    check_model_name(name)
    _check_hub_model(name)
    try:
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype or "auto")
        tokenizer = AutoTokenizer.from_pretrained(name)
    except OSError as error:
        raise ValueError(
            f"could not load model {name!r} as a hub id ({error}); known aliases: "
            f"{', '.join(model_aliases())}; a local folder must exist"
        ) from error
    return model, tokenizer


def _check_hub_model(name: str) -> None:
    """Raise ValueError at once when hub id `name` is not in the local hub cache and the hub
    cannot be reached (groupwise.hub), instead of after a minute of retries."""
    from huggingface_hub import try_to_load_from_cache

    # Asked even for a cached model: when the hub is out of reach, the process goes offline,
    # so the cached files load without a retry for each file.
    reason = hub_unreachable()
    if reason is not None and not isinstance(try_to_load_from_cache(name, "config.json"), str):
        raise ValueError(
            f"unknown model {name!r}: not in the hub cache, and the hub cannot be asked "
            f"({reason}); known aliases: {', '.join(model_aliases())}; a local folder must exist"
        )


def load_model(
    name: str, *, dtype: str = "float32", device: str = "cpu", seed: int = 0
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load (model, tokenizer) by alias, folder or hub id.

    name: an alias (`model_aliases()`), a folder (a saved model, or a LoRA adapter folder whose
        adapter_config.json names its base, which is loaded the same way with the same dtype and
        seed, then the adapter on top), or a hub id.
    dtype: "float32" | "bfloat16" | "float16" | "auto" (the checkpoint's own).
    device: a torch device string ("cpu", "cuda", "cuda:1", ...).
    seed: only for randomly initialised aliases (tiny-random). The global RNG is left as it was.

    The model is returned in eval mode; the tokenizer pads on the left and has a pad token.
    """
    torch_dtype = _resolve_dtype(dtype)
    quiet_harmless_notices()
    # Loading never moves the caller's RNG: random initialisation (tiny-random, or the one-off
    # GGUF conversion) would otherwise make a seeded run differ between first and later loads.
    with torch.random.fork_rng(devices=[]):
        model, tokenizer = _load_any(name, dtype=torch_dtype, seed=seed)
    if torch_dtype is not None:
        model.to(torch_dtype)
    model.to(torch.device(device))
    model.eval()
    return model, _prepare_tokenizer(tokenizer)


# ---------------------------------------------------------------------------------------------
# LoRA


@dataclass(frozen=True)
class LoraSettings:
    """LoRA hyper-parameters (AMIR-GRPO paper: r = 16, alpha = 16 on all linear layers;
    docs/algorithms.md §2).

    r: rank of the update; alpha: scale numerator (the update is scaled by alpha / r);
    dropout: dropout on the adapter's input; target_modules: "all-linear" (every linear layer
    except the output head) or a list of module names.
    """

    r: int = 16
    alpha: float = 16
    dropout: float = 0.0
    target_modules: str | tuple[str, ...] = "all-linear"

    def __post_init__(self) -> None:
        if not isinstance(self.r, int) or self.r < 1:
            raise ValueError(f"LoraSettings.r must be a positive integer, got {self.r!r}")
        if not self.alpha > 0:
            raise ValueError(f"LoraSettings.alpha must be > 0, got {self.alpha!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoraSettings.dropout must be in [0, 1), got {self.dropout!r}")
        if isinstance(self.target_modules, list):
            object.__setattr__(self, "target_modules", tuple(self.target_modules))
        if not self.target_modules:
            raise ValueError("LoraSettings.target_modules must be 'all-linear' or module names")


def attach_lora(model: PreTrainedModel, settings: LoraSettings | None = None) -> PeftModel:
    """Wrap `model` with fresh LoRA adapters (B = 0, so outputs are unchanged at first); only the
    adapter weights are trainable. The wrapped model shares the base weights, no copy."""
    settings = settings or LoraSettings()
    quiet_harmless_notices()  # before peft saves this adapter: its lookup of the base model
    target = settings.target_modules
    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=target if isinstance(target, str) else list(target),
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


@contextmanager
def reference_policy(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Context in which `model` computes the reference policy (the frozen starting model,
    docs/algorithms.md §2): a peft model with its adapters disabled, so no second copy of the
    weights is needed. Full fine-tuning has no such switch: keep `frozen_copy(model)` instead."""
    if not isinstance(model, PeftModel):
        raise TypeError(
            f"reference_policy() needs a LoRA (peft) model to switch its adapter off; got "
            f"{type(model).__name__}. With full fine-tuning the starting weights are gone once "
            "training updates them: keep ref = frozen_copy(model) before training and use it."
        )
    with model.disable_adapter():
        yield model


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of `model` in eval mode with gradients off: the reference policy for full
    fine-tuning (costs one more copy of the weights)."""
    reference = copy.deepcopy(model)
    reference.eval()
    reference.requires_grad_(False)
    return reference


def load_adapter(model: PreTrainedModel | PeftModel, path: str | os.PathLike) -> PeftModel:
    """Load the LoRA adapter saved in folder `path` (peft's save_pretrained format).

    A peft model gets the weights of its active adapter replaced in place (the saved adapter
    must have the same shapes and target modules) and is returned; a plain model is wrapped
    in a new trainable peft model with that adapter.
    """
    folder = Path(path)
    if not (folder / _ADAPTER_CONFIG).is_file():
        raise FileNotFoundError(f"{folder}: no {_ADAPTER_CONFIG}, not a LoRA adapter folder")
    quiet_harmless_notices()
    if not isinstance(model, PeftModel):
        return PeftModel.from_pretrained(model, folder, is_trainable=True)
    weights = load_peft_weights(str(folder), device=str(next(model.parameters()).device))
    adapter = model.active_adapter
    result = set_peft_model_state_dict(model, weights, adapter_name=adapter)
    missing = [key for key in result.missing_keys if "lora_" in key]
    if result.unexpected_keys or missing:
        raise ValueError(
            f"{folder}: adapter does not match the model's adapter {adapter!r}; "
            f"unexpected keys {result.unexpected_keys[:3]}, missing keys {missing[:3]}"
        )
    return model


def save_merged(
    model: PreTrainedModel | PeftModel,
    tokenizer: PreTrainedTokenizerBase,
    path: str | os.PathLike,
    *,
    overwrite: bool = False,
) -> Path:
    """Save a stand-alone model (LoRA merged into the weights) + tokenizer that plain
    `AutoModelForCausalLM.from_pretrained(path)` loads. The merge happens on a copy, so `model`
    keeps its adapter and training can go on. Written to a temporary sibling, then renamed."""
    target = Path(path)
    if target.exists() and not overwrite and not (target.is_dir() and not any(target.iterdir())):
        raise FileExistsError(f"{target} exists and is not empty; pass overwrite=True")
    merged = copy.deepcopy(model).merge_and_unload() if isinstance(model, PeftModel) else model

    def write(folder: Path) -> None:
        merged.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    return write_folder(target, write, replace=True)


# ---------------------------------------------------------------------------------------------
# A trained policy for evaluation and analysis


def hide_loading_bars() -> None:
    """No progress bars while models load (a command's --quiet): transformers' weight loading
    and huggingface_hub's downloads."""
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as transformers_logging

    disable_progress_bars()
    transformers_logging.disable_progress_bar()


def default_device() -> str:
    """ "cuda" when a GPU is visible, else "cpu"."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device(device: str | None) -> str:
    """`device` checked against what this machine has ("cpu", "cuda", "cuda:N", "mps"); None
    gives `default_device()`. A ValueError names the valid choices."""
    if device is None:
        return default_device()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    valid = f"must be cpu, cuda or cuda:N ({gpus} GPU(s) visible), got {device!r}"
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(valid) from None
    if parsed.type == "cuda" and (parsed.index or 0) >= gpus:
        raise ValueError(valid)
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(valid + "; mps is not available here")
    if parsed.type not in ("cpu", "cuda", "mps"):
        raise ValueError(valid)
    return device


def resolve_adapter(path: str | os.PathLike) -> Path:
    """The LoRA adapter folder meant by `path`: an adapter folder itself, a checkpoint folder
    (its adapter/), or a run folder (RUN/final/adapter, else the latest
    RUN/checkpoints/step-N/adapter)."""
    path = Path(path)
    if (path / _ADAPTER_CONFIG).is_file():
        return path
    if (path / "adapter" / _ADAPTER_CONFIG).is_file():
        return path / "adapter"
    if (path / "final" / "adapter" / _ADAPTER_CONFIG).is_file():
        return path / "final" / "adapter"
    steps = sorted(
        (int(p.name.split("-", 1)[1]), p)
        for p in path.glob("checkpoints/step-*")
        if p.name.split("-", 1)[1].isdigit() and (p / "adapter").is_dir()
    )
    if steps:
        return steps[-1][1] / "adapter"
    full = [p for p in (path / "model", path / "final" / "model") if p.is_dir()]
    hint = f"; {full[0]} holds full weights: pass it as --model instead" if full else ""
    raise FileNotFoundError(
        f"no LoRA adapter at {path} (looked for {_ADAPTER_CONFIG} in it, in adapter/, "
        "final/adapter/ and checkpoints/step-N/adapter/)" + hint
    )


def load_policy(
    model: str,
    adapter: str | os.PathLike | None = None,
    *,
    dtype: str = "float32",
    device: str = "cpu",
    seed: int = 0,
) -> tuple[PreTrainedModel | PeftModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) in eval mode: `model` by `load_model`, then the adapter (a run,
    checkpoint or adapter folder; see `resolve_adapter`) on top."""
    policy, tokenizer = load_model(model, dtype=dtype, device=device, seed=seed)
    if adapter is not None:
        policy = load_adapter(policy, resolve_adapter(adapter))
    policy.eval()
    return policy, tokenizer


def cache_kwarg(model: torch.nn.Module) -> str:
    """Name of the forward argument that takes the KV cache: `cache` in recent transformers,
    `past_key_values` before (looked up on the base model under a peft wrapper)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    parameters = inspect.signature(base.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"
