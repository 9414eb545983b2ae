"""Benchmarks (registry and `Problem`: benchmarks; the built-in loaders: loaders), training-data
mixes, and prompt templates."""

from __future__ import annotations

from groupwise.data.benchmarks import (
    BenchmarkFormatError,
    BenchmarkSpec,
    Problem,
    benchmark_names,
    benchmark_options,
    benchmark_splits,
    difficulty_level,
    load_benchmark,
    register_benchmark,
    resolve_data_dir,
)
from groupwise.data.mix import MixPart, load_mix, mix_problems, select_part
from groupwise.data.prompts import TEMPLATES, build_messages, get_template, render_prompt

__all__ = [
    "TEMPLATES",
    "BenchmarkFormatError",
    "BenchmarkSpec",
    "MixPart",
    "Problem",
    "benchmark_names",
    "benchmark_options",
    "benchmark_splits",
    "build_messages",
    "difficulty_level",
    "get_template",
    "load_benchmark",
    "load_mix",
    "mix_problems",
    "register_benchmark",
    "render_prompt",
    "resolve_data_dir",
    "select_part",
    "synthetic",
]

# Last: the built-in benchmarks (loaders) and the synthetic task ("arith") register themselves
# through register_benchmark above.
from groupwise.data import loaders as loaders
from groupwise.data import synthetic as synthetic
