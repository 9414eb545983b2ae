"""The analyses that need log-probs of given text (perplexity, preference margin) with log-probs
recomputed on an engine (groupwise.analysis.rescoring): the transformers engine, and a server's
echoed prompt log-probs (the fake server of tests/fake_openai.py); a server without them is
refused in one line before anything is written. vLLM: tests/test_vllm_engine.py and
tests/test_vllm_server.py."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from fake_openai import MODEL, FakeOpenAIServer, echo_logprob

from groupwise.analysis.rescoring import completion_token_ids
from groupwise.analysis.runs import load_run
from groupwise.cli import main as cli
from groupwise.records import Sample, SavedProblem, write_problems

# problem A: correct "It is 1." and "1", incorrect "It is 2." -> a margin; B: all correct
COMPLETIONS = {
    "A": [("It is 1.", True), ("1", True), ("It is 2.", False)],
    "B": [("One.", True), ("1!", True), ("It is one.", True)],
}


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from groupwise.models import load_model

    return load_model("tiny-random")[1]


def write_run(folder: Path, model: str) -> Path:
    samples = [
        Sample("toy", pid, i, text, None, "correct" if ok else "wrong", 3, i == 1, -1.0, None, "1")
        for pid, rows in COMPLETIONS.items()
        for i, (text, ok) in enumerate(rows)
    ]
    folder.mkdir(parents=True)
    (folder / "samples.jsonl").write_text("".join(s.to_json() + "\n" for s in samples))
    write_problems(
        folder / "problems.jsonl",
        [SavedProblem("toy", p, f"What is 0 + {p}?", "1") for p in COMPLETIONS],
    )
    (folder / "config.json").write_text(json.dumps({"model": model, "prompt": "boxed"}))
    return folder


def expected_means(folder: Path, tokenizer: Any, logprob: Any) -> dict[tuple[str, int], float]:
    """Per (problem, sample): the mean of logprob(prompt ids, completion ids, position)."""
    run = load_run("run", folder)
    prompts, completions = completion_token_ids(tokenizer, run.samples, run.problems, "boxed")
    out = {}
    for s, prompt, completion in zip(run.samples, prompts, completions, strict=True):
        out[(s.problem_id, s.sample)] = sum(
            logprob(prompt, completion, t) for t in range(len(completion))
        ) / len(completion)
    return out


def margin_of(means: dict[tuple[str, int], float]) -> float:
    good = [means[("A", 0)], means[("A", 1)]]
    return sum(good) / 2 - means[("A", 2)]


def test_margin_and_perplexity_from_a_servers_echoed_log_probs(
    tmp_path: Path, tokenizer: Any
) -> None:
    run = write_run(tmp_path / "run", MODEL)
    means = expected_means(run, tokenizer, lambda p, c, t: echo_logprob(c[t]))
    with FakeOpenAIServer(decode=lambda t: tokenizer.decode([t])) as server:
        flags = [
            "--engine",
            "openai",
            "--base-url",
            server.url,
            "--tokenizer",
            "tiny-random",
            "--recompute",
        ]
        assert (
            cli(["analyze", "margin", f"run={run}", "--output", str(tmp_path / "m"), *flags]) == 0
        )
        assert (
            cli(
                [
                    "analyze",
                    "perplexity",
                    f"run={run}",
                    "--solvable-fraction",
                    "0.5",
                    "--output",
                    str(tmp_path / "p"),
                    *flags,
                ]
            )
            == 0
        )
        echoed = [b for _, b in server.requests if b.get("echo")]
    margin = json.loads((tmp_path / "m" / "margin.json").read_text())
    assert margin["source"] == "recomputed under each run's model on openai"
    assert margin["runs"]["run"]["mean"] == pytest.approx(margin_of(means))
    # margin scores only the problem with a margin (3 samples) after the tokenizer probe
    assert len(echoed) == 2 * 1 + 3 + 6
    rows = (tmp_path / "p" / "perplexity.csv").read_text().splitlines()[1:]
    got = {(r.split(",")[3], int(r.split(",")[4])): float(r.split(",")[5]) for r in rows}
    assert got == pytest.approx({key: math.exp(-v) for key, v in means.items()})


def test_margin_recomputed_on_the_transformers_engine(tmp_path: Path, tokenizer: Any) -> None:
    import torch

    from groupwise.models import load_model

    model, _ = load_model("tiny-random")
    run = write_run(tmp_path / "run", "tiny-random")

    def logprob(prompt: list[int], completion: list[int], t: int) -> float:
        with torch.no_grad():
            logits = model(torch.tensor([[*prompt, *completion]])).logits[0].float()
        return float(logits[len(prompt) - 1 + t].log_softmax(-1)[completion[t]])

    means = expected_means(run, tokenizer, logprob)
    assert (
        cli(
            [
                "analyze",
                "margin",
                f"run={run}",
                "--recompute",
                "--device",
                "cpu",
                "--output",
                str(tmp_path / "m"),
            ]
        )
        == 0
    )
    margin = json.loads((tmp_path / "m" / "margin.json").read_text())
    assert margin["runs"]["run"]["mean"] == pytest.approx(margin_of(means), abs=1e-5)
    assert margin["source"] == "recomputed under each run's model"


@pytest.mark.parametrize(("server_options", "flags", "expected"), [
    ({"echo": False}, ["--tokenizer", "tiny-random"],
     "does not return log-probs of given text (the completions endpoint with echo and "
     "logprobs)"),
    ({}, ["--tokenizer", "tiny-random"], "reads the probe's token ids as '<"),
    ({}, [], "--engine openai needs --base-url (the server) and --tokenizer"),
])  # fmt: skip
def test_a_server_without_log_probs_of_given_text_is_refused_in_one_line(
    server_options: dict,
    flags: list[str],
    expected: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = write_run(tmp_path / "run", MODEL)
    out = tmp_path / "m"
    with FakeOpenAIServer(**server_options) as server:
        status = cli(
            [
                "analyze",
                "margin",
                f"run={run}",
                "--engine",
                "openai",
                "--base-url",
                server.url,
                "--recompute",
                "--output",
                str(out),
                *flags,
            ]
        )
    message = capsys.readouterr().err.strip()
    assert status == 2
    assert message.startswith("groupwise analyze: ") and "\n" not in message, message
    assert expected in message, message
    assert not out.exists()


def test_margin_of_a_run_without_saved_log_probs_says_how_to_get_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path / "run", MODEL)
    lines = (run / "samples.jsonl").read_text().replace('"mean_logp": -1.0', '"mean_logp": null')
    (run / "samples.jsonl").write_text(lines)
    assert cli(["analyze", "margin", f"run={run}", "--output", str(tmp_path / "m")]) == 2
    assert re.search(r"has no saved mean_logp .*--recompute or --model", capsys.readouterr().err)
