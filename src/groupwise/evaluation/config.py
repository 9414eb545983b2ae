"""The settings of one evaluation (`EvalConfig`) and the protocol presets.

REFERENCE.md "Evaluation of AMIR-GRPO" (`amir`, the default: n = 8, k in {1, 2, 4},
temperature 0.6, top-p 1.0, 1024 new tokens, the AMIR prompt) and section 3 (`lens`: n = 16,
k up to 16, temperature 1.0, top-p 1.0, 4096 new tokens, a plain boxed-answer prompt).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

PAPER_BENCHMARKS = ("gsm8k", "aime25", "olympiadbench", "amc23", "minerva", "aqua",
                    "livemathbench:AMC_en")
# Preset -> defaults; explicit command-line flags override them.
PRESETS: dict[str, dict[str, Any]] = {
    "amir": {"benchmarks": PAPER_BENCHMARKS, "n": 8, "ks": (1, 2, 4), "temperature": 0.6,
             "top_p": 1.0, "max_new_tokens": 1024, "prompt": "amir"},
    "lens": {"benchmarks": ("math:test",), "n": 16, "ks": (1, 2, 4, 8, 16), "temperature": 1.0,
             "top_p": 1.0, "max_new_tokens": 4096, "prompt": "boxed"},
}


@dataclass(frozen=True)
class EvalConfig:
    """The settings of one evaluation (saved as config.json in its folder).

    batch_size: completions decoded together; one generate call (and one flush of
    samples.jsonl) covers max(1, batch_size // n) problems.
    """

    model: str
    adapter: str | None = None
    benchmarks: tuple[str, ...] = PAPER_BENCHMARKS
    n: int = 8
    ks: tuple[int, ...] = (1, 2, 4)
    temperature: float = 0.6
    top_p: float = 1.0
    max_new_tokens: int = 1024
    prompt: str = "amir"
    limit: int | None = None
    batch_size: int = 64
    dtype: str = "float32"
    seed: int = 0
    data_dir: str | None = None

    # Settings that change what is sampled: a resumed run must keep them.
    SAMPLE_KEYS = ("model", "adapter", "n", "temperature", "top_p", "max_new_tokens", "prompt",
                   "dtype", "seed")

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        bad = [k for k in self.ks if not 1 <= k <= self.n]
        if not self.ks or bad:
            raise ValueError(f"every k must lie in 1..n={self.n}; got k={list(self.ks)}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if not self.benchmarks:
            raise ValueError("no benchmarks given")

    @property
    def problems_per_call(self) -> int:
        """Problems sampled by one generate call: max(1, batch_size // n)."""
        return max(1, self.batch_size // self.n)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in fields(self)}
