"""`groupwise eval --engine openai` and the analyses' log-probs of given text against a real vLLM
server (tests/conftest.py: vllm_server_url, SmolLM2-135M-Instruct served as "smollm2" on
127.0.0.1, one per session), on MATH-500 (the LENS preset's benchmark and prompt):

- pass@k and pass@k per MATH level from the server equal those recomputed from samples.jsonl;
- the completions endpoint with prompts rendered here (--tokenizer) draws the very samples the
  chat endpoint (the server's own chat template) draws: the prompts are the same tokens;
- a server that dies mid-run (tests/fake_openai.FaultyProxy in front of it stops listening)
  leaves a folder that resumes, against the server, to the samples of an uninterrupted run;
- the server's echoed prompt log-probs of saved completions (`analyze perplexity --engine
  openai --recompute`) equal groupwise's own scoring of them within LOGP_TOLERANCE.

Requests go one at a time (--concurrency 1), so that the server batches the same requests
together in every run and fp32 rounding cannot make two runs differ.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FaultyProxy
from vllm_support import LOGP_TOLERANCE, MODEL, SERVED, one_torch_thread

from groupwise.cli import main as cli
from groupwise.metrics import pass_at_k
from groupwise.records import group_by_problem, read_samples

LIMIT, N, TOKENS = 4, 4, 32


def eval_argv(url: str, out: Path, data_dir: Path, *extra: str) -> list[str]:
    return [
        "eval",
        "--engine",
        "openai",
        "--base-url",
        url,
        "--model",
        SERVED,
        "--preset",
        "lens",
        "--limit",
        str(LIMIT),
        "--n",
        str(N),
        "--k",
        "1,2,4",
        "--max-new-tokens",
        str(TOKENS),
        "--batch-size",
        str(2 * N),
        "--concurrency",
        "1",
        "--workers",
        "1",
        "--data-dir",
        str(data_dir),
        "--quiet",
        "--output",
        str(out),
        *extra,
    ]


def without_logp(folder: Path) -> list:
    return [dataclasses.replace(s, mean_logp=None) for s in read_samples(folder / "samples.jsonl")]


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def served(vllm_server_url: str, tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """An uninterrupted run against the server (chat endpoint)."""
    out = tmp_path_factory.mktemp("served") / "eval"
    assert cli(eval_argv(vllm_server_url, out, data_dir)) == 0
    return out


def test_pass_at_k_from_the_server_equals_pass_at_k_of_its_samples(served: Path) -> None:
    results = json.loads((served / "results.json").read_text())
    problems = [json.loads(line) for line in (served / "problems.jsonl").read_text().splitlines()]
    groups = group_by_problem(read_samples(served / "samples.jsonl"))
    assert len(groups) == LIMIT and all(len(g) == N for g in groups.values())
    counts = {key[1]: sum(s.correct for s in g) for key, g in groups.items()}
    level = {p["id"]: p["level"] for p in problems}

    def recomputed(ids: list[str], k: int) -> float:
        return sum(pass_at_k(N, counts[i], k) for i in ids) / len(ids)

    table = results["math500"]
    for k in (1, 2, 4):
        assert table[f"pass@{k}"] == recomputed(list(counts), k)
        for label, entry in table["levels"].items():
            members = [
                i
                for i in counts
                if (str(level[i]) == label or (label == "4-5" and level[i] in (4, 5)))
            ]
            assert entry["problems"] == len(members) and entry[f"pass@{k}"] == recomputed(
                members, k
            )
    samples = read_samples(served / "samples.jsonl")
    assert all(
        1 <= s.tokens <= TOKENS and s.mean_logp is not None and s.mean_logp < 0 for s in samples
    )
    assert all(s.truncated == (s.tokens == TOKENS) for s in samples)
    assert (served / "results.png").stat().st_size > 0


def test_completions_endpoint_draws_the_samples_of_the_chat_endpoint(
    vllm_server_url: str, served: Path, tmp_path: Path, data_dir: Path
) -> None:
    out = tmp_path / "eval"
    assert (
        cli(eval_argv(vllm_server_url, out, data_dir, "--api", "completions", "--tokenizer", MODEL))
        == 0
    )
    assert without_logp(out) == without_logp(served)


def test_a_server_that_dies_mid_run_leaves_a_folder_that_resumes_to_the_same_samples(
    vllm_server_url: str,
    served: Path,
    tmp_path: Path,
    data_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Through a proxy that stops listening at the 4th request (1: the server check; 2-3: the
    first sampling call, two problems): one line, exit 1, the first call's problems saved;
    rerun against the server itself, the folder completes to the uninterrupted run's samples."""
    out = tmp_path / "eval"
    proxy = FaultyProxy(vllm_server_url, fault=lambda number, path: "die" if number >= 4 else None)
    assert cli(eval_argv(proxy.url, out, data_dir, "--retries", "1")) == 1
    message = capsys.readouterr().err
    assert message.count("\n") == 1 and "rerun the same command to resume" in message
    partial = without_logp(out)
    assert len(partial) == 2 * N and partial == without_logp(served)[: 2 * N]
    assert cli(eval_argv(vllm_server_url, out, data_dir)) == 0
    assert without_logp(out) == without_logp(served)


def test_log_probs_of_given_text_from_the_server_equal_groupwise_scoring(
    vllm_server_url: str, served: Path, tmp_path: Path
) -> None:
    common = [
        "analyze",
        "perplexity",
        f"run={served}",
        "--recompute",
        "--solvable-fraction",
        "0.01",
    ]
    assert (
        cli(
            [
                *common,
                "--engine",
                "openai",
                "--base-url",
                vllm_server_url,
                "--tokenizer",
                MODEL,
                "--output",
                str(tmp_path / "server"),
            ]
        )
        == 0
    )
    assert (
        cli([*common, "--model", MODEL, "--device", "cpu", "--output", str(tmp_path / "groupwise")])
        == 0
    )

    def mean_logps(folder: Path) -> dict[tuple[str, str], float]:
        with open(folder / "perplexity.csv") as f:
            return {
                (r["problem_id"], r["sample"]): -math.log(float(r["ppl"]))
                for r in csv.DictReader(f)
            }

    server, ours = mean_logps(tmp_path / "server"), mean_logps(tmp_path / "groupwise")
    assert server.keys() == ours.keys() and len(server) == LIMIT * N
    assert max(abs(server[k] - ours[k]) for k in server) < LOGP_TOLERANCE
