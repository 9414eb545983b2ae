"""Offline stand-ins for the hub models and datasets of TRL's GRPO tests (trl_grpo_suite.py).

TRL's tests/test_grpo_trainer.py loads `trl-internal-testing/tiny-*` models and the
`trl-internal-testing/zen*` datasets from the Hugging Face hub, which this machine cannot reach.
`build(root, trl_checkout)` makes, under `root`:

- `hf/hub/models--trl-internal-testing--<name>/`: a Hugging Face cache entry per model (refs/main
  and one snapshot), so that with HF_HOME=root/hf and HF_HUB_OFFLINE=1 every `from_pretrained`
  (the tests' and TRL's own) finds it. Same architecture class and the same small sizes as TRL's
  scripts/generate_tiny_models (random weights, bfloat16 as theirs); the tokenizer is SmolLM2's
  (groupwise's `tiny-random` tokenizer, the one available offline) with the family's special tokens
  added and the family's chat template from TRL's own trl/chat_templates.
- `datasets/<name>/`: a local dataset folder (parquet per config and split, configs declared in
  README.md) made by running TRL's own scripts/generate_zen*_dataset.py from the checkout, with
  their push_to_hub writing here instead. The pytest plugin (trl_suite_plugin.py) redirects
  `load_dataset("trl-internal-testing/<name>", ...)` to it.

Models that only the tests skipped here use (GPU, vLLM, liger, the xfail'ed tool tests) and the
vision-language models are not built: their tests fail with the hub's offline error in every
mode and the report counts them apart.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import trl
import yaml
from datasets import DatasetDict
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    GenerationConfig,
    PreTrainedTokenizerBase,
)

from groupwise.models import load_model

ORGANIZATION = "trl-internal-testing"
SNAPSHOT = "0" * 40
"""The one revision of every stand-in (a hub cache needs a commit hash; this one is fake)."""
STAMP = "standins.json"
"""File under the root recording what was built, from which TRL checkout (else rebuilt)."""
VERSION = 1
"""Bump when the stand-ins change, so that an old root is rebuilt."""

TINY = {
    "hidden_size": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "intermediate_size": 32,
}
"""Sizes of TRL's tiny causal LMs (scripts/generate_tiny_models/for_causal_lm)."""
TINY_CLASSIFIER = {**TINY, "hidden_size": 16, "num_labels": 1}
"""Sizes of TRL's tiny reward models (for_sequence_classification)."""


@dataclass(frozen=True)
class Family:
    """A tokenizer family: the chat template file in trl/chat_templates and its special tokens."""

    template: str
    eos: str
    pad: str
    bos: str | None = None
    extra: tuple[str, ...] = ()


QWEN_TOOLS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
FAMILIES = {
    "qwen2_5": Family("qwen2_5.jinja", "<|im_end|>", "<|endoftext|>", extra=QWEN_TOOLS),
    "qwen3": Family(
        "qwen3.jinja", "<|im_end|>", "<|endoftext|>", extra=(*QWEN_TOOLS, "<think>", "</think>")
    ),
    "llama3_2": Family(
        "llama3_2.jinja",
        "<|eot_id|>",
        "<|finetune_right_pad_id|>",
        bos="<|begin_of_text|>",
        extra=("<|start_header_id|>", "<|end_header_id|>", "<|python_tag|>", "<|eom_id|>"),
    ),
    "gemma": Family(
        "gemma.jinja", "<eos>", "<pad>", bos="<bos>", extra=("<start_of_turn>", "<end_of_turn>")
    ),
    "cohere2": Family(
        "cohere2.jinja",
        "<|END_OF_TURN_TOKEN|>",
        "<PAD>",
        bos="<BOS_TOKEN>",
        extra=(
            "<|START_OF_TURN_TOKEN|>",
            "<|USER_TOKEN|>",
            "<|CHATBOT_TOKEN|>",
            "<|SYSTEM_TOKEN|>",
        ),
    ),
    "gptoss": Family(
        "gptoss.jinja",
        "<|return|>",
        "<|endoftext|>",
        bos="<|startoftext|>",
        extra=("<|start|>", "<|message|>", "<|end|>", "<|channel|>", "<|call|>", "<|constrain|>"),
    ),
    "glm4moe": Family(
        "glm4moe.jinja",
        "<|endoftext|>",
        "<|endoftext|>",
        extra=("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"),
    ),
    "nemotron": Family(
        "nemotron_3_nano.jinja", "<|im_end|>", "<unk>", bos="<s>", extra=("<think>", "</think>")
    ),
}


@dataclass(frozen=True)
class Model:
    """A stand-in: hub name (without the organisation), transformers model type, family, sizes."""

    name: str
    model_type: str
    family: str
    classifier: bool = False
    config: dict[str, Any] = field(default_factory=dict)


MODELS = (
    Model("tiny-Qwen2ForCausalLM-2.5", "qwen2", "qwen2_5"),
    Model("tiny-Qwen2ForSequenceClassification-2.5", "qwen2", "qwen2_5", classifier=True),
    Model("tiny-Qwen3ForCausalLM", "qwen3", "qwen3"),
    Model("tiny-Qwen3ForSequenceClassification", "qwen3", "qwen3", classifier=True),
    Model(
        "tiny-Qwen3MoeForCausalLM",
        "qwen3_moe",
        "qwen3",
        config={"num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": True},
    ),
    Model("tiny-LlamaForCausalLM-3.2", "llama", "llama3_2"),
    Model("tiny-LlamaForSequenceClassification-3.2", "llama", "llama3_2", classifier=True),
    Model("tiny-Gemma2ForCausalLM", "gemma2", "gemma"),
    Model(
        "tiny-Cohere2ForCausalLM",
        "cohere2",
        "cohere2",
        config={"logit_scale": 1.0, "layer_types": ["sliding_attention", "full_attention"]},
    ),
    Model(
        "tiny-GptOssForCausalLM",
        "gpt_oss",
        "gptoss",
        config={"num_local_experts": 4, "num_experts_per_tok": 2},
    ),
    Model(
        "tiny-Glm4MoeForCausalLM",
        "glm4_moe",
        "glm4moe",
        config={
            "moe_intermediate_size": 32,
            "head_dim": 2,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "attention_bias": True,
            "use_qk_norm": True,
        },
    ),
    Model(
        "tiny-NemotronHForCausalLM-nano",
        "nemotron_h",
        "nemotron",
        config={
            "hidden_size": 16,
            "layers_block_type": ["mamba", "attention", "moe"],
            "mamba_num_heads": 8,
            "mamba_head_dim": 4,
            "mamba_n_groups": 1,
            "ssm_state_size": 16,
            "mamba_d_conv": 4,
            "mamba_expand": 2,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "moe_shared_expert_intermediate_size": 32,
            "use_mamba_kernels": False,
        },
    ),
)
"""The text models of tests/test_grpo_trainer.py that run on a CPU (the `trust_remote_code` one,
tiny-RemoteForCausalLM, is built apart from TRL's own remote-code files)."""

DATASET_SCRIPTS = {
    "zen": "generate_zen_dataset.py",
    "zen-image": "generate_zen_image_dataset.py",
    "zen-multi-image": "generate_zen_multi_image_dataset.py",
}
"""Dataset name under trl-internal-testing -> TRL's script (in the checkout's scripts/) that
makes it."""


def _tokenizer(family: Family) -> PreTrainedTokenizerBase:
    """SmolLM2's tokenizer with the family's special tokens and chat template."""
    _, tokenizer = load_model("tiny-random")
    specials = [token for token in (family.bos, family.eos, family.pad) if token is not None]
    tokenizer.add_special_tokens({"additional_special_tokens": [*specials, *family.extra]})
    tokenizer.eos_token = family.eos
    tokenizer.pad_token = family.pad
    tokenizer.bos_token = family.bos
    tokenizer.padding_side = "right"  # as the hub tokenizers; TRL sets its own side
    templates = Path(trl.__file__).parent / "chat_templates"
    tokenizer.chat_template = (templates / family.template).read_text(encoding="utf-8")
    return tokenizer


def _save_model(spec: Model, folder: Path) -> None:
    family = FAMILIES[spec.family]
    tokenizer = _tokenizer(family)
    ids = {
        "vocab_size": len(tokenizer),
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
    }
    sizes = TINY_CLASSIFIER if spec.classifier else TINY
    config = AutoConfig.for_model(spec.model_type, **{**sizes, **ids, **spec.config})
    auto = AutoModelForSequenceClassification if spec.classifier else AutoModelForCausalLM
    torch.manual_seed(0)
    model = auto.from_config(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    GenerationConfig(
        bos_token_id=ids["bos_token_id"],
        eos_token_id=ids["eos_token_id"],
        pad_token_id=ids["pad_token_id"],
        do_sample=True,
    ).save_pretrained(folder)


def _save_remote_model(scripts: Path, folder: Path) -> None:
    """tiny-RemoteForCausalLM: a Llama behind TRL's own remote-code files (loaded with
    trust_remote_code), as scripts/generate_tiny_models/for_causal_lm/remote_for_causal_lm.py."""
    folder_of_package = scripts / "generate_tiny_models" / "for_causal_lm"
    sys.path.insert(0, str(folder_of_package))  # its two modules import each other relatively
    try:
        modules = {
            stem: importlib.import_module(f"_remote_code.{stem}")
            for stem in ("configuration_remote", "modeling_remote")
        }
    finally:
        sys.path.remove(str(folder_of_package))
    config_class = modules["configuration_remote"].RemoteConfig
    model_class = modules["modeling_remote"].RemoteForCausalLM
    config_class.register_for_auto_class()
    model_class.register_for_auto_class("AutoModelForCausalLM")
    tokenizer = _tokenizer(FAMILIES["llama3_2"])
    config = config_class(
        **TINY,
        vocab_size=len(tokenizer),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    config.auto_map = {
        "AutoModel": "modeling_remote.RemoteModel",
        "AutoModelForSequenceClassification": "modeling_remote.RemoteForSequenceClassification",
    }
    torch.manual_seed(0)
    model_class(config).to(torch.bfloat16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _cache_entry(hub: Path, name: str) -> Path:
    """The snapshot folder of trl-internal-testing/<name> in a hub cache (refs/main written)."""
    repo = hub / f"models--{ORGANIZATION}--{name}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(SNAPSHOT)
    snapshot = repo / "snapshots" / SNAPSHOT
    snapshot.mkdir(parents=True, exist_ok=True)
    return snapshot


def _save_datasets(script: Path, folder: Path) -> None:
    """Run TRL's dataset script with push_to_hub writing parquet files under `folder`, then
    declare its configs in folder/README.md."""
    configs = []

    def push_to_hub(self: DatasetDict, repo_id: str, config_name: str, **_: Any) -> None:
        files = []
        for split, dataset in self.items():
            path = folder / config_name / f"{split}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            dataset.to_parquet(path)
            files.append({"split": split, "path": f"{config_name}/{split}.parquet"})
        configs.append({"config_name": config_name, "data_files": files})

    spec = importlib.util.spec_from_file_location(f"trl_script_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    original = DatasetDict.push_to_hub
    DatasetDict.push_to_hub = push_to_hub
    try:
        module.main(test_size=0.1, push_to_hub=True, repo_id=f"{ORGANIZATION}/{folder.name}")
    finally:
        DatasetDict.push_to_hub = original
    header = yaml.safe_dump({"configs": configs}, sort_keys=False)
    (folder / "README.md").write_text(f"---\n{header}---\n")


def build(root: Path, trl_checkout: Path) -> dict[str, Any]:
    """Build every stand-in under `root` from the TRL checkout (its scripts/ folder), unless a
    complete build of the same VERSION and checkout is there. Returns the stamp (what was built)."""
    stamp_path = root / STAMP
    want = {"version": VERSION, "trl_checkout": str(trl_checkout.resolve())}
    if stamp_path.is_file():
        stamp = json.loads(stamp_path.read_text())
        if {key: stamp.get(key) for key in want} == want:
            return stamp
    scripts = trl_checkout / "scripts"
    if not (scripts / DATASET_SCRIPTS["zen"]).is_file():
        raise SystemExit(
            f"{scripts / DATASET_SCRIPTS['zen']}: not found; the TRL checkout needs its scripts/ "
            "folder beside tests/ (git archive <commit> tests scripts)"
        )
    hub = root / "hf" / "hub"
    models = []
    for spec in MODELS:
        print(f"stand-in model {ORGANIZATION}/{spec.name}", flush=True)
        _save_model(spec, _cache_entry(hub, spec.name))
        models.append(spec.name)
    print(f"stand-in model {ORGANIZATION}/tiny-RemoteForCausalLM", flush=True)
    _save_remote_model(scripts, _cache_entry(hub, "tiny-RemoteForCausalLM"))
    models.append("tiny-RemoteForCausalLM")
    datasets = []
    for name, script in DATASET_SCRIPTS.items():
        print(f"stand-in dataset {ORGANIZATION}/{name}", flush=True)
        _save_datasets(scripts / script, root / "datasets" / name)
        datasets.append(name)
    stamp = {**want, "models": models, "datasets": datasets}
    stamp_path.write_text(json.dumps(stamp, indent=1))
    return stamp


def dataset_folder(root: Path, repo_id: str) -> Path | None:
    """The local folder standing in for hub dataset `repo_id`, or None if there is none."""
    match = re.fullmatch(rf"{ORGANIZATION}/([\w.-]+)", repo_id)
    if match is None:
        return None
    folder = root / "datasets" / match.group(1)
    return folder if (folder / "README.md").is_file() else None
