"""Tests of `groupwise eval`: results vs samples, resume, config checks, adapters, end to end."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from groupwise.cli import main as cli
from groupwise.data import Problem
from groupwise.evaluation import EvalConfig, ResumeMismatch, evaluate
from groupwise.evaluation.command import add_arguments, config_from_args
from groupwise.evaluation.sampling import chunk_seed
from groupwise.metrics import pass_at_k
from groupwise.models import resolve_adapter
from groupwise.records import group_by_problem, read_samples
from groupwise.rewards import Verdict
from groupwise.rollout import Rollouts, SamplingParams

N = 4
# problem i has CORRECT[i] correct samples out of N; its other samples are wrong or unanswered
CORRECT = [0, 1, 2, 4]
PROBLEMS = [Problem(id=f"toy-{i}", question=f"q{i}", answer="7") for i in range(len(CORRECT))]


def completions_for(question: str, n: int) -> list[str]:
    c = CORRECT[int(question[1:])]
    return ["\\boxed{7}" if j < c else ("no idea" if j == n - 1 else "\\boxed{8}")
            for j in range(n)]


class FakeGenerator:
    """Deterministic completions from the prompt; records every call; can fail on call k."""

    def __init__(self, fail_on_call: int | None = None) -> None:
        self.calls: list[tuple[list[str], int, SamplingParams]] = []
        self.fail_on_call = fail_on_call

    def generate(self, prompts: Sequence[str], n: int, sampling: SamplingParams) -> Rollouts:
        if self.fail_on_call is not None and len(self.calls) + 1 == self.fail_on_call:
            raise RuntimeError("simulated crash")
        self.calls.append((list(prompts), n, sampling))
        texts = [t for p in prompts for t in completions_for(p, n)]
        rows, width = len(texts), 3
        mask = torch.ones(rows, width, dtype=torch.long)
        mask[0, 2] = 0  # the first completion of each call is 2 tokens long
        return Rollouts(prompt_ids=torch.ones(len(prompts), 2, dtype=torch.long),
                        prompt_mask=torch.ones(len(prompts), 2, dtype=torch.long),
                        completion_ids=torch.ones(rows, width, dtype=torch.long),
                        completion_mask=mask, texts=texts,
                        truncated=torch.zeros(rows, dtype=torch.bool), group_size=n)


def fake_check(texts: list[str], golds: list[str]) -> list[Verdict]:
    out = []
    for text, gold in zip(texts, golds, strict=True):
        if "boxed" not in text:
            out.append(Verdict("no_answer", None))
        else:
            answer = text[len("\\boxed{"):-1]
            out.append(Verdict("correct" if answer == gold else "wrong", answer))
    return out


def fake_logp(rollouts: Rollouts) -> torch.Tensor:
    return -0.5 * torch.arange(len(rollouts), dtype=torch.float32)


def run_eval(folder: Path, generator: FakeGenerator, **overrides: object) -> dict:
    settings = {"model": "fake", "benchmarks": ("toy",), "n": N, "ks": (1, 2, 4),
                "batch_size": N, **overrides}  # batch_size = N: one problem per generate call
    config = EvalConfig(**settings)  # type: ignore[arg-type]
    limit = config.limit or len(PROBLEMS)
    return evaluate(config, {"toy": PROBLEMS[:limit]}, generator, folder,
                    prompt_fn=lambda p: p.question, logp_fn=fake_logp, check_fn=fake_check,
                    progress=False)


def test_results_match_samples_and_hand_computed_pass_at_k(tmp_path: Path) -> None:
    results = run_eval(tmp_path, FakeGenerator())
    toy = results["toy"]
    # pass@1 = mean c/n = (0 + 1/4 + 2/4 + 4/4) / 4 = 0.4375
    assert toy["pass@1"] == pytest.approx(0.4375)
    # pass@2 per problem: 0; 1 - C(3,2)/C(4,2) = 1/2; 1 - C(2,2)/C(4,2) = 5/6; 1 -> mean 7/12
    assert toy["pass@2"] == pytest.approx((0 + 0.5 + 5 / 6 + 1) / 4)
    # pass@4 = fraction of problems with any correct sample = 3/4
    assert toy["pass@4"] == pytest.approx(0.75)
    assert toy["pass@1_ci"][0] <= toy["pass@1"] <= toy["pass@1_ci"][1]
    assert toy["n"] == N and toy["problems"] == 4
    # each problem with c < n has one unanswered sample: problems 0, 1, 2
    assert toy["no_answer"] == 3 and toy["timeouts"] == 0

    samples = read_samples(tmp_path / "samples.jsonl")
    assert len(samples) == 4 * N
    groups = group_by_problem(samples)
    counts = [sum(s.correct for s in g) for g in groups.values()]
    assert counts == CORRECT
    for k in (1, 2, 4):
        recomputed = sum(pass_at_k(N, c, k) for c in counts) / len(counts)
        assert toy[f"pass@{k}"] == pytest.approx(recomputed, abs=1e-12)
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["toy"]["pass@2"] == toy["pass@2"]
    assert on_disk["config"]["temperature"] == 0.6 and "temperature 1" in on_disk["config"]["note"]

    first = groups[("toy", "toy-1")]
    assert [s.sample for s in first] == [0, 1, 2, 3]
    assert first[0].completion == "\\boxed{7}" and first[0].extracted == "7"
    assert first[0].verdict == "correct" and first[0].gold == "7"
    assert first[0].tokens == 2 and first[1].tokens == 3  # completion_mask row sums
    assert [s.mean_logp for s in first] == [0.0, -0.5, -1.0, -1.5]  # fake_logp per row
    assert first[3].verdict == "no_answer" and first[3].extracted is None
    assert "| toy | 4 | 43.8 [" in (tmp_path / "results.md").read_text()
    assert (tmp_path / "results.png").stat().st_size > 0
    problems = [json.loads(x) for x in (tmp_path / "problems.jsonl").read_text().splitlines()]
    assert problems[0] == {"benchmark": "toy", "id": "toy-0", "question": "q0", "answer": "7",
                           "choices": None}


def test_resume_skips_done_problems(tmp_path: Path) -> None:
    crashing = FakeGenerator(fail_on_call=3)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_eval(tmp_path, crashing)
    assert len(crashing.calls) == 2
    # the two finished problems are on disk; simulate a torn append and a half-written problem
    with open(tmp_path / "samples.jsonl", "a") as f:
        stray = read_samples(tmp_path / "samples.jsonl")[0]
        partial = json.loads(stray.to_json()) | {"problem_id": "toy-2"}
        f.write(json.dumps(partial) + "\n" + '{"benchmark": "toy", "probl')
    resumed = FakeGenerator()
    results = run_eval(tmp_path, resumed)
    assert [c[0] for c in resumed.calls] == [["q2"], ["q3"]]  # only the undone problems
    # the resumed chunk is sampled with the seed an uninterrupted run would have used
    assert resumed.calls[0][2].seed == chunk_seed(0, "toy", 2)
    samples = read_samples(tmp_path / "samples.jsonl")
    assert len(samples) == 4 * N
    assert [sum(s.correct for s in g) for g in group_by_problem(samples).values()] == CORRECT
    assert results["toy"]["pass@4"] == pytest.approx(0.75)

    again = FakeGenerator()
    run_eval(tmp_path, again)
    assert again.calls == []
    # a larger limit or other ks do not change the samples: allowed, only new problems sampled
    more = FakeGenerator()
    results = run_eval(tmp_path, more, ks=(1, 3))
    assert more.calls == [] and "pass@3" in results["toy"] and "pass@2" not in results["toy"]
    # a smaller limit reports on the first problems only
    assert run_eval(tmp_path, FakeGenerator(), limit=2)["toy"]["problems"] == 2


def test_resume_refuses_other_sampling_settings(tmp_path: Path) -> None:
    run_eval(tmp_path, FakeGenerator(), limit=1)
    with pytest.raises(ResumeMismatch, match=r"temperature: saved 0.6, now 1.0"):
        run_eval(tmp_path, FakeGenerator(), temperature=1.0)
    with pytest.raises(ResumeMismatch, match=r"n: saved 4, now 8.*prompt: saved 'amir'"):
        run_eval(tmp_path, FakeGenerator(), n=8, prompt="boxed")
    orphan = tmp_path / "orphan"
    orphan.mkdir()
    (orphan / "samples.jsonl").write_text("")
    with pytest.raises(ResumeMismatch, match="no config.json"):
        run_eval(orphan, FakeGenerator())


def test_config_validation_and_presets() -> None:
    with pytest.raises(ValueError, match=r"every k must lie in 1..n=2"):
        EvalConfig(model="m", n=2, ks=(1, 4))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    paper = config_from_args(parser.parse_args(["--model", "m", "--output", "o"]))
    assert (paper.n, paper.ks, paper.temperature, paper.top_p, paper.max_new_tokens,
            paper.prompt) == (8, (1, 2, 4), 0.6, 1.0, 1024, "amir")
    assert paper.benchmarks[0] == "gsm8k" and len(paper.benchmarks) == 7
    lens = config_from_args(parser.parse_args(
        ["--model", "m", "--output", "o", "--preset", "lens", "--temperature", "0.8",
         "--benchmarks", "math500,livemathbench:hard_en"]))
    assert (lens.n, lens.ks, lens.temperature, lens.benchmarks) == (
        16, (1, 2, 4, 8, 16), 0.8, ("math500", "livemathbench:hard_en"))


def test_eval_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli(["eval", "--help"])
    assert exit_info.value.code == 0 and "--preset {amir,lens}" in capsys.readouterr().out


def test_resolve_adapter_layouts(tmp_path: Path) -> None:
    def adapter(folder: Path) -> Path:
        folder.mkdir(parents=True)
        (folder / "adapter_config.json").write_text("{}")
        return folder

    run = tmp_path / "run"
    adapter(run / "checkpoints" / "step-5" / "adapter")
    twelve = adapter(run / "checkpoints" / "step-12" / "adapter")
    assert resolve_adapter(run) == twelve  # numeric order, not text order
    assert resolve_adapter(run / "checkpoints" / "step-5") == run / "checkpoints/step-5/adapter"
    assert resolve_adapter(twelve) == twelve
    final = adapter(run / "final" / "adapter")
    assert resolve_adapter(run) == final
    full = tmp_path / "full"
    (full / "final" / "model").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="holds full weights: pass it as --model"):
        resolve_adapter(full)


def test_eval_end_to_end_tiny_random_with_adapter(tmp_path: Path, data_dir: Path) -> None:
    from groupwise.models import attach_lora, load_model

    model, _ = load_model("tiny-random")
    run = tmp_path / "run"
    attach_lora(model).save_pretrained(run / "checkpoints" / "step-3" / "adapter")
    out = tmp_path / "eval"
    argv = ["eval", "--model", "tiny-random", "--adapter", str(run), "--benchmarks", "gsm8k",
            "--limit", "2", "--n", "2", "--k", "1,2", "--max-new-tokens", "16", "--device",
            "cpu", "--data-dir", str(data_dir), "--quiet", "--output", str(out)]
    assert cli(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["gsm8k"]["problems"] == 2 and results["gsm8k"]["n"] == 2
    assert set(results["gsm8k"]) >= {"pass@1", "pass@1_ci", "pass@2", "pass@2_ci", "timeouts",
                                     "no_answer"}
    assert results["config"]["adapter"].endswith("checkpoints/step-3/adapter")
    samples = read_samples(out / "samples.jsonl")
    assert len(samples) == 4
    assert all(1 <= s.tokens <= 16 and s.mean_logp is not None and s.mean_logp < 0
               for s in samples)
    assert len({s.problem_id for s in samples}) == 2
    assert (out / "results.png").stat().st_size > 0 and (out / "results.md").is_file()
    before = (out / "samples.jsonl").read_text()
    assert cli(argv) == 0  # resume: nothing left to sample, same samples
    assert (out / "samples.jsonl").read_text() == before
    with pytest.raises(SystemExit, match="top_p: saved 1.0, now 0.9"):
        cli([*argv, "--top-p", "0.9"])
