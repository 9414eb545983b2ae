"""The settings of one evaluation (`EvalConfig`), their valid ranges, and the protocol presets.

Presets (explicit flags override them):
- `amir` (the default), docs/algorithms.md, "Evaluation of AMIR-GRPO": the paper's seven benchmarks,
  n = 8, k in {1, 2, 4}, temperature 0.6, top-p 1.0, 1024 new tokens, the AMIR prompt, the
  official evaluation grader (checking "amir_eval").
  AQUA-RAT in the official code's format (`aqua@format=official`: the question without its
  options, gold = the option's text), since the paper's numbers were measured that way.
- `lens`, docs/algorithms.md §3: MATH-500 (the paper's curves; the results add pass@k per MATH level
  and for Levels 4-5, its hard subset), n = 16, k in {1, 2, 4, 8, 16}, temperature 1.0, top-p
  1.0, 4096 new tokens, a plain boxed-answer prompt (the paper does not print its prompt),
  Math-Verify as the grader (checking "math_verify"). The paper's table is on the full MATH
  test: `--benchmarks math:test`.

Engines (`engine`; docs/guides/evaluate.md, "Evaluate a large model"): `transformers` (groupwise's
own decode loop, groupwise.rollout.TransformersGenerator), `vllm` (vLLM in process,
groupwise.rollout.vllm_engine) and `openai` (any OpenAI-compatible server, `base_url`,
groupwise.rollout.openai_engine). The engine is a setting that changes the samples: a folder is
resumed on the engine it was sampled with.

Every setting is checked when an EvalConfig is made, so a bad value fails before a model loads
or a file is written; `InvalidSetting` names the setting and its valid range.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from groupwise.options import Rule, option
from groupwise.records import MEAN_LOGP_NOTE

PAPER_BENCHMARKS = (
    "gsm8k",
    "aime25",
    "olympiadbench",
    "amc23",
    "minerva",
    "aqua@format=official",
    "livemathbench:AMC_en",
)
# Preset -> defaults; explicit command-line flags override them.
PRESETS: dict[str, dict[str, Any]] = {
    "amir": {
        "benchmarks": PAPER_BENCHMARKS,
        "n": 8,
        "ks": (1, 2, 4),
        "temperature": 0.6,
        "top_p": 1.0,
        "max_new_tokens": 1024,
        "prompt": "amir",
        "checking": "amir_eval",
    },
    "lens": {
        "benchmarks": ("math500",),
        "n": 16,
        "ks": (1, 2, 4, 8, 16),
        "temperature": 1.0,
        "top_p": 1.0,
        "max_new_tokens": 4096,
        "prompt": "boxed",
        "checking": "math_verify",
    },
}
# `checking` is one of groupwise.rewards.MODES, the names train's reward.checking takes:
# - amir_eval: the AMIR-GRPO official evaluation grader (`answer_tag_reward_fn_for_orz`): a
#   completion without <answer>...</answer> is wrong; the answer is read after the last
#   <answer> tag. The amir preset uses it, because the paper's numbers were graded so.
# - groupwise: ours (reads boxes, `#### N`, "the answer is" anywhere; Math-Verify's extraction
#   where those find nothing); for models that do not follow the AMIR output format.
# - math_verify: Math-Verify's own parse + verify on the whole completion, the LENS paper's
#   verifier; the lens preset uses it.
# - amir_official: the AMIR-GRPO official training reward's check (last box or number).
# eval first named them `--grading official | lenient | math_verify`; folders written then
# saved "grading", and are resumed under its checking name (evaluation.folder).
FORMER_GRADINGS: dict[str, str] = {
    "official": "amir_eval",
    "lenient": "groupwise",
    "math_verify": "math_verify",
}
# The dtype names groupwise.models.load_model accepts (its DTYPES).
DTYPE_NAMES = ("float32", "bfloat16", "float16", "auto")
# How samples are seeded (groupwise.evaluation.sampling.problem_seed); saved in config.json so a
# folder sampled under another scheme is not resumed into a mix of two.
SEEDING = "per-problem"
ENGINES = ("transformers", "vllm", "openai")
# The OpenAI-compatible endpoints: chat (messages; the server renders its chat template) or
# completions (a prompt string rendered here, with the chat template of `tokenizer`).
APIS = ("chat", "completions")
# Completions per generate call (and per flush of samples.jsonl) when --batch-size is not given:
# vLLM and servers schedule their own batches and gain from many requests at once.
DEFAULT_BATCH_SIZES = {"transformers": 64, "vllm": 512, "openai": 256}
# Settings added to config.json after folders were first written: a folder without one was made
# with this value.
ADDED_SETTINGS: dict[str, Any] = {
    "engine": "transformers",
    "api": None,
    "stop": [],
    "tokenizer": None,
}
# What mean_logp of a sample is, by engine (config.json and results.json carry it as "note").
MEAN_LOGP_NOTES = {
    "transformers": MEAN_LOGP_NOTE,
    "vllm": (
        "mean_logp: mean of vLLM's log-probs of the sampled tokens, logprobs_mode "
        "raw_logprobs: the raw model distribution (temperature 1), before temperature "
        "and top-p"
    ),
    "openai": (
        "mean_logp: mean of the server's log-probs of the sampled tokens (vLLM serve: "
        "the raw model distribution, temperature 1, unless started with --logprobs-mode "
        "processed_*); null where the server returned none"
    ),
}


class InvalidSetting(ValueError):
    """A setting outside its valid range: `name` (the EvalConfig field) and `reason`."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name, self.reason = name, reason


def _templates() -> dict[str, Any]:
    from groupwise.data.prompts import TEMPLATES

    return TEMPLATES


def _modes() -> dict[str, Any]:
    from groupwise.rewards import MODES

    return MODES


def _shown(value: Any) -> str:
    return repr(list(value) if isinstance(value, tuple) else value)


def _is_int(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


@dataclass(frozen=True)
class EvalConfig:
    """The settings of one evaluation (saved as config.json in its folder). Each field is
    declared with `groupwise.options.option`: its documentation, its valid range where one
    setting alone decides it, and how `groupwise eval` shows it as a flag (the flags are
    generated from these fields); the rules that read several settings are `_rules`."""

    model: str = option(
        doc="""Alias (smollm2-135m-instruct, tiny-random, ...), folder or hub id; a training run
        folder (or its final/ or a checkpoint folder): its weights, evaluated with its prompt,
        checking mode, lengths and sampling unless flags say otherwise; with the openai engine
        the served model name.""",
        rule=Rule("a non-empty name", lambda v: isinstance(v, str) and bool(v.strip())),
        cli={"default": None},
    )
    adapter: str | None = option(
        None,
        """LoRA adapter: a training run folder (final adapter, else latest checkpoint), a
        checkpoint folder or an adapter folder (resolved, absolute).""",
    )
    benchmarks: tuple[str, ...] = option(
        PAPER_BENCHMARKS,
        """Comma-separated NAME[:SPLIT][@KEY=VALUE...] (e.g. gsm8k,livemathbench:hard_en,
        aqua@format=official): the labels of the problems and of the results.""",
        cli={"metavar": "SPEC,SPEC,..."},
    )
    n: int = option(8, """Samples per problem.""", integer=True, ge=1)
    ks: tuple[int, ...] = option(
        (1, 2, 4),
        """Comma-separated k of pass@k, each in 1..n (default: the preset's; for a training
        run folder 1, 2, 4, ... up to n).""",
        cli={"flag": "--k", "metavar": "K,K,..."},
    )
    temperature: float = option(
        0.6,
        """Sampling temperature (0 = greedy).""",
        ge=0,
        lt=1_000_000,
        note="(0 = greedy)",
    )
    top_p: float = option(
        1.0,
        """Nucleus sampling: the top-p mass.""",
        gt=0,
        le=1,
    )
    max_new_tokens: int = option(1024, """Most tokens of a completion.""", integer=True, ge=1)
    prompt: str = option(
        "amir",
        """Prompt template (groupwise.data.prompts.TEMPLATES).""",
        cli={"choices": lambda: sorted(_templates())},
    )
    checking: str = option(
        "amir_eval",
        """How answers are checked (as train's reward.checking): amir_eval (AMIR-GRPO's
        evaluation grader: no <answer> block, no credit; amir preset), groupwise (ours: boxes,
        '#### N', 'the answer is' anywhere), math_verify (Math-Verify on the whole completion;
        lens preset), amir_official (AMIR-GRPO's training reward check).""",
        cli={"choices": lambda: list(_modes())},
    )
    limit: int | None = option(
        None,
        """The first N problems of each benchmark (none: all).""",
        integer=True,
        ge=1,
        allow_none=True,
    )
    batch_size: int = option(
        64,
        """Completions sampled by one call; also the unit of saving and of the progress bar:
        one generate call covers max(1, batch_size // n) problems; samples do not depend on it
        (default by engine: """
        + ", ".join(f"{k} {v}" for k, v in DEFAULT_BATCH_SIZES.items())
        + ").",
        integer=True,
        ge=1,
        cli={"default": None},
    )
    dtype: str = option(
        "float32",
        """Weights dtype (transformers and vllm engines; auto: the checkpoint's own).""",
        choices=DTYPE_NAMES,
        cli={"choices": lambda: DTYPE_NAMES},
    )
    seed: int = option(0, """The sampling seed.""", integer=True, ge=0)
    data_dir: str | None = option(
        None,
        """Benchmark folder laid out like ../shared/data (default: $GROUPWISE_DATA, else
        ../shared/data beside the working folder or beside groupwise's checkout, else the
        hub).""",
    )
    engine: str = option(
        "transformers",
        """What samples: transformers (groupwise's decode loop, CPU or one GPU), vllm (vLLM in
        process) or openai (any OpenAI-compatible server at --base-url).""",
        choices=ENGINES,
        cli={"choices": lambda: ENGINES},
    )
    api: str | None = option(
        None,
        """Chat (the server renders its chat template; default) or completions (prompts
        rendered here with --tokenizer's chat template; the default for --prompt plain).""",
        cli={"choices": lambda: APIS, "group": "--engine openai"},
    )
    stop: tuple[str, ...] = option(
        (),
        """A string that ends a completion (repeatable; vllm and openai engines).""",
        cli={"action": "append", "metavar": "STRING", "default": None},
    )
    tokenizer: str | None = option(
        None,
        """The served model's tokenizer (alias, folder or hub id), to render chat prompts for
        --api completions.""",
        cli={"group": "--engine openai"},
    )
    base_url: str | None = option(
        None,
        """The server's API root, e.g. http://127.0.0.1:8000/v1 (openai engine). Not a
        sample-changing setting: the same model may be served elsewhere.""",
        cli={"group": "--engine openai"},
    )

    # Settings that change what samples.jsonl holds: a resumed run must keep them.
    SAMPLE_KEYS = (
        "model",
        "adapter",
        "n",
        "temperature",
        "top_p",
        "max_new_tokens",
        "prompt",
        "checking",
        "dtype",
        "seed",
        "seeding",
        "prompt_digest",
        "engine",
        "api",
        "stop",
        "tokenizer",
    )

    def __post_init__(self) -> None:
        for spec in fields(self):
            check, value = spec.metadata.get("check"), getattr(self, spec.name)
            if check is not None and not check(value):
                valid = spec.metadata["valid"]
                raise InvalidSetting(spec.name, f"must be {valid}, got {_shown(value)}")
        for name, (valid, rule) in self._rules().items():
            value = getattr(self, name)
            if not valid(value):
                raise InvalidSetting(name, f"must be {rule}, got {_shown(value)}")
        _check_benchmarks(self.benchmarks)

    def _rules(self) -> dict[str, tuple[Callable[[Any], bool], str]]:
        """The rules that read other settings, or a registry that plugins extend."""
        templates = _templates()
        openai = self.engine == "openai"
        chat = self.prompt in templates and templates[self.prompt].chat
        needs_tokenizer = openai and self.api == "completions" and chat
        return {
            "ks": (lambda v: ks_problem(v, self.n) is None, f"integers in 1..n={self.n}"),
            "prompt": (lambda v: v in templates, f"one of {', '.join(sorted(templates))}"),
            "checking": (lambda v: v in _modes(), f"one of {', '.join(_modes())}"),
            "adapter": (
                lambda v: v is None or not openai,
                "absent with the openai engine (serve the adapter and name it in --model)",
            ),
            "api": (
                lambda v: (v in APIS and (v == "completions" or chat)) if openai else v is None,
                (
                    "chat or completions; completions for a prompt that is no chat (plain)"
                    if openai
                    else "given with the openai engine only"
                ),
            ),
            "stop": (
                lambda v: (
                    isinstance(v, tuple)
                    and all(isinstance(x, str) and x for x in v)
                    and (not v or self.engine != "transformers")
                ),
                "non-empty strings, with the vllm or openai engine (the transformers engine "
                "stops at EOS tokens only)",
            ),
            "tokenizer": (
                lambda v: (
                    (isinstance(v, str) and bool(v))
                    if needs_tokenizer
                    else v is None or (openai and isinstance(v, str) and bool(v))
                ),
                f"given with --api completions and the chat prompt {self.prompt!r}: "
                "the served model's tokenizer (alias, folder or hub id) renders it "
                "here (or use --api chat)"
                if needs_tokenizer
                else "given with the openai engine only",
            ),
            "base_url": (
                lambda v: isinstance(v, str) and bool(v) if openai else v is None,
                "the server's API root with the openai engine, absent otherwise",
            ),
        }

    @property
    def problems_per_call(self) -> int:
        """Problems sampled by one generate call: max(1, batch_size // n)."""
        return max(1, self.batch_size // self.n)

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON values, with the seeding scheme and the digest of the prompt
        template's text (config.json, results.json)."""
        from groupwise.data.prompts import template_digest

        out = {
            f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
            for f in fields(self)
        }
        return {**out, "seeding": SEEDING, "prompt_digest": template_digest(self.prompt)}


def ks_problem(ks: Any, n: Any) -> str | None:
    """Why `ks` are no k of pass@k with n samples per problem (each an integer in 1..n; an n
    that is no integer >= 1 bounds nothing here, its own check names it), or None."""
    n_ok = _is_int(n, 1)
    if ks and all(_is_int(k, 1) and (not n_ok or k <= n) for k in ks):
        return None
    return f"must be integers in 1..n={n}, got {_shown(ks)}"


def _check_benchmarks(specs: tuple[str, ...]) -> None:
    # Only labels here: `evaluate` takes the problems themselves; the command line parses them
    # as groupwise.data.BenchmarkSpec.
    if not specs:
        raise InvalidSetting("benchmarks", "must name at least one benchmark")
    if len(set(specs)) != len(specs):
        raise InvalidSetting("benchmarks", f"names a benchmark twice: {list(specs)}")
