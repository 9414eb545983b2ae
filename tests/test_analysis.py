"""Tests of groupwise.analysis: coverage, margin, perplexity, error analysis and its judges."""

from __future__ import annotations

import http.server
import json
import math
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from groupwise.analysis import error_position
from groupwise.analysis.coverage import coverage_partition, solvable_set
from groupwise.analysis.preference_margin import preference_margins, ratio_of_means, summarize
from groupwise.analysis.runs import common_problems, load_run, parse_run_specs
from groupwise.cli import main as cli
from groupwise.figures import gaussian_kde, scott_bandwidth
from groupwise.records import Sample, SavedProblem, group_by_problem, read_samples, write_problems


def sample(
    pid: str,
    index: int,
    correct: bool,
    mean_logp: float | None = -1.0,
    completion: str = "x",
    bench: str = "toy",
) -> Sample:
    return Sample(
        benchmark=bench,
        problem_id=pid,
        sample=index,
        completion=completion,
        extracted="1" if correct else "2",
        verdict="correct" if correct else "wrong",
        tokens=3,
        truncated=False,
        mean_logp=mean_logp,
        confidence=None,
        gold="1",
    )


def write_run(folder: Path, samples: list[Sample], config: dict | None = None) -> Path:
    """An eval folder as `groupwise eval` leaves it: samples, problems, config."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "samples.jsonl").write_text("".join(s.to_json() + "\n" for s in samples))
    keys = dict.fromkeys(s.key for s in samples)
    write_problems(
        folder / "problems.jsonl", [SavedProblem(b, p, f"What is 0 + {p}?", "1") for b, p in keys]
    )
    (folder / "config.json").write_text(json.dumps(config or {"model": "tiny-random"}))
    return folder


def solved_by(pids: set[str], all_pids: list[str], n: int = 4) -> list[Sample]:
    """n samples per problem; a solved problem has exactly ONE correct sample (the 'at least
    one' boundary)."""
    return [sample(p, i, p in pids and i == 2) for p in all_pids for i in range(n)]


# ----------------------------------------------------------------------------- samples


def test_sample_roundtrip_and_bad_lines(tmp_path: Path) -> None:
    s = sample("p1", 0, True, mean_logp=-0.25)
    path = tmp_path / "samples.jsonl"
    path.write_text(s.to_json() + "\n")
    assert read_samples(path) == [s]
    assert json.loads(s.to_json())["correct"] is True
    bad = json.loads(s.to_json())
    del bad["verdict"]
    path.write_text(s.to_json() + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match=r"samples.jsonl:2: missing field 'verdict'"):
        read_samples(path)
    bad = {**json.loads(s.to_json()), "verdict": "maybe"}
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match="expected one of correct, wrong"):
        read_samples(path)
    path.write_text(s.to_json() + "\n" + s.to_json() + "\n")
    with pytest.raises(ValueError, match="duplicate sample"):
        read_samples(path)
    # a crash mid-append leaves a torn last line: skipped with a warning
    path.write_text(s.to_json() + "\n" + s.to_json()[:20])
    with pytest.warns(UserWarning, match="torn"):
        assert read_samples(path) == [s]


def test_run_specs() -> None:
    assert parse_run_specs(["a=x/y", "z/w"]) == {"a": Path("x/y"), "w": Path("z/w")}
    with pytest.raises(ValueError, match="given twice"):
        parse_run_specs(["a=x", "a=y"])


# ----------------------------------------------------------------------------- coverage


def test_coverage_partition_hand_computed(tmp_path: Path) -> None:
    pids = [f"p{i}" for i in range(10)]
    runs = {
        "base": {"p0", "p1", "p2", "p3", "p5", "p7"},
        "grpo": {"p0", "p1", "p2", "p4", "p5"},
        "amir": {"p0", "p1", "p3", "p6", "p7"},
    }
    loaded = [load_run(n, write_run(tmp_path / n, solved_by(s, pids))) for n, s in runs.items()]
    problems = common_problems(loaded)
    solvable = {r.name: solvable_set(r, problems) for r in loaded}
    assert solvable["grpo"] == {("toy", p) for p in runs["grpo"]}
    cells = coverage_partition(solvable, problems)
    by_pattern = {c.solved: (c.count, c.percent) for c in cells}
    # union = p0..p7 = 8 problems; p8, p9 solved by none
    assert by_pattern == {
        (True, True, True): (2, 25.0),  # p0 p1
        (True, True, False): (2, 25.0),  # p2 p5
        (True, False, True): (2, 25.0),  # p3 p7
        (False, True, True): (0, 0.0),
        (True, False, False): (0, 0.0),
        (False, True, False): (1, 12.5),  # p4
        (False, False, True): (1, 12.5),  # p6
        (False, False, False): (2, None),  # p8 p9, outside the union
    }
    assert sum(c.percent for c in cells if c.percent is not None) == pytest.approx(100.0)
    assert sum(c.count for c in cells) == len(pids)
    assert cells[0].solved == (True, True, True) and cells[-1].solved == (False, False, False)
    assert cells[1].label(["base", "grpo", "amir"]) == "base & grpo only"

    out = tmp_path / "cov"
    assert (
        cli(["analyze", "coverage", *(f"{n}={tmp_path / n}" for n in runs), "--output", str(out)])
        == 0
    )
    data = json.loads((out / "coverage.json").read_text())
    assert data["union_solvable"] == 8 and data["problems"] == 10
    assert data["cells"][0] == {
        "label": "base & grpo & amir only",
        "solved": {"base": True, "grpo": True, "amir": True},
        "count": 2,
        "percent": 25.0,
    }
    assert (out / "coverage.png").stat().st_size > 0
    assert (out / "coverage.csv").read_text().splitlines()[1] == "1,1,1,2,25.00"


def test_coverage_two_runs_and_nothing_solvable() -> None:
    keys = [("b", "1"), ("b", "2")]
    cells = coverage_partition({"x": set(), "y": set()}, keys)
    assert [c.percent for c in cells] == [0.0, 0.0, 0.0, None]
    assert cells[-1].count == 2
    with pytest.raises(ValueError, match="not in the problem list"):
        coverage_partition({"x": {("b", "3")}, "y": set()}, keys)


# ----------------------------------------------------------------------------- margin


def test_preference_margins_hand_computed(tmp_path: Path) -> None:
    samples = [
        # A: correct -0.5, -0.7 (mean -0.6); incorrect -1.0 -> margin 0.4
        sample("A", 0, True, -0.5),
        sample("A", 1, True, -0.7),
        sample("A", 2, False, -1.0),
        # B: all correct -> no margin
        sample("B", 0, True, -0.3),
        sample("B", 1, True, -0.4),
        # C: correct -0.2; incorrect -0.3, -0.5 (mean -0.4), an empty one (None) left out
        # -> margin 0.2
        sample("C", 0, True, -0.2),
        sample("C", 1, False, -0.3),
        sample("C", 2, False, -0.5),
        sample("C", 3, False, None),
        # D: all wrong -> no margin
        sample("D", 0, False, -2.0),
    ]
    margins = preference_margins(group_by_problem(samples))
    assert margins.keys() == {("toy", "A"), ("toy", "C")}
    assert margins[("toy", "A")] == pytest.approx(0.4)
    assert margins[("toy", "C")] == pytest.approx(0.2)
    stats = summarize(list(margins.values()))
    assert stats["mean"] == pytest.approx(0.3) and stats["median"] == pytest.approx(0.3)
    assert stats["positive"] == 1.0 and stats["problems"] == 2
    # second run: one problem with margin -0.1 - (-1.0) = 0.9 -> ratio 0.9 / 0.3 = 3
    other = [sample("A", 0, True, -0.1), sample("A", 1, False, -1.0)]
    assert ratio_of_means({"grpo": 0.3, "amir": 0.9})["amir"] == pytest.approx(3.0)
    assert ratio_of_means({"grpo": 0.0, "amir": 0.9})["amir"] is None
    assert ratio_of_means({"grpo": -0.2, "amir": 0.9}) == {"grpo": None, "amir": None}

    write_run(tmp_path / "grpo", samples)
    write_run(tmp_path / "amir", other)
    out = tmp_path / "margin"
    assert (
        cli(
            [
                "analyze",
                "margin",
                f"grpo={tmp_path / 'grpo'}",
                f"amir={tmp_path / 'amir'}",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    data = json.loads((out / "margin.json").read_text())
    assert data["ratio_of_means_to_first"]["amir"] == pytest.approx(3.0)
    assert data["ratio_of_means_to_first"]["grpo"] == pytest.approx(1.0)
    assert data["runs"]["grpo"]["mean"] == pytest.approx(0.3)
    # 2 and 1 margins are numbers, not a distribution: no density is drawn from them
    assert not (out / "margin.png").exists()
    assert "no run has enough margins" in (out / "margin.not-drawn.txt").read_text()


# ----------------------------------------------------------------------------- KDE


def test_gaussian_kde_values_and_mass() -> None:
    # one point at 0.5 with h = 0.1: density at 0.5 is 1/(0.1 sqrt(2 pi)) = 3.98942...
    grid = np.array([0.5, 0.6])
    values = gaussian_kde([0.5], grid, bandwidth=0.1)
    assert values[0] == pytest.approx(1 / (0.1 * math.sqrt(2 * math.pi)))
    assert values[1] == pytest.approx(values[0] * math.exp(-0.5))
    wide = np.linspace(-3, 4, 7001)
    dens = gaussian_kde([0.1, 0.4, 0.45, 0.9], wide)
    assert np.sum(dens) * (wide[1] - wide[0]) == pytest.approx(1.0, abs=1e-4)
    # Scott's rule: sd(ddof=1) * n^(-1/5); sd of [0, 1] is sqrt(0.5)
    assert scott_bandwidth([0.0, 1.0]) == pytest.approx(math.sqrt(0.5) * 2**-0.2)
    assert not gaussian_kde([], grid).any()


# ----------------------------------------------------------------------------- perplexity


@pytest.fixture(scope="module")
def tiny() -> tuple:
    from groupwise.models import load_model

    return load_model("tiny-random", seed=0)


def test_perplexity_is_exp_of_minus_mean_logp() -> None:
    from groupwise.analysis.perplexity import perplexity

    # tokens of probability 1/2 and 1/8: mean log-prob (ln 1/2 + ln 1/8) / 2 = -2 ln 2 -> PPL 4
    assert perplexity((math.log(0.5) + math.log(0.125)) / 2) == pytest.approx(4.0)
    assert perplexity(0.0) == 1.0


def test_perplexity_strata_and_command(tmp_path: Path) -> None:
    from groupwise.analysis.perplexity import strata

    def run_samples(acc: dict[str, int]) -> list[Sample]:
        return [
            sample(p, i, i < c, mean_logp=-0.1 * (i + 1)) for p, c in acc.items() for i in range(4)
        ]

    # correct counts of 4: S solved by all (4, 4); U unsolved by both; M mixed
    a = load_run("grpo", write_run(tmp_path / "grpo", run_samples({"S": 4, "U": 0, "M": 4})))
    b = load_run("amir", write_run(tmp_path / "amir", run_samples({"S": 4, "U": 0, "M": 1})))
    split = strata([a, b])
    assert split == {"jointly solvable": [("toy", "S")], "jointly unsolved": [("toy", "U")]}
    assert strata([a, b], solvable_fraction=0.25)["jointly solvable"] == [
        ("toy", "S"),
        ("toy", "M"),
    ]
    out = tmp_path / "ppl"
    assert (
        cli(
            [
                "analyze",
                "perplexity",
                f"grpo={tmp_path / 'grpo'}",
                f"amir={tmp_path / 'amir'}",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    data = json.loads((out / "perplexity.json").read_text())
    stats = data["stats"]["jointly solvable"]["grpo"]
    # PPL = exp(-mean_logp) of the 4 rollouts of S: exp(0.1), exp(0.2), exp(0.3), exp(0.4)
    assert stats["rollouts"] == 4
    assert stats["median"] == pytest.approx(np.median(np.exp([0.1, 0.2, 0.3, 0.4])))
    assert (out / "perplexity.png").stat().st_size > 0

    # scored again under one fixed model: a random model over ~49k tokens is nearly uniform
    assert (
        cli(
            [
                "analyze",
                "perplexity",
                f"grpo={tmp_path / 'grpo'}",
                "--model",
                "tiny-random",
                "--device",
                "cpu",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    data = json.loads((out / "perplexity.json").read_text())
    assert data["source"] == "model tiny-random"
    stats = data["stats"]["jointly solvable"]["grpo"]
    assert stats["rollouts"] == 8 and 1e3 < stats["median"] < 1e6  # S and M: 4 + 4


def test_rescore_renders_prompt_and_appends_eos(tiny: tuple) -> None:
    from groupwise.analysis.rescoring import rescore
    from groupwise.completion_logprobs import ModelScorer, completion_mean_logp
    from groupwise.data import Problem
    from groupwise.data.prompts import render_prompt

    model, tokenizer = tiny
    problem = SavedProblem("toy", "p", "What is 2 + 3?", "5")
    finished = Sample("toy", "p", 0, "It is 5.", "5", "correct", 4, False, None, None, "5")
    cut = Sample("toy", "p", 1, "It is", None, "no_answer", 2, True, None, None, "5")
    scorer = ModelScorer(model, tokenizer.pad_token_id, batch_size=1)
    got = rescore(scorer, tokenizer, [finished, cut], {problem.key: problem}, "boxed")
    prompt = tokenizer(
        render_prompt(Problem(id="p", question="What is 2 + 3?", answer="5"), "boxed", tokenizer),
        add_special_tokens=False,
    ).input_ids
    for s, value in zip([finished, cut], got, strict=True):
        ids = tokenizer(s.completion, add_special_tokens=False).input_ids
        ids = ids if s.truncated else [*ids, tokenizer.eos_token_id]
        expected = completion_mean_logp(
            model,
            torch.tensor([prompt]),
            torch.ones(1, len(prompt), dtype=torch.long),
            torch.tensor([ids]),
            torch.ones(1, len(ids), dtype=torch.long),
        )
        assert value == pytest.approx(float(expected[0]), abs=1e-5)


# ----------------------------------------------------------------------------- segmentation


def test_segment_steps_rule() -> None:
    amir = (
        "<think>\nLet x be the number.\n\nThen 2x = 10.\n\nSo x = 5.\n</think>\n"
        "<answer> \\boxed{5} </answer> <analysis> fine </analysis> "
        "<confidence> 0.9 </confidence>"
    )
    assert error_position.segment_steps(amir) == [
        "Let x be the number.",
        "Then 2x = 10.",
        "So x = 5.",
        "Final answer: \\boxed{5}",
    ]
    # fewer than 3 paragraphs -> lines
    lines = "We add 2 and 3.\nThat gives 5.\nSo the answer is \\boxed{5}."
    assert error_position.segment_steps(lines) == [
        "We add 2 and 3.",
        "That gives 5.",
        "So the answer is \\boxed{5}.",
    ]
    # one line -> sentences; a decimal point is not a sentence end
    one = "We add 2.5 and 3. That gives 5.5! Done?"
    assert error_position.segment_steps(one) == ["We add 2.5 and 3.", "That gives 5.5!", "Done?"]
    # an unclosed <think> (truncated) runs to the end; no answer block -> no final step
    assert error_position.segment_steps("<think>a\n\nb\n\nc\n\nd") == ["a", "b", "c", "d"]
    assert error_position.segment_steps("") == []
    assert error_position.segment_steps("short", min_steps=1) == ["short"]


# ----------------------------------------------------------------------------- judge protocol

TAXONOMY = error_position.load_taxonomy()


def test_default_taxonomy_and_bad_taxonomy(tmp_path: Path) -> None:
    assert [t.name for t in TAXONOMY] == [
        "problem misreading",
        "wrong formulation",
        "arithmetic slip",
        "algebraic manipulation error",
        "logical leap",
        "incomplete answer",
        "answer extraction/format",
    ]
    assert all(t.description for t in TAXONOMY)
    bad = tmp_path / "t.yaml"
    bad.write_text("types:\n  - name: a\n  - name: A\n")
    with pytest.raises(ValueError, match="duplicate name 'A'"):
        error_position.load_taxonomy(bad)
    bad.write_text("kinds: []\n")
    with pytest.raises(ValueError, match="non-empty list `types`"):
        error_position.load_taxonomy(bad)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"step": 2, "type": "arithmetic slip"}', (2, "arithmetic slip")),
        ('Here you go:\n```json\n{"Step": "3", "Type": "Logical_Leap"}\n```', (3, "logical leap")),
        (
            '{"note": 1} then {"step": 1, "error_type": "answer extraction/format"}',
            (1, "answer extraction/format"),
        ),
        ("{'step': 4, 'type': 'wrong formulation'}", (4, "wrong formulation")),
        ('{"step": 2.0, "type": "arithmetic slip"}', (2, "arithmetic slip")),
        # prose naming exactly one step and one type (a small local judge answered this)
        ('The first erroneous step is "problem misreading" (step 1).', (1, "problem misreading")),
    ],
)
def test_parse_judgement_accepts(reply: str, expected: tuple[int, str]) -> None:
    got = error_position.parse_judgement(reply, num_steps=4, taxonomy=TAXONOMY)
    assert (got.step, got.type) == expected


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("The solution looks fine to me.", "no step/type"),
        ('{"step": 5, "type": "arithmetic slip"}', "outside 1..4"),
        ('{"step": 0, "type": "arithmetic slip"}', "outside 1..4"),
        ('{"step": 2, "type": "bad vibes"}', "not in the taxonomy"),
        ('{"step": "two", "type": "arithmetic slip"}', "not an integer"),
        ('{"step": 2.5, "type": "arithmetic slip"}', "not an integer"),
        # prose with two candidate steps or two types is ambiguous
        ("Step 1 looks fine, step 2 has an arithmetic slip.", "no step/type"),
        ("Step 2: a logical leap or an arithmetic slip.", "no step/type"),
    ],
)
def test_parse_judgement_rejects(reply: str, why: str) -> None:
    with pytest.raises(error_position.JudgeAnswerError, match=why):
        error_position.parse_judgement(reply, num_steps=4, taxonomy=TAXONOMY)


def test_judge_messages_name_steps_and_types() -> None:
    messages = error_position.judge_messages("What is 1+1?", "2", ["1+1=3", "so 3"], TAXONOMY)
    user = messages[1]["content"]
    assert "Step 1: 1+1=3\nStep 2: so 3" in user and "Reference answer: 2" in user
    assert all(f'"{t.name}"' in user for t in TAXONOMY)
    assert "integer from 1 to 2" in user


# ----------------------------------------------------------------------------- HTTP judge


class _JudgeServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    requests_by_model: dict[str, int]


class _Handler(http.server.BaseHTTPRequestHandler):
    """OpenAI chat completions; the requested "model" picks the behaviour."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        model = body["model"]
        server: _JudgeServer = self.server  # type: ignore[assignment]
        server.requests_by_model[model] = server.requests_by_model.get(model, 0) + 1
        assert self.path == "/v1/chat/completions"
        assert body["messages"][0]["role"] == "system"
        if model == "slow":
            time.sleep(1.0)
        if model == "error500":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"overloaded")
            return
        if model == "unauthorized":
            self.send_response(401)
            self.end_headers()
            return
        content = {
            "valid": 'Sure. {"step": 2, "type": "arithmetic slip"}',
            "garbage": "I cannot decide, the solution is lovely.",
        }.get(model, "?")
        payload = json.dumps(
            {"choices": [{"message": {"role": "assistant", "content": content}}]}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def judge_server():
    server = _JudgeServer(("127.0.0.1", 0), _Handler)
    server.requests_by_model = {}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


def _ask(server: _JudgeServer, model: str, attempts: int = 3, timeout: float = 5.0):
    judge = error_position.OpenAIChatJudge(
        f"http://127.0.0.1:{server.server_port}/v1", model, api_key="k", timeout=timeout
    )
    messages = error_position.judge_messages("q", "1", ["a", "b", "c"], TAXONOMY)
    sleeps: list[float] = []
    outcome = error_position.judge_solution(
        judge, messages, 3, TAXONOMY, attempts=attempts, backoff=0.5, sleep=sleeps.append
    )
    return outcome, sleeps


def test_http_judge_valid_garbage_timeout_errors(judge_server: _JudgeServer) -> None:
    counts = judge_server.requests_by_model
    outcome, sleeps = _ask(judge_server, "valid")
    assert outcome.judgement == error_position.Judgement(2, "arithmetic slip")
    assert outcome.attempts == 1 and outcome.error is None and sleeps == []

    outcome, sleeps = _ask(judge_server, "garbage")
    assert outcome.judgement is None and outcome.attempts == 3
    assert outcome.error.startswith("answer: no step/type")
    assert counts["garbage"] == 3 and sleeps == [0.5, 1.0]  # bounded, exponential backoff

    start = time.monotonic()
    outcome, _ = _ask(judge_server, "slow", attempts=2, timeout=0.2)
    assert time.monotonic() - start < 0.9  # gave up at the timeout, twice, not after 2 x 1 s
    assert outcome.judgement is None and outcome.error.startswith("transport: ")
    assert "timed out" in outcome.error.lower()
    assert counts["slow"] == 2

    outcome, _ = _ask(judge_server, "error500", attempts=2)
    assert outcome.attempts == 2 and "HTTP 500" in outcome.error
    outcome, _ = _ask(judge_server, "unauthorized", attempts=3)  # not retryable
    assert outcome.attempts == 1 and "HTTP 401" in outcome.error
    assert counts["unauthorized"] == 1


def test_http_judge_connection_refused() -> None:
    judge = error_position.OpenAIChatJudge("http://127.0.0.1:9/v1", "m", timeout=1.0)
    outcome = error_position.judge_solution(
        judge, [{"role": "user", "content": "x"}], 1, TAXONOMY, attempts=2, backoff=0.0
    )
    assert outcome.judgement is None and outcome.attempts == 2
    assert outcome.error.startswith("transport: URLError")


def _error_runs(tmp_path: Path) -> list[str]:
    wrong = "<think>\nWe add.\n\nWe get 3.\n\nSo 3.\n</think>\n<answer> 3 </answer>"
    samples = [
        sample("A", 0, True, completion="fine"),
        sample("A", 1, False, completion=wrong),
        sample("B", 0, False, completion=wrong + " "),
        sample("B", 1, False, completion=""),
    ]
    write_run(tmp_path / "grpo", samples)
    write_run(tmp_path / "amir", samples[:2])
    return [f"grpo={tmp_path / 'grpo'}", f"amir={tmp_path / 'amir'}"]


def test_errors_command_with_http_judge_caches_and_counts_failures(
    tmp_path: Path, judge_server: _JudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_JUDGE_KEY", "secret")
    runs = _error_runs(tmp_path)
    url = f"http://127.0.0.1:{judge_server.server_port}/v1"
    out = tmp_path / "err"
    argv = [
        "analyze",
        "errors",
        *runs,
        "--judge-base-url",
        url,
        "--judge-model",
        "valid",
        "--judge-api-key-env",
        "TEST_JUDGE_KEY",
        "--judge-backoff",
        "0",
        "--output",
        str(out),
    ]
    before = judge_server.requests_by_model.get("valid", 0)
    assert cli(argv) == 0
    data = json.loads((out / "errors.json").read_text())
    grpo = data["runs"]["grpo"]
    # 3 incorrect in grpo: two judgeable (4 steps each; step 2 -> position 0.5), one empty
    assert grpo["solutions"] == 3 and grpo["judged"] == 2 and grpo["judge_failures"] == 1
    assert grpo["failed"][0]["error"] == "empty solution: no steps"
    assert grpo["relative_positions"] == [0.5, 0.5]
    assert grpo["types"]["arithmetic slip"] == 2
    grid, dens = np.array(grpo["density"]["grid"]), np.array(grpo["density"]["values"])
    assert grid[np.argmax(dens)] == pytest.approx(0.5)
    assert data["runs"]["amir"]["judged"] == 1
    # amir's wrong sample is grpo's A/1 word for word: one question, asked once (2 distinct)
    asked = judge_server.requests_by_model["valid"] - before
    assert asked == 2
    assert (out / "errors_types.png").stat().st_size > 0
    # 2 and 1 judged positions are no distribution: the density is not drawn, and says why
    assert not (out / "errors_position.png").exists()
    assert "no run has 5 judged solutions" in (out / "errors_position.not-drawn.txt").read_text()
    # rerun: every judgement comes from the cache
    assert cli(argv) == 0
    assert judge_server.requests_by_model["valid"] - before == asked

    # garbage judge: every judgeable solution becomes a counted failure, none dropped
    out = tmp_path / "err-garbage"
    assert (
        cli(
            [
                "analyze",
                "errors",
                *runs,
                "--judge-base-url",
                url,
                "--judge-model",
                "garbage",
                "--judge-attempts",
                "2",
                "--judge-backoff",
                "0",
                "--output",
                str(out),
            ]
        )
        == 1  # nothing judged: the command did not do what it was asked
    )
    grpo = json.loads((out / "errors.json").read_text())["runs"]["grpo"]
    assert grpo["judged"] == 0 and grpo["judge_failures"] == 3
    assert grpo["failure_reasons"] == {"answer": 2, "empty solution": 1}
    assert grpo["mean_relative_position"] is None


def test_errors_command_with_local_judge_counts_garbage(tmp_path: Path) -> None:
    runs = _error_runs(tmp_path)
    out = tmp_path / "err-local"
    assert (
        cli(
            [
                "analyze",
                "errors",
                *runs,
                "--judge-local",
                "tiny-random",
                "--judge-max-new-tokens",
                "6",
                "--device",
                "cpu",
                "--output",
                str(out),
            ]
        )
        == 1  # every judge answer unusable: nothing judged
    )
    data = json.loads((out / "errors.json").read_text())
    assert data["judge"] == "local:tiny-random"
    grpo = data["runs"]["grpo"]
    # a random model answers garbage: counted as failures after ONE try (greedy is deterministic)
    assert grpo["solutions"] == 3 and grpo["judged"] == 0 and grpo["judge_failures"] == 3
    records = [json.loads(line) for line in (out / "judgements.jsonl").read_text().splitlines()]
    assert records and all(r["attempts"] == 1 and r["step"] is None for r in records)


@pytest.mark.parametrize("analysis", ["perplexity", "coverage", "margin", "errors", "--help"])
def test_analyze_help(analysis: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["analyze", "--help"] if analysis == "--help" else ["analyze", analysis, "--help"]
    with pytest.raises(SystemExit) as exit_info:
        cli(argv)
    assert exit_info.value.code == 0 and "usage: groupwise analyze" in capsys.readouterr().out


@pytest.mark.parametrize("analysis", ["coverage", "perplexity", "margin"])
def test_analyze_warns_when_a_run_has_fewer_samples_than_the_protocol(
    tmp_path: Path, analysis: str
) -> None:
    pids = ["p0", "p1"]
    few = write_run(
        tmp_path / "few", [sample(p, i, i == 0, mean_logp=-0.5 - i) for p in pids for i in range(4)]
    )
    full = write_run(
        tmp_path / "full",
        [sample(p, i, i == 0, mean_logp=-0.5 - i) for p in pids for i in range(16)],
    )
    argv = ["analyze", analysis, f"few={few}", f"full={full}", "--output", str(tmp_path / "out")]
    if analysis == "perplexity":  # one correct sample in 4 and in 16: both runs solve both
        argv += ["--solvable-fraction", "0.05"]
    if analysis == "margin":  # the paper states no sample count for it: nothing to warn about
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert cli(argv) == 0
        return
    with pytest.warns(UserWarning) as caught:
        assert cli(argv) == 0
    messages = [str(w.message) for w in caught if "protocol" in str(w.message)]
    assert messages == [
        f"analyze {analysis}: run 'few' ({few}) has 4 samples per problem; "
        "the paper's protocol uses 16 (groupwise eval --n)"
    ]
