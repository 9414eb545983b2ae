"""What a rollout engine takes and returns: SamplingParams in, Rollouts out, behind the
Generator protocol (docs/design.md: prompts --rollout engine--> Rollouts).

Evaluation needs less than training: the completions as text with a few facts each
(`Completions`), from any engine behind the `Sampler` protocol, including servers that never
show token ids; and the analyses need the mean log-prob of given token ids (`TokenScorer`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

import torch

__all__ = [
    "ChatMessages",
    "Completions",
    "Generator",
    "ModelInputs",
    "Prompt",
    "Rollouts",
    "Sampler",
    "SamplingParams",
    "TokenScorer",
]

# A chat prompt: [{"role": "system" | "user", "content": ...}], rendered by whoever serves it.
ChatMessages = list[dict[str, str]]
# What a Sampler takes per prompt: the rendered text, or chat messages (OpenAI chat endpoint).
Prompt = str | ChatMessages


@dataclass(frozen=True)
class SamplingParams:
    """How completions are sampled.

    temperature: logits are divided by it before sampling; 0 means greedy (argmax).
    top_p: nucleus sampling: sample from the smallest set of most probable tokens whose
        probability reaches top_p (1.0 = the whole vocabulary).
    max_new_tokens: completion length limit in tokens; a completion that reaches it without
        an EOS token is marked truncated.
    seed: seeds the sampler's own torch.Generator, so the same seed, prompts and model give
        identical rollouts; None draws a fresh seed. The global RNG is never touched.
    stop: strings that end a completion (the text is cut before the first one, as vLLM and
        OpenAI-compatible servers do); not truncated. Only the vLLM and server engines take
        them; the transformers engine stops at EOS tokens only and refuses a non-empty `stop`.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, int | float) and 0.0 <= self.temperature < 1e6):
            raise ValueError(
                f"SamplingParams.temperature must be a finite number >= 0 (0 = greedy), "
                f"got {self.temperature!r}"
            )
        if not (isinstance(self.top_p, int | float) and 0.0 < self.top_p <= 1.0):
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int):
            raise ValueError(
                f"SamplingParams.max_new_tokens must be an integer, got {self.max_new_tokens!r}"
            )
        if self.max_new_tokens < 1:
            raise ValueError(
                f"SamplingParams.max_new_tokens must be >= 1, got {self.max_new_tokens}"
            )
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0
        ):
            raise ValueError(
                f"SamplingParams.seed must be None or an integer >= 0, got {self.seed!r}"
            )
        if not isinstance(self.stop, tuple) or not all(isinstance(x, str) and x for x in self.stop):
            raise ValueError(
                f"SamplingParams.stop must be a tuple of non-empty strings, got {self.stop!r}"
            )


class ModelInputs(NamedTuple):
    """Prompt + completion as one batch for a teacher-forced forward pass.

    input_ids, attention_mask: LongTensor[R, P + T]; the prompt part is left padded, the
        completion part right padded, and the mask is 1 on real tokens only.
    completion_start: P, the column of the first completion token; the logits predicting
        completion token t (0-based) sit in column completion_start - 1 + t.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_start: int

    @property
    def position_ids(self) -> torch.Tensor:
        """LongTensor[R, P + T]: the positions the rollout engine used (the count of real tokens
        before each one), to pass along so the forward pass sees the sampling-time positions."""
        return (self.attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)


@dataclass
class Rollouts:
    """n sampled completions for each of N prompts, group-major: the n samples of prompt i
    are rows i*n .. i*n + n - 1.

    prompt_ids, prompt_mask: LongTensor[N, P], left padded (mask 1 on prompt tokens).
    completion_ids, completion_mask: LongTensor[N*n, T], right padded; the mask is 1 on every
        generated token including the EOS token that ended the completion, 0 after it.
    texts: the N*n completions decoded from the masked ids, special tokens skipped.
    truncated: BoolTensor[N*n], True where max_new_tokens was reached without an EOS token.
    group_size: n.
    sampler_logp: FloatTensor[N*n, T], the sampler's own log-prob of each completion token (0
        on padding), where the engine samples with other kernels than the trainer's (vLLM);
        None otherwise.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    texts: list[str]
    truncated: torch.Tensor
    group_size: int
    sampler_logp: torch.Tensor | None = None

    def __post_init__(self) -> None:
        num_prompts, rows = self.prompt_ids.shape[0], self.completion_ids.shape[0]
        problems = []
        if self.group_size < 1:
            problems.append(f"group_size {self.group_size} < 1")
        if self.prompt_mask.shape != self.prompt_ids.shape:
            problems.append(f"prompt_mask {tuple(self.prompt_mask.shape)} != prompt_ids shape")
        if self.completion_mask.shape != self.completion_ids.shape:
            problems.append(
                f"completion_mask {tuple(self.completion_mask.shape)} != completion_ids shape"
            )
        if rows != num_prompts * self.group_size:
            problems.append(f"{rows} completion rows != {num_prompts} prompts x {self.group_size}")
        if self.sampler_logp is not None and self.sampler_logp.shape != self.completion_ids.shape:
            problems.append(
                f"sampler_logp {tuple(self.sampler_logp.shape)} != completion_ids shape"
            )
        if len(self.texts) != rows or tuple(self.truncated.shape) != (rows,):
            problems.append(f"texts ({len(self.texts)}) and truncated must have {rows} rows")
        if problems:
            raise ValueError("inconsistent Rollouts: " + "; ".join(problems))

    @property
    def num_prompts(self) -> int:
        return self.prompt_ids.shape[0]

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    @property
    def prompt_index(self) -> torch.Tensor:
        """LongTensor[N*n]: the prompt row of each completion row (i for rows i*n .. i*n+n-1)."""
        index = torch.arange(self.num_prompts, device=self.prompt_ids.device)
        return index.repeat_interleave(self.group_size)

    @property
    def completion_lengths(self) -> torch.Tensor:
        """LongTensor[N*n]: tokens per completion, EOS included."""
        return self.completion_mask.long().sum(dim=1)

    def model_inputs(self, row_indices: torch.Tensor | Sequence[int] | None = None) -> ModelInputs:
        """Prompt + completion for the given completion rows (all when None), each prompt
        repeated for its completions, for the trainer's forward pass."""
        rows = torch.arange(len(self)) if row_indices is None else torch.as_tensor(row_indices)
        rows = rows.to(self.completion_ids.device, torch.long)
        prompts = self.prompt_index[rows]
        input_ids = torch.cat([self.prompt_ids[prompts], self.completion_ids[rows]], dim=1)
        mask = torch.cat([self.prompt_mask[prompts], self.completion_mask[rows]], dim=1)
        return ModelInputs(input_ids, mask, self.prompt_ids.shape[1])


@runtime_checkable
class Generator(Protocol):
    """A rollout engine: n completions for each prompt, as Rollouts (group-major).

    prompt_seeds: one seed per prompt, so that a prompt's samples come from its own random
    stream whatever else shares the batch (the trainer and `groupwise eval` pass them); None
    lets the engine seed from `sampling.seed`.
    """

    def generate(
        self,
        prompts: Sequence[str],
        n: int,
        sampling: SamplingParams,
        prompt_seeds: Sequence[int] | None = None,
    ) -> Rollouts: ...


@dataclass(frozen=True)
class Completions:
    """n completions for each of N prompts as text, group-major (prompt i's samples are rows
    i*n .. i*n + n - 1), with what evaluation records of each.

    texts: the N*n completions (special tokens skipped, cut before a stop string).
    tokens: completion tokens of each, the EOS or stop-string tokens that ended it included.
    truncated: whether each reached max_new_tokens (or the model's length) without stopping.
    mean_logp: mean log-prob per completion token (nats) under the generating model at
        temperature 1, i.e. the raw model distribution; None where the engine gives none.
    token_ids: the completion token ids, where the engine shows them (None otherwise).
    group_size: n.
    """

    texts: list[str]
    tokens: list[int]
    truncated: list[bool]
    mean_logp: list[float | None]
    group_size: int
    token_ids: list[list[int]] | None = None

    def __post_init__(self) -> None:
        rows = len(self.texts)
        columns = [len(self.tokens), len(self.truncated), len(self.mean_logp)]
        if self.token_ids is not None:
            columns.append(len(self.token_ids))
        if self.group_size < 1 or rows % self.group_size or any(c != rows for c in columns):
            raise ValueError(
                f"inconsistent Completions: {rows} texts, columns of {columns} rows, "
                f"group_size {self.group_size}"
            )

    def __len__(self) -> int:
        return len(self.texts)


@runtime_checkable
class Sampler(Protocol):
    """An evaluation engine: n completions for each prompt, as Completions (group-major).

    prompt_seeds: one seed per prompt; prompt i's samples come from its own random stream
    seeded by prompt_seeds[i], whatever else shares the call, so that a resumed evaluation
    draws what an uninterrupted one does.
    """

    def sample(
        self,
        prompts: Sequence[Prompt],
        n: int,
        sampling: SamplingParams,
        prompt_seeds: Sequence[int],
    ) -> Completions: ...


class TokenScorer(Protocol):
    """Log-probs of given text: the mean log-prob per completion token (nats) of each
    completion after its prompt, under the raw model distribution (temperature 1); None for an
    empty completion. Both sides are token ids of the scorer's tokenizer; a prompt is never
    empty (its last token predicts the first completion token)."""

    def mean_logp(
        self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]]
    ) -> list[float | None]: ...
