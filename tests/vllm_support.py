"""Helpers of the vLLM tests (tests/test_vllm_*.py, run in .venv-vllm): a real vLLM
OpenAI-compatible server on 127.0.0.1, bounded in time and stopped at the end; the agreement
statistics; the tolerance of log-prob agreement. Nothing here imports vllm at module level.
The server is groupwise.rollout.vllm_server's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from groupwise.rollout.vllm_cpu import process_cores, split_cores
from groupwise.rollout.vllm_server import local_vllm_server

MODEL = "smollm2-135m-instruct"  # the groupwise alias; saved once as a folder for vLLM
SERVED = "smollm2"  # the server's name for it
# Per-completion mean log-probs of the same token ids from vLLM and from
# groupwise.completion_logprobs (both float32 on a CPU): their largest difference measured over
# these tests is below 1e-4 nats per token; 2e-3 leaves room for other CPUs' kernels while
# staying far below what a temperature-scaled log-prob (at 0.6: differences of 0.1 or more) or a
# wrong token would give.
LOGP_TOLERANCE = 2e-3
# The cores of the two engines a test session runs side by side: in-process engines (and the
# TRL colocate runs) on the first half of this machine's cores, the session's server on the
# second half, so that no test waits on another engine's core (vLLM's "auto" binding put both
# on core 0; groupwise.rollout.vllm_cpu).
ENGINE_CORES, SERVER_CORES = split_cores(2)


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch on one thread in this process (vLLM's engine runs in its own): on two shared cores
    the transformers engine and scoring run several times faster on one thread than on two
    (measured: 38 against 5 tokens/s decoding 8 rows of SmolLM2 at load average 7)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def worker_cores() -> list[list[int]]:
    """The cores (Cpus_allowed_list) of every vLLM worker process under this one (a vLLM
    engine's worker names itself VLLM::Worker), sorted."""
    import psutil

    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.cmdline()[:1] and child.cmdline()[0].startswith("VLLM::Worker"):
                found.append(process_cores(child.pid))
        except (psutil.NoSuchProcess, FileNotFoundError):
            continue
    return sorted(found)


@contextmanager
def vllm_server(
    model_folder: str,
    log: Path,
    *,
    max_model_len: int = 2048,
    cores: Sequence[int] = tuple(SERVER_CORES),
) -> Iterator[str]:
    """groupwise's local vLLM server of `model_folder` named SERVED, its worker on the
    session server's cores; yields its API root."""
    with local_vllm_server(
        model_folder, log, SERVED, max_model_len=max_model_len, cores=cores
    ) as url:
        yield url


def permutation_p_value(
    a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], rounds: int = 20_000, seed: int = 0
) -> float:
    """Two-sided p-value of the difference between two engines' means of a per-sample value
    (correctness as 0/1 for pass@1, or mean_logp), a[i] and b[i] being the values of the n
    samples each engine drew for problem i, under the null hypothesis that, problem by
    problem, both engines draw from one distribution.

    Paired (stratified) permutation test: under the null the 2n samples of a problem are
    exchangeable, so their labels are shuffled within each problem and the statistic,
    sum_i (sum a[i] - sum b[i]), recomputed `rounds` times; the p-value is
    (1 + #{|permuted| >= |observed|}) / (1 + rounds)."""
    rng = np.random.default_rng(seed)
    observed = abs(sum(float(np.sum(x)) - float(np.sum(y)) for x, y in zip(a, b, strict=True)))
    permuted = np.zeros(rounds)
    for x, y in zip(a, b, strict=True):
        pooled = np.asarray([*x, *y], dtype=float)
        order = np.argsort(rng.random((rounds, len(pooled))), axis=1)
        first = pooled[order[:, : len(x)]].sum(axis=1)
        permuted += 2 * first - pooled.sum()
    return float((1 + np.sum(np.abs(permuted) >= observed - 1e-9)) / (1 + rounds))


def goodness_of_fit_p_value(
    counts: Mapping[int, int], probs: Mapping[int, float], rounds: int = 20_000, seed: int = 0
) -> float:
    """p-value of observed counts of outcomes (token ids) under the distribution `probs`:
    0 when some outcome has probability 0 (is not in `probs`); else a chi-square
    goodness-of-fit test whose p-value is found by simulation (the statistic of `rounds`
    multinomial draws of the same size), outcomes expected fewer than 5 times pooled into one
    cell: (1 + #{simulated >= observed}) / (1 + rounds)."""
    if any(k not in probs for k, c in counts.items() if c):
        return 0.0
    total = sum(counts.values())
    keys = list(probs)
    p = np.asarray([probs[k] for k in keys], dtype=float)
    p /= p.sum()
    big = total * p >= 5
    expected = np.append(total * p[big], total * p[~big].sum())

    def statistic(observed: np.ndarray) -> np.ndarray:
        cells = np.concatenate(
            [observed[..., big], observed[..., ~big].sum(-1, keepdims=True)], axis=-1
        )
        keep = expected > 0
        return (((cells - expected) ** 2)[..., keep] / expected[keep]).sum(-1)

    observed = statistic(np.asarray([counts.get(k, 0) for k in keys], dtype=float))
    simulated = statistic(np.random.default_rng(seed).multinomial(total, p, size=rounds))
    return float((1 + np.sum(simulated >= observed - 1e-9)) / (1 + rounds))
