"""The learning testbed's base policy: a tiny causal LM taught the "arith" task by supervised
fine-tuning (SFT), weak on purpose so that reinforcement learning has room to improve it.

The model is a ``LlamaForCausalLM`` with a tiny config over a byte-level tokenizer with no
merges (one token per byte, so every text round-trips exactly), wrapped as a transformers fast
tokenizer with ``<bos>``/``<eos>``/``<pad>``, left padding and no chat template: a prompt is the
question text alone and the completion follows it directly.

Training: next-token cross-entropy on the completion tokens only (``"\\n" + worked solution +
<eos>``; the question tokens are masked out), AdamW with linear warm-up and cosine
decay.

The policy of the default settings ships inside the package (``groupwise/weights/arith-base``:
safetensors, tokenizer, settings, scores, and a README with the command that made it,
``python -m groupwise.sft --output DIR``), so nothing trains it at run time. Other settings are
trained on first use into the user's cache (``GROUPWISE_CACHE``, else
``$XDG_CACHE_HOME/groupwise``, else ``~/.cache/groupwise``) under
``models/arith-base-<hash of the settings>``, written to a temporary folder and renamed, so later
runs and concurrent processes reuse one copy.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from tqdm.auto import tqdm
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from groupwise.config import apply_override, build
from groupwise.data.synthetic import LEVELS, generate_problems
from groupwise.entry import main_of
from groupwise.models import ARITH_BASE_DIR, load_saved_llama
from groupwise.options import Rule, check_options, option

# Changing what training does (data, loss, schedule, tokenizer) must change this, so that
# caches written by older code are not reused.
FORMAT_VERSION = 1
COMPLETION_PREFIX = "\n"
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")
IGNORE_INDEX = -100
SETTINGS_FILE = "sft_settings.json"
SCORES_FILE = "scores.json"
# The base policy of SFTSettings(), shipped inside the package (package data).
SHIPPED_DIR = ARITH_BASE_DIR
# base_policy_scores: test problems per level and the greedy completion's token budget.
SCORED_PROBLEMS = 100
SCORED_TOKENS = 96


@dataclass(frozen=True)
class SFTSettings:
    """Everything that determines the base policy; its hash names the cache folder.

    Measured (held-out "arith" test split, 500 problems x 4 samples, temperature 1, checked
    with ``groupwise.rewards.check_answers``):

    ========  =======  =====  ====  =====  =====  ====================================
    preset    params   steps  easy  mid    hard   training time
    ========  =======  =====  ====  =====  =====  ====================================
    default   0.89 M   600    70 %  22 %   7 %    ~6 CPU-minutes (one thread)
    quick()   0.12 M   400    38 %  (easy only)   ~35 CPU-seconds (one thread)
    ========  =======  =====  ====  =====  =====  ====================================

    The policy is weak on purpose (RL needs room); ``steps`` is the knob: accuracy climbs
    steeply between 500 and 700 steps (mid 13 % -> 40 %). The ``long`` level (mid with a sixth
    operation) is not in the default mix; the default policy solves 10 % of it (200 test
    problems x 16 samples, testbed/results/learning.md).
    """

    levels: tuple[str, ...] = option(
        ("easy", "mid", "hard"),
        """Levels of the "arith" train split, in equal shares; a level named twice gets two.""",
        rule=Rule(
            f"one or more levels (valid levels: {sorted(LEVELS)})",
            lambda v: bool(v) and all(level in LEVELS for level in v),
        ),
    )
    examples: int = option(
        6000,
        """Distinct training problems in all (split over levels).""",
        integer=True,
        ge=1,
    )
    steps: int = option(
        600,
        """Optimizer steps of batch_size examples; the main knob for how weak the policy is.""",
        integer=True,
        ge=1,
    )
    lr: float = option(
        3e-3,
        """Peak AdamW learning rate (linear warm-up over warmup_steps, cosine decay to 10 %).""",
        gt=0,
    )
    warmup_steps: int = option(30, """Steps of the linear warm-up.""", ge=0)
    batch_size: int = option(32, """Examples per optimizer step.""", integer=True, ge=1)
    hidden_size: int = option(
        128,
        """Width of the LlamaForCausalLM (embeddings tied with the output layer); divisible by
        num_heads.""",
        integer=True,
        ge=1,
    )
    num_layers: int = option(4, """Decoder layers.""", integer=True, ge=1)
    num_heads: int = option(4, """Attention heads of each layer.""", integer=True, ge=1)
    intermediate_size: int = option(384, """Width of the MLP of each layer.""", integer=True, ge=1)
    weight_decay: float = option(0.01, """AdamW weight decay.""", ge=0)
    seed: int = option(
        0, """Seed of the train problems, the initial weights and the batch order."""
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "levels", tuple(self.levels))
        check_options(self, lambda name: f"SFTSettings.{name}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"SFTSettings.hidden_size ({self.hidden_size}) must be divisible by "
                f"num_heads ({self.num_heads})"
            )

    @classmethod
    def quick(cls) -> SFTSettings:
        """CI-size preset: a smaller model and schedule on the easy level only."""
        return cls(
            levels=("easy",),
            examples=2000,
            steps=400,
            lr=5e-3,
            batch_size=32,
            hidden_size=64,
            num_layers=2,
            num_heads=4,
            intermediate_size=192,
        )

    def with_overrides(self, **overrides: object) -> SFTSettings:
        """A copy with ``overrides`` applied, each checked against its field's type
        (``groupwise.config.build``); an unknown name is a ConfigError listing the fields."""
        return build(SFTSettings, {**dataclasses.asdict(self), **overrides})

    def fingerprint(self) -> str:
        """12 hex digits of SHA-256 over the settings and FORMAT_VERSION."""
        payload = json.dumps(
            {"format_version": FORMAT_VERSION, **dataclasses.asdict(self)}, sort_keys=True
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:12]


def cache_root() -> Path:
    """groupwise's cache folder: $GROUPWISE_CACHE, else $XDG_CACHE_HOME/groupwise, else
    ~/.cache/groupwise."""
    if os.environ.get("GROUPWISE_CACHE"):
        return Path(os.environ["GROUPWISE_CACHE"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "groupwise"
    return Path.home() / ".cache" / "groupwise"


def _byte_to_unicode() -> dict[int, str]:
    # GPT-2's printable stand-in for each byte, the alphabet of the ByteLevel pre-tokenizer.
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The byte-level tokenizer: ids 0..2 are <pad>, <bos>, <eos>; id 3 + b is byte b.

    Encoding adds no special token (with or without ``add_special_tokens``, so the policy sees
    the same ids whoever encodes its prompts); decoding maps bytes back, so
    ``decode(encode(text), skip_special_tokens=True) == text`` for any text (a sampled byte
    sequence that is not UTF-8 decodes with U+FFFD). <bos> exists for tools that ask for one
    but the policy is trained without it.
    """
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for byte, char in _byte_to_unicode().items():
        vocab[char] = len(SPECIAL_TOKENS) + byte
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        padding_side="left",
        model_max_length=1024,
    )


def build_model(settings: SFTSettings, tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    """A freshly initialised tiny LlamaForCausalLM (float32) sized by ``settings``."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=settings.hidden_size,
        intermediate_size=settings.intermediate_size,
        num_hidden_layers=settings.num_layers,
        num_attention_heads=settings.num_heads,
        num_key_value_heads=settings.num_heads,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def sft_batch(
    tokenizer: PreTrainedTokenizerFast, prompts: list[str], completions: list[str]
) -> dict[str, torch.Tensor]:
    """Right-padded training batch of ``prompt completion <eos>`` sequences.

    Returns input_ids, attention_mask and labels, each LongTensor[B, L]; labels equal input_ids
    on the completion and <eos> tokens and IGNORE_INDEX (-100) on prompt and padding, so the
    loss (which shifts labels by one inside the model) is over completion tokens only.
    """
    if len(prompts) != len(completions):
        raise ValueError(f"sft_batch: {len(prompts)} prompts but {len(completions)} completions")
    prompt_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(completions, add_special_tokens=False)["input_ids"]
    rows = [
        (p, [*c, tokenizer.eos_token_id]) for p, c in zip(prompt_ids, completion_ids, strict=True)
    ]
    length = max(len(p) + len(c) for p, c in rows)
    input_ids = torch.full((len(rows), length), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), length), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), length), dtype=torch.long)
    for i, (p, c) in enumerate(rows):
        n = len(p) + len(c)
        input_ids[i, :n] = torch.tensor(p + c)
        labels[i, len(p) : n] = torch.tensor(c)
        attention_mask[i, :n] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def training_pairs(settings: SFTSettings) -> list[tuple[str, str]]:
    """(prompt, completion) pairs: the question, and COMPLETION_PREFIX + worked solution, from
    the "arith" train split; ``settings.examples`` split in equal shares over
    ``settings.levels`` (a level named k times gets k shares, all distinct problems)."""
    shares = [
        settings.examples // len(settings.levels) + (i < settings.examples % len(settings.levels))
        for i in range(len(settings.levels))
    ]
    sizes: dict[str, int] = {}
    for level, share in zip(settings.levels, shares, strict=True):
        sizes[level] = sizes.get(level, 0) + share
    return [
        (problem.question, COMPLETION_PREFIX + problem.meta["solution"])
        for level, size in sizes.items()
        for problem in generate_problems("train", level=level, size=size, seed=settings.seed)
    ]


def _batches(num_examples: int, batch_size: int, generator: torch.Generator) -> Iterator[list[int]]:
    # Endless epochs, each a fresh permutation of the examples.
    while True:
        order = torch.randperm(num_examples, generator=generator).tolist()
        for start in range(0, num_examples - batch_size + 1, batch_size):
            yield order[start : start + batch_size]


def _lr_factor(step: int, settings: SFTSettings) -> float:
    if step < settings.warmup_steps:
        return (step + 1) / settings.warmup_steps
    progress = (step - settings.warmup_steps) / max(1, settings.steps - settings.warmup_steps)
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))


def fit_base_policy(
    settings: SFTSettings,
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast, float]:
    """Train the base policy from scratch by SFT, in memory.

    Runs ``settings.steps`` AdamW steps over batches of ``settings.batch_size`` examples with a
    tqdm bar showing the running loss (exponential average, nats per completion token).
    Returns the model in eval mode, the tokenizer and that running loss at the end. Leaves the
    caller's torch RNG state untouched.
    """
    tokenizer = build_tokenizer()
    pairs = training_pairs(settings)
    batch_size = min(settings.batch_size, len(pairs))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        model = build_model(settings, tokenizer)
        model.train()
        optimizer = torch.optim.AdamW(
            model.parameters(),
            lr=settings.lr,
            weight_decay=settings.weight_decay,
            betas=(0.9, 0.98),
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: _lr_factor(step, settings)
        )
        batches = _batches(len(pairs), batch_size, torch.Generator().manual_seed(settings.seed))
        running = math.nan
        progress = tqdm(range(settings.steps), desc="SFT arith-base", unit="step")
        for step in progress:
            indices = next(batches)
            batch = sft_batch(
                tokenizer, [pairs[i][0] for i in indices], [pairs[i][1] for i in indices]
            )
            loss = model(**batch).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            running = loss.item() if step == 0 else 0.95 * running + 0.05 * loss.item()
            progress.set_postfix(loss=f"{running:.3f}", lr=f"{scheduler.get_last_lr()[0]:.2e}")
    model.eval()
    return model, tokenizer, running


def train_base_policy(settings: SFTSettings, output_dir: str | Path) -> Path:
    """Train the base policy (``fit_base_policy``) and save model, tokenizer and
    ``sft_settings.json`` (settings, final running loss, wall seconds) into ``output_dir``."""
    output_dir = Path(output_dir)
    started = time.perf_counter()
    model, tokenizer, final_loss = fit_base_policy(settings)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    record = {
        "format_version": FORMAT_VERSION,
        "settings": dataclasses.asdict(settings),
        "final_loss": final_loss,
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    (output_dir / SETTINGS_FILE).write_text(json.dumps(record, indent=2) + "\n")
    return output_dir


def base_policy_scores(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, problems: int = SCORED_PROBLEMS
) -> dict[str, dict[str, float]]:
    """Deterministic scores of a base policy on the first ``problems`` "arith" test problems of
    each level (seed 0): ``greedy_accuracy`` (fraction whose greedy completion of at most
    SCORED_TOKENS tokens is correct, ``groupwise.rewards.check_answers``) and ``solution_nll``
    (nats per completion token of the worked solutions, teacher-forced: the SFT loss)."""
    from groupwise.rewards import check_answers
    from groupwise.rollout.transformers_engine import TransformersGenerator
    from groupwise.rollout.types import SamplingParams

    generator = TransformersGenerator(model, tokenizer, batch_size=problems)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=SCORED_TOKENS)
    scores: dict[str, dict[str, float]] = {"greedy_accuracy": {}, "solution_nll": {}}
    for level in LEVELS:
        items = generate_problems("test", level=level, size=problems, seed=0)
        questions = [p.question for p in items]
        texts = generator.generate(questions, 1, greedy).texts
        verdicts = check_answers(texts, [p.answer for p in items])
        batch = sft_batch(
            tokenizer, questions, [COMPLETION_PREFIX + p.meta["solution"] for p in items]
        )
        with torch.no_grad():
            nll = float(model(**batch).loss)
        scores["greedy_accuracy"][level] = sum(v.correct for v in verdicts) / len(items)
        scores["solution_nll"][level] = round(nll, 6)
    return scores


def shipped_base_policy() -> Path:
    """The folder of the base policy shipped inside the package (``SFTSettings()``, trained by
    the command in its ``README.md``): model.safetensors, config, tokenizer, SETTINGS_FILE and
    SCORES_FILE."""
    return SHIPPED_DIR


def _shipped_settings() -> SFTSettings | None:
    """The settings the shipped policy was trained with, when it is there and was made by this
    FORMAT_VERSION; None otherwise."""
    record_path = SHIPPED_DIR / SETTINGS_FILE
    if not (SHIPPED_DIR / "model.safetensors").is_file() or not record_path.is_file():
        return None
    record = json.loads(record_path.read_text())
    if record.get("format_version") != FORMAT_VERSION:
        return None
    return SFTSettings(**record["settings"])


def load_base_policy(
    *, settings: SFTSettings | None = None, cache: bool = True, **overrides: object
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """The base policy (model in eval mode, tokenizer): the shipped one, else trained first if
    not cached.

    ``settings`` defaults to ``SFTSettings()``; ``overrides`` replace single fields (unknown
    names are an error). Settings equal to the shipped policy's load it from the package
    (``shipped_base_policy()``), nothing trained. Other settings: with ``cache=True`` the model
    is read from, or trained into, ``cache_root()/models/arith-base-<settings.fingerprint()>``;
    with ``cache=False`` it is trained in memory and nothing is written.
    """
    settings = (settings or SFTSettings()).with_overrides(**overrides)
    if settings == _shipped_settings():
        return load_saved_llama(SHIPPED_DIR)
    if not cache:
        model, tokenizer, _ = fit_base_policy(settings)
        return model, tokenizer
    final = cache_root() / "models" / f"arith-base-{settings.fingerprint()}"
    if not (final / SETTINGS_FILE).is_file():
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
        try:
            train_base_policy(settings, tmp)
            # Another process may have finished the same settings first; keep its copy.
            with contextlib.suppress(OSError):
                tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return load_saved_llama(final)


def main(argv: list[str] | None = None) -> int:
    """``python -m groupwise.sft --output DIR [FIELD=VALUE ...]``: train the base policy with
    ``SFTSettings()`` (FIELD=VALUE overrides one field, the value read as YAML, e.g.
    ``steps=700`` or ``levels=[easy,mid]``), save it into DIR (``train_base_policy``)
    and write its ``base_policy_scores`` to DIR/SCORES_FILE. The shipped policy was made so.
    A bad override is one line, exit status 2 (groupwise.entry)."""
    return main_of("python -m groupwise.sft", _add_arguments, _run, argv, main.__doc__)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", required=True, type=Path, help="folder to write")
    parser.add_argument("overrides", nargs="*", metavar="FIELD=VALUE")


def _run(args: argparse.Namespace) -> int:
    overrides: dict[str, object] = {}
    for item in args.overrides:  # ConfigError (a ValueError), or a range SFTSettings refuses
        apply_override(overrides, item)
    settings = SFTSettings().with_overrides(**overrides)
    folder = train_base_policy(settings, args.output)
    model, tokenizer = load_saved_llama(folder)
    scores = base_policy_scores(model, tokenizer)
    (folder / SCORES_FILE).write_text(json.dumps(scores, indent=2) + "\n")
    print(f"{folder}: {json.dumps(scores)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
