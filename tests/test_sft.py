"""The testbed's base policy: tokenizer, loss mask, training, saving and the cache."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from groupwise import sft
from groupwise.config import ConfigError
from groupwise.data.synthetic import LEVELS, generate_problems
from groupwise.models import load_saved_llama
from groupwise.sft import (
    IGNORE_INDEX,
    SFTSettings,
    build_model,
    build_tokenizer,
    cache_root,
    fit_base_policy,
    load_base_policy,
    sft_batch,
    train_base_policy,
)

# A model and schedule small enough to train in about a second.
TINY = SFTSettings(
    levels=("easy",),
    examples=16,
    steps=40,
    lr=1e-2,
    warmup_steps=2,
    batch_size=8,
    hidden_size=32,
    num_layers=1,
    num_heads=2,
    intermediate_size=64,
)


@pytest.fixture(scope="module")
def trained() -> tuple[torch.nn.Module, object, float]:
    """The TINY policy trained in memory once for the module."""
    return fit_base_policy(TINY)


def logits_of(model: torch.nn.Module, tokenizer, texts: list[str]) -> torch.Tensor:
    encoded = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**encoded).logits


def test_tokenizer_round_trips_task_texts_and_any_text() -> None:
    tokenizer = build_tokenizer()
    texts = ["Grüße, 3×4 = 12 — \\boxed{12}\t\n  ", ""]
    for level in LEVELS:
        for problem in generate_problems("test", level=level, size=50, seed=0):
            texts += [problem.question, sft.COMPLETION_PREFIX + problem.meta["solution"]]
    for text in texts:
        ids = tokenizer(text)["input_ids"]
        assert len(ids) == len(text.encode("utf-8"))  # one token per byte, no special token
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == ids
        assert tokenizer.decode(ids) == text
    # id 3 + byte value, specials first
    assert tokenizer("a1\n")["input_ids"] == [3 + 97, 3 + 49, 3 + 10]
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    assert tokenizer.decode([1, 3 + 97, 2, 0], skip_special_tokens=True) == "a"
    assert tokenizer.padding_side == "left"
    assert not tokenizer.chat_template


def test_sft_batch_masks_everything_but_the_completion() -> None:
    tokenizer = build_tokenizer()
    batch = sft_batch(tokenizer, ["ab", "abcd"], ["c", "ef"])
    a, b, c, d, e, f = (3 + ord(ch) for ch in "abcdef")
    eos, pad, ignore = 2, 0, IGNORE_INDEX
    assert batch["input_ids"].tolist() == [
        [a, b, c, eos, pad, pad, pad],
        [a, b, c, d, e, f, eos],
    ]
    assert batch["labels"].tolist() == [
        [ignore, ignore, c, eos, ignore, ignore, ignore],
        [ignore, ignore, ignore, ignore, e, f, eos],
    ]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 0, 0, 0], [1] * 7]
    with pytest.raises(ValueError, match="2 prompts but 1 completions"):
        sft_batch(tokenizer, ["a", "b"], ["c"])


def test_model_loss_is_the_mean_over_completion_tokens_only() -> None:
    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    model = build_model(TINY, tokenizer)
    batch = sft_batch(tokenizer, ["ab", "abcd"], ["c", "ef"])
    log_probs = F.log_softmax(model(**batch).logits.float(), dim=-1)
    ids = batch["input_ids"]
    # Token t is predicted at position t-1: row 0 scores c (pos 1) and eos (pos 2);
    # row 1 scores e (pos 3), f (pos 4), eos (pos 5): 5 completion tokens in all.
    picked = [
        log_probs[0, 1, ids[0, 2]],
        log_probs[0, 2, ids[0, 3]],
        log_probs[1, 3, ids[1, 4]],
        log_probs[1, 4, ids[1, 5]],
        log_probs[1, 5, ids[1, 6]],
    ]
    expected = -torch.stack(picked).mean()
    torch.testing.assert_close(model(**batch).loss, expected)


def test_training_decreases_the_loss(trained) -> None:
    model, tokenizer, running = trained
    pairs = sft.training_pairs(TINY)
    assert len(pairs) == TINY.examples
    batch = sft_batch(tokenizer, [p for p, _ in pairs], [c for _, c in pairs])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY.seed)
        initial = build_model(TINY, tokenizer)  # the same initial weights training starts from
    with torch.no_grad():
        before = initial(**batch).loss.item()
        after = model(**batch).loss.item()
    # Uniform guessing over 259 tokens costs ln(259) = 5.56 nats; the digits and layout of 16
    # memorisable examples must come out far lower after 40 steps.
    assert before > 5.0
    assert after < 0.6 * before
    assert running < 0.7 * before
    assert not model.training


def test_training_is_deterministic_saved_and_loaded_exactly(trained, tmp_path: Path) -> None:
    model, tokenizer, _ = trained
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    path = train_base_policy(TINY, tmp_path / "policy")
    assert torch.equal(torch.random.get_rng_state(), state)  # caller's RNG left alone
    assert (path / "config.json").is_file() and (path / sft.SETTINGS_FILE).is_file()
    loaded, loaded_tokenizer = load_saved_llama(path)
    texts = ["Start with 12, add 30. What is the result?", "Start with 9"]
    assert (
        loaded_tokenizer(texts, padding=True)["input_ids"]
        == (tokenizer(texts, padding=True)["input_ids"])
    )
    assert loaded_tokenizer.padding_side == "left" and not loaded_tokenizer.chat_template
    torch.testing.assert_close(
        logits_of(loaded, loaded_tokenizer, texts),
        logits_of(model, tokenizer, texts),
        rtol=0,
        atol=0,
    )


def test_cache_is_reused_and_written_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROUPWISE_CACHE", str(tmp_path))
    calls = []

    def counting_train(settings: SFTSettings, output_dir: Path) -> Path:
        calls.append(Path(output_dir))
        return train_base_policy(settings, output_dir)

    monkeypatch.setattr(sft, "train_base_policy", counting_train)
    model, tokenizer = load_base_policy(settings=TINY)
    final = tmp_path / "models" / f"arith-base-{TINY.fingerprint()}"
    assert len(calls) == 1
    assert calls[0].parent == final.parent and calls[0] != final  # trained under a temp name
    assert sorted(p.name for p in final.parent.iterdir()) == [final.name]  # temp renamed away
    again, _ = load_base_policy(settings=TINY)
    assert len(calls) == 1
    texts = ["Start with 40, subtract 17. What is the result?"]
    torch.testing.assert_close(
        logits_of(again, tokenizer, texts), logits_of(model, tokenizer, texts)
    )
    # An override is another policy in another folder.
    load_base_policy(settings=TINY, steps=2)
    assert len(calls) == 2
    assert len(list(final.parent.iterdir())) == 2


def test_training_pairs_split_examples_over_levels() -> None:
    # 10 examples over 3 named levels: shares 4, 3, 3; easy is named twice, so 4 + 3 = 7.
    pairs = sft.training_pairs(SFTSettings(levels=("easy", "mid", "easy"), examples=10))
    assert len(set(pairs)) == 10
    steps_per_question = [prompt.count(",") for prompt, _ in pairs]
    assert steps_per_question == [3] * 7 + [5] * 3  # easy has 3 operations, mid 5
    for prompt, completion in pairs:
        problem_answer = completion.rsplit("#### ", 1)[1]
        assert completion.startswith(sft.COMPLETION_PREFIX)
        assert prompt.endswith("What is the result?") and problem_answer.isdigit()


def test_cache_root_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GROUPWISE_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "groupwise"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "groupwise"
    monkeypatch.setenv("GROUPWISE_CACHE", str(tmp_path / "gw"))
    assert cache_root() == tmp_path / "gw"


def test_settings_fingerprint_and_validation() -> None:
    assert SFTSettings().fingerprint() == SFTSettings().fingerprint()
    assert SFTSettings(levels=["easy"]).fingerprint() == SFTSettings(levels=("easy",)).fingerprint()
    assert SFTSettings().fingerprint() != SFTSettings(steps=SFTSettings().steps + 1).fingerprint()
    assert SFTSettings.quick().fingerprint() != SFTSettings().fingerprint()
    assert re.fullmatch(r"[0-9a-f]{12}", SFTSettings().fingerprint())
    unknown = r"unknown key 'step' \(did you mean 'steps'\?\); valid keys here: levels, "
    with pytest.raises(ConfigError, match=unknown):
        SFTSettings().with_overrides(step=3)
    with pytest.raises(ConfigError, match="steps: expected an integer"):
        SFTSettings().with_overrides(steps="many")
    valid = re.escape("valid levels: ['easy', 'hard', 'long', 'mid']")
    with pytest.raises(ValueError, match=valid):
        SFTSettings(levels=("easy", "expert"))
    with pytest.raises(ValueError, match="divisible by num_heads"):
        SFTSettings(hidden_size=30, num_heads=4)
    with pytest.raises(ValueError, match="steps must be an integer >= 1"):
        SFTSettings(steps=0)


def test_left_padded_batch_generates_like_single_prompts(trained) -> None:
    model, tokenizer, _ = trained
    prompts = ["Start with 5", "Start with 12, add 30. What is the result?"]
    encoded = tokenizer(prompts, return_tensors="pt", padding=True)
    assert encoded["input_ids"][0, 0].item() == tokenizer.pad_token_id  # left padding
    batch = model.generate(**encoded, do_sample=False, max_new_tokens=12)
    width = encoded["input_ids"].shape[1]
    for i, prompt in enumerate(prompts):
        alone = tokenizer([prompt], return_tensors="pt")
        single = model.generate(**alone, do_sample=False, max_new_tokens=12)
        tokens = [t for t in single[0, alone["input_ids"].shape[1] :].tolist()]
        assert batch[i, width : width + len(tokens)].tolist() == tokens


def test_shipped_policy_loads_and_scores_as_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    from groupwise.models import load_model

    def no_training(settings: SFTSettings) -> None:
        raise AssertionError("the default base policy is shipped, never trained")

    monkeypatch.setattr(sft, "fit_base_policy", no_training)
    model, tokenizer = load_model("arith-base")
    assert sum(p.numel() for p in model.parameters()) == 886_272
    folder = sft.shipped_base_policy()
    record = json.loads((folder / sft.SETTINGS_FILE).read_text())
    assert SFTSettings(**record["settings"]) == SFTSettings()
    assert record["format_version"] == sft.FORMAT_VERSION
    # the file is the one its README describes, and it scores as recorded
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    assert f"sha256 {digest}" in (folder / "README.md").read_text()
    recorded = json.loads((folder / sft.SCORES_FILE).read_text())
    scores = sft.base_policy_scores(model, tokenizer)
    assert set(scores["greedy_accuracy"]) == set(LEVELS)
    for level in LEVELS:
        # greedy decoding may flip a near-tie on another CPU: one problem in 100
        assert abs(scores["greedy_accuracy"][level] - recorded["greedy_accuracy"][level]) <= 0.01
        assert scores["solution_nll"][level] == pytest.approx(
            recorded["solution_nll"][level], rel=1e-4
        )


def test_the_command_trains_saves_and_scores(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    scored = []

    def few_problems(model, tokenizer, problems: int = sft.SCORED_PROBLEMS):
        scored.append(problems)
        return base_policy_scores(model, tokenizer, problems=5)

    base_policy_scores = sft.base_policy_scores
    monkeypatch.setattr(sft, "base_policy_scores", few_problems)
    overrides = [f"{name}={json.dumps(value)}" for name, value in dataclasses.asdict(TINY).items()]
    assert sft.main(["--output", str(tmp_path / "policy"), *overrides]) == 0
    folder = tmp_path / "policy"
    record = json.loads((folder / sft.SETTINGS_FILE).read_text())
    assert SFTSettings(**record["settings"]) == TINY
    scores = json.loads((folder / sft.SCORES_FILE).read_text())
    assert set(scores) == {"greedy_accuracy", "solution_nll"}
    assert scored == [sft.SCORED_PROBLEMS]  # the shipped policy's scoring, on 5 problems here
    assert all(scores["greedy_accuracy"][level] in (0, 0.2, 0.4, 0.6, 0.8, 1) for level in LEVELS)
    assert str(folder) in capsys.readouterr().out
    assert sft.main(["--output", str(tmp_path / "other"), "step=3"]) == 2  # one line
    assert "unknown key 'step'" in capsys.readouterr().err
