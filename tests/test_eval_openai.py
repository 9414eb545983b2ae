"""`groupwise eval --engine openai` against a fake OpenAI-compatible server (tests/fake_openai.py,
stdlib, in a thread): pass@k against the saved samples, n per request or repeated requests,
retries, and faults (500, hang, death mid-run) that leave a folder which resumes to the samples
of an uninterrupted run; a bad server or flag is one line before anything is written.
The same against a real `vllm serve`: tests/test_vllm_server.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fake_openai import MODEL, FakeOpenAIServer, choice_for, echo_logprob

from groupwise.cli import main as cli
from groupwise.evaluation.sampling import problem_seed
from groupwise.metrics import pass_at_k
from groupwise.records import group_by_problem, read_samples
from groupwise.rollout import OpenAIEngine, SamplingParams, ServerError

LIMIT, N = 6, 4


def eval_argv(url: str, out: Path, data_dir: Path, *extra: str) -> list[str]:
    # --batch-size 8: two problems per sampling call, so a failure mid-run leaves some saved
    return [
        "eval",
        "--engine",
        "openai",
        "--base-url",
        url,
        "--model",
        MODEL,
        "--benchmarks",
        "gsm8k",
        "--limit",
        str(LIMIT),
        "--n",
        str(N),
        "--k",
        "1,2,4",
        "--max-new-tokens",
        "6",
        "--checking",
        "groupwise",
        "--batch-size",
        "8",
        "--workers",
        "1",
        "--data-dir",
        str(data_dir),
        "--quiet",
        "--output",
        str(out),
        *extra,
    ]


def saved(folder: Path) -> dict[tuple[str, str, int], dict]:
    return {
        (s.benchmark, s.problem_id, s.sample): s.__dict__
        for s in read_samples(folder / "samples.jsonl")
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """An uninterrupted run against a healthy server."""
    out = tmp_path_factory.mktemp("reference") / "eval"
    with FakeOpenAIServer() as server:
        assert cli(eval_argv(server.url, out, data_dir)) == 0
    return out


def test_pass_at_k_equals_recomputed_from_samples(reference: Path) -> None:
    results = json.loads((reference / "results.json").read_text())
    samples = read_samples(reference / "samples.jsonl")
    groups = list(group_by_problem(samples).values())
    assert len(groups) == LIMIT and all(len(g) == N for g in groups)
    counts = [sum(s.correct for s in g) for g in groups]
    assert 0 < sum(counts) < LIMIT * N  # the fake answers a digit: some right, some wrong
    for k in (1, 2, 4):
        recomputed = sum(pass_at_k(N, c, k) for c in counts) / len(counts)
        assert results["gsm8k"][f"pass@{k}"] == pytest.approx(recomputed, abs=1e-12)
    # every sample is the server's choice for its seed: text, token count, mean of log-probs
    for s in samples:
        text, logps, cut = choice_for(problem_seed(0, "gsm8k", s.problem_id) + s.sample, 6)
        assert (s.completion, s.tokens, s.truncated) == (text, len(logps), cut)
        assert s.mean_logp == pytest.approx(sum(logps) / len(logps))
    config = json.loads((reference / "config.json").read_text())
    assert (config["engine"], config["api"], config["model"]) == ("openai", "chat", MODEL)
    assert "engine openai at http://127.0.0.1:" in (reference / "results.md").read_text()
    # the amir prompt asks for a confidence: calibration from the saved samples on this engine
    # too; the fake states none, so every completion is counted missing, none read as 0.5
    calibration = results["gsm8k"]["calibration"]
    assert (calibration["missing"], calibration["coverage"]) == (LIMIT * N, 0.0)
    assert calibration["brier"] is None and (reference / "calibration.png").is_file()
    served = results["config"]["provenance"]["model"]
    assert (served["kind"], served["name"]) == ("served", MODEL)


def test_repeated_requests_where_the_server_has_no_n(
    tmp_path: Path, data_dir: Path, reference: Path
) -> None:
    """A server that answers one choice per request gets n requests, seeded seed + j: on
    vLLM (and the fake) the same samples as one request with n."""
    out = tmp_path / "eval"
    with FakeOpenAIServer(n_per_request=False) as server:
        assert cli(eval_argv(server.url, out, data_dir)) == 0
        sampling = [body for path, body in server.requests if body["max_tokens"] == 6]
    assert saved(out) == saved(reference)
    assert len(sampling) == LIMIT * N and {b["n"] for b in sampling} == {1}
    first = problem_seed(0, "gsm8k", "gsm8k/test/0")
    assert sorted(b["seed"] for b in sampling if b["seed"] - first in range(N)) == [
        first + j for j in range(N)
    ]


def test_server_without_logprobs_gives_samples_without_mean_logp(
    tmp_path: Path, data_dir: Path
) -> None:
    out = tmp_path / "eval"
    with FakeOpenAIServer(logprobs=False) as server:
        assert cli(eval_argv(server.url, out, data_dir)) == 0
    samples = read_samples(out / "samples.jsonl")
    assert all(s.mean_logp is None for s in samples)
    for s in samples:  # token counts from the usage report of one-choice requests
        _, logps, _ = choice_for(problem_seed(0, "gsm8k", s.problem_id) + s.sample, 6)
        assert s.tokens == len(logps)


@pytest.mark.parametrize("fault", ["500", "hang", "die"])
def test_a_failing_server_leaves_a_folder_that_resumes_to_the_same_samples(
    fault: str, tmp_path: Path, data_dir: Path, reference: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """From the 4th sampling request on the server answers 500, never answers, or dies (drops
    the request and stops listening): the run stops with one line (exit 1) after its retries,
    the problems of the calls that completed are saved, and a rerun against a healthy server
    completes the folder to exactly the reference samples."""
    out = tmp_path / "eval"
    broken = FakeOpenAIServer(
        fault=lambda number, path: fault if number >= 4 else None, hang_seconds=3.0
    )
    started = time.perf_counter()
    try:
        code = cli(
            eval_argv(
                broken.url,
                out,
                data_dir,
                "--retries",
                "1",
                "--request-timeout",
                "0.5",
                "--concurrency",
                "2",
            )
        )
    finally:
        if fault != "die":
            broken.stop()
    assert code == 1 and time.perf_counter() - started < 20
    message = capsys.readouterr().err
    assert message.count("\n") == 1 and message.startswith("groupwise eval: POST ")
    assert "(after 2 tries)" in message and "rerun the same command to resume" in message
    expected = {
        "500": "HTTP 500: simulated failure",
        "hang": "no answer within 0.5 s",
        "die": "cannot connect",
    }[fault]
    assert expected in message
    partial = saved(out)
    assert len({key[1] for key in partial}) in (2, 4)  # whole sampling calls of 2 problems
    assert partial.items() <= saved(reference).items()
    with FakeOpenAIServer() as healthy:
        assert cli(eval_argv(healthy.url, out, data_dir)) == 0
        asked = {b["seed"] for _, b in healthy.requests if b["max_tokens"] == 6}
    assert saved(out) == saved(reference)
    done = {problem_seed(0, "gsm8k", key[1]) for key in partial}
    assert not asked & done  # only the problems not saved were sampled again


def test_transient_failures_are_retried(tmp_path: Path, data_dir: Path, reference: Path) -> None:
    """Every other request answers 429 (Retry-After: 0) or drops its connection: each is
    retried and the run completes with the reference samples."""
    out = tmp_path / "eval"
    faults = {1: "429", 3: "drop"}
    with FakeOpenAIServer(fault=lambda number, path: faults.get(number % 4)) as server:
        assert cli(eval_argv(server.url, out, data_dir, "--retries", "2")) == 0
        sampled = [b for _, b in server.requests if b["max_tokens"] == 6]
    assert saved(out) == saved(reference)
    assert len(sampled) > LIMIT  # the failed ones were asked again


@pytest.mark.parametrize(("flags", "expected"), [
    (["--base-url", "http://127.0.0.1:1/v1"],
     "--base-url: GET http://127.0.0.1:1/v1/models: cannot connect"),
    (["--base-url", "127.0.0.1:8000/v1"], "--base-url: must be http(s)://HOST[:PORT]/PATH"),
    (["--base-url", "{url_without_v1}"], "(no /chat/completions endpoint here: is the API "
                                         "root, often ending in /v1, the --base-url?)"),
    (["--model", "other-model"], "--model: {url} serves 'fake-model', not 'other-model'"),
    (["--api", "completions"], "--tokenizer: must be given with --api completions and the "
                               "chat prompt 'amir'"),
    (["--prompt", "plain", "--api", "chat"], "--api: must be chat or completions; "
                                             "completions for a prompt that is no chat"),
    (["--adapter", "{adapter}"], "--adapter: must be absent with the openai engine"),
    (["--device", "cpu"], "--device: applies to --engine transformers, not openai"),
    (["--vllm-arg", "max_model_len=512"], "--vllm-arg: applies to --engine vllm, not openai"),
    (["--concurrency", "0"], "--concurrency: must be an integer >= 1, got 0"),
    (["--retries", "-1"], "--retries: must be an integer >= 0, got -1"),
    (["--request-timeout", "0"], "--request-timeout: must be > 0 seconds, got 0.0"),
])  # fmt: skip
def test_bad_server_or_flag_is_one_line_before_anything_is_written(
    flags: list[str],
    expected: str,
    tmp_path: Path,
    data_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "eval"
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with FakeOpenAIServer() as server:
        values = {
            "url": server.url,
            "url_without_v1": server.url.removesuffix("/v1"),
            "adapter": str(adapter),
        }
        argv = eval_argv(server.url, out, data_dir)
        for i, flag in enumerate(flags):
            argv += [flag.format(**values) if i % 2 else flag]
        assert cli(argv) == 2
        assert not [b for _, b in server.requests if b.get("max_tokens") == 6]
    message = capsys.readouterr().err
    assert message.count("\n") == 1
    assert expected.format(**values) in message, message
    assert not out.exists()


@pytest.mark.parametrize(("flags", "expected"), [
    (["--engine", "openai"], "--base-url: the openai engine needs the server's API root"),
    (["--base-url", "http://127.0.0.1:1/v1"],
     "--base-url: must be the server's API root with the openai engine, absent otherwise"),
    (["--stop", "</answer>"], "--stop: must be non-empty strings, with the vllm or openai"),
    (["--api", "chat"], "--api: must be given with the openai engine only"),
])  # fmt: skip
def test_engine_flags_that_do_not_fit_are_refused(
    flags: list[str],
    expected: str,
    tmp_path: Path,
    data_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "eval"
    argv = [
        "eval",
        "--model",
        "tiny-random",
        "--benchmarks",
        "gsm8k",
        "--limit",
        "1",
        "--data-dir",
        str(data_dir),
        "--output",
        str(out),
        "--quiet",
        *flags,
    ]
    assert cli(argv) == 2
    message = capsys.readouterr().err
    assert message.count("\n") == 1 and expected in message, message
    assert not out.exists()


def test_resume_refuses_another_engine(
    tmp_path: Path, data_dir: Path, reference: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eval"
    out.mkdir()
    for name in ("config.json", "samples.jsonl", "problems.jsonl"):
        (out / name).write_bytes((reference / name).read_bytes())
    argv = [
        "eval",
        "--model",
        MODEL,
        "--engine",
        "transformers",
        "--benchmarks",
        "gsm8k",
        "--limit",
        str(LIMIT + 1),
        "--n",
        str(N),
        "--max-new-tokens",
        "6",
        "--checking",
        "groupwise",
        "--data-dir",
        str(data_dir),
        "--output",
        str(out),
        "--quiet",
    ]
    assert cli(argv) == 2
    message = capsys.readouterr().err
    assert "engine: saved 'openai', now 'transformers'" in message
    assert "api: saved 'chat', now None" in message


def test_stop_strings_and_sampling_settings_reach_the_server() -> None:
    with FakeOpenAIServer() as server:
        engine = OpenAIEngine(server.url, MODEL, api="completions", concurrency=2)
        sampling = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=5, stop=("</answer>",))
        out = engine.sample(["a", "b"], 3, sampling, prompt_seeds=[10, 20])
        bodies = [b for _, b in server.requests if b.get("max_tokens") == 5]
    assert sorted((b["prompt"], b["seed"], b["n"]) for b in bodies) == [("a", 10, 3), ("b", 20, 3)]
    assert {(b["temperature"], b["top_p"], tuple(b["stop"]), b["logprobs"]) for b in bodies} == {
        (0.7, 0.9, ("</answer>",), 0)
    }
    assert out.texts == [choice_for(s, 5)[0] for s in (10, 11, 12, 20, 21, 22)]
    assert out.truncated == [choice_for(s, 5)[2] for s in (10, 11, 12, 20, 21, 22)]


def test_log_probs_of_given_text_from_the_echo() -> None:
    """mean_logp of given token ids = the mean of the echoed log-probs of the completion's
    positions; a server that does not echo is refused in one line."""
    with FakeOpenAIServer() as server:
        engine = OpenAIEngine(server.url, MODEL)
        engine.check_scoring([5, 6, 7], "<5><6><7>")
        got = engine.mean_logp([[1, 2], [3]], [[8, 9, 10], []])
        with pytest.raises(ServerError, match="reads the probe's token ids as '<5><6>', not"):
            engine.check_scoring([5, 6], "5 6")
    assert got[0] == pytest.approx(sum(echo_logprob(t) for t in (8, 9, 10)) / 3)
    assert got[1] is None
    with FakeOpenAIServer(echo=False) as server:
        engine = OpenAIEngine(server.url, MODEL, retries=0)
        with pytest.raises(
            ServerError,
            match=r"does not return log-probs of given text \(the "
            r"completions endpoint with echo and logprobs\)",
        ):
            engine.check_scoring([5, 6, 7], "<5><6><7>")
