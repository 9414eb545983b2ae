"""Tests of `groupwise eval`: results vs samples, resume, config checks, adapters, end to end."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import pytest
import torch

from groupwise.cli import main as cli
from groupwise.data import Problem
from groupwise.evaluation import EvalConfig, ResumeMismatch, evaluate
from groupwise.evaluation.command import add_arguments, answer_checker, config_from_args
from groupwise.evaluation.folder import check_folder
from groupwise.evaluation.sampling import problem_seed
from groupwise.metrics import pass_at_k
from groupwise.models import resolve_adapter
from groupwise.records import Sample, group_by_problem, read_samples
from groupwise.rewards import Verdict
from groupwise.rollout import Rollouts, SamplingParams

N = 4
# problem i has CORRECT[i] correct samples out of N; its other samples are wrong or unanswered
CORRECT = [0, 1, 2, 4]
PROBLEMS = [Problem(id=f"toy-{i}", question=f"q{i}", answer="7") for i in range(len(CORRECT))]


def completions_for(question: str, n: int) -> list[str]:
    c = CORRECT[int(question[1:])]
    return [
        "\\boxed{7}" if j < c else ("no idea" if j == n - 1 else "\\boxed{8}") for j in range(n)
    ]


class FakeGenerator:
    """Deterministic completions from the prompt; records every call; can fail on call k."""

    def __init__(self, fail_on_call: int | None = None) -> None:
        self.calls: list[tuple[list[str], int, SamplingParams, list[int] | None]] = []
        self.fail_on_call = fail_on_call

    def generate(
        self,
        prompts: Sequence[str],
        n: int,
        sampling: SamplingParams,
        prompt_seeds: Sequence[int] | None = None,
    ) -> Rollouts:
        if self.fail_on_call is not None and len(self.calls) + 1 == self.fail_on_call:
            raise RuntimeError("simulated crash")
        self.calls.append(
            (list(prompts), n, sampling, None if prompt_seeds is None else list(prompt_seeds))
        )
        texts = [t for p in prompts for t in completions_for(p, n)]
        rows, width = len(texts), 3
        mask = torch.ones(rows, width, dtype=torch.long)
        mask[0, 2] = 0  # the first completion of each call is 2 tokens long
        return Rollouts(
            prompt_ids=torch.ones(len(prompts), 2, dtype=torch.long),
            prompt_mask=torch.ones(len(prompts), 2, dtype=torch.long),
            completion_ids=torch.ones(rows, width, dtype=torch.long),
            completion_mask=mask,
            texts=texts,
            truncated=torch.zeros(rows, dtype=torch.bool),
            group_size=n,
        )


def fake_check(texts: list[str], golds: list[str]) -> list[Verdict]:
    out = []
    for text, gold in zip(texts, golds, strict=True):
        if "boxed" not in text:
            out.append(Verdict("no_answer", None))
        else:
            answer = text[len("\\boxed{") : -1]
            out.append(Verdict("correct" if answer == gold else "wrong", answer))
    return out


def fake_logp(rollouts: Rollouts) -> torch.Tensor:
    return -0.5 * torch.arange(len(rollouts), dtype=torch.float32)


def run_eval(folder: Path, generator: FakeGenerator, **overrides: object) -> dict:
    settings = {
        "model": "fake",
        "benchmarks": ("toy",),
        "n": N,
        "ks": (1, 2, 4),
        "batch_size": N,
        **overrides,
    }  # batch_size = N: one problem per generate call
    config = EvalConfig(**settings)  # type: ignore[arg-type]
    limit = config.limit or len(PROBLEMS)
    return evaluate(
        config,
        {"toy": PROBLEMS[:limit]},
        generator,
        folder,
        prompt_fn=lambda p: p.question,
        logp_fn=fake_logp,
        check_fn=fake_check,
        progress=False,
    )


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
    assert problems[0] == {
        "benchmark": "toy",
        "id": "toy-0",
        "question": "q0",
        "answer": "7",
        "choices": None,
        "level": None,
    }
    assert "levels" not in toy  # no problem of toy carries a difficulty level


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
    # each problem is sampled from its own stream, seeded by (seed, benchmark, problem id)
    assert resumed.calls[0][3] == [problem_seed(0, "toy", "toy-2")]
    assert problem_seed(0, "toy", "toy-2") not in (
        problem_seed(1, "toy", "toy-2"),
        problem_seed(0, "toy", "toy-3"),
        problem_seed(0, "toy2", "toy-2"),
    )
    assert 0 <= problem_seed(0, "toy", "toy-2") < 2**63
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
    (orphan / "samples.jsonl").write_text((tmp_path / "samples.jsonl").read_text())
    with pytest.raises(ResumeMismatch, match="no config.json"):
        run_eval(orphan, FakeGenerator())
    # a folder sampled before samples were seeded per problem is not resumed into a mix
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved["seeding"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ResumeMismatch, match=r"seeding: saved None, now 'per-problem'"):
        run_eval(tmp_path, FakeGenerator(), limit=1)


def test_config_validation_and_presets() -> None:
    with pytest.raises(ValueError, match=re.escape("ks: must be integers in 1..n=2, got [1, 4]")):
        EvalConfig(model="m", n=2, ks=(1, 4))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    paper = config_from_args(parser.parse_args(["--model", "m", "--output", "o"]))
    assert (
        paper.n,
        paper.ks,
        paper.temperature,
        paper.top_p,
        paper.max_new_tokens,
        paper.prompt,
    ) == (8, (1, 2, 4), 0.6, 1.0, 1024, "amir")
    assert paper.benchmarks[0] == "gsm8k" and len(paper.benchmarks) == 7
    assert "aqua@format=official" in paper.benchmarks  # as the paper's numbers were measured
    assert paper.checking == "amir_eval"
    lens = config_from_args(
        parser.parse_args(
            [
                "--model",
                "m",
                "--output",
                "o",
                "--preset",
                "lens",
                "--temperature",
                "0.8",
                "--benchmarks",
                "math500,livemathbench:hard_en",
            ]
        )
    )
    assert (lens.n, lens.ks, lens.temperature, lens.benchmarks) == (
        16,
        (1, 2, 4, 8, 16),
        0.8,
        ("math500", "livemathbench:hard_en"),
    )


def test_results_per_level_and_levels_4_5_hand_computed(tmp_path: Path) -> None:
    # CORRECT = [0, 1, 2, 4] of N = 4; levels as MATH ("Level 5") and MATH-500 (4) write them
    levels = ["Level 5", 4, "Level 1", "Level 4"]
    leveled = [
        dataclasses.replace(p, meta={"level": lv}) for p, lv in zip(PROBLEMS, levels, strict=True)
    ]
    config = EvalConfig(model="fake", benchmarks=("toy",), n=N, ks=(1, 2, 4), batch_size=N)
    results = evaluate(
        config,
        {"toy": leveled},
        FakeGenerator(),
        tmp_path,
        prompt_fn=lambda p: p.question,
        check_fn=fake_check,
        progress=False,
    )
    by_level = results["toy"]["levels"]
    assert list(by_level) == ["1", "4", "5", "4-5"]
    assert [by_level[lv]["problems"] for lv in by_level] == [1, 2, 1, 3]
    # level 1: c = 2 -> pass@1 = 1/2, pass@2 = 1 - C(2,2)/C(4,2) = 5/6
    assert (by_level["1"]["pass@1"], by_level["1"]["pass@2"]) == pytest.approx((0.5, 5 / 6))
    # level 4: c = 1 and 4 -> pass@1 = (1/4 + 1) / 2; level 5: c = 0
    assert by_level["4"]["pass@1"] == pytest.approx(0.625) and by_level["5"]["pass@4"] == 0.0
    # Levels 4-5: c = 0, 1, 4 -> pass@1 = 5/12, pass@2 = (0 + 1/2 + 1) / 3, pass@4 = 2/3
    assert [by_level["4-5"][f"pass@{k}"] for k in (1, 2, 4)] == pytest.approx([5 / 12, 0.5, 2 / 3])
    lo, hi = by_level["4-5"]["pass@1_ci"]
    assert lo <= 5 / 12 <= hi
    assert json.loads((tmp_path / "results.json").read_text())["toy"]["levels"] == by_level
    markdown = (tmp_path / "results.md").read_text()
    assert "toy by MATH difficulty level:" in markdown
    assert "| Levels 4-5 | 3 | 41.7 [" in markdown and "| Level 1 | 1 | 50.0 [" in markdown
    assert (tmp_path / "results.png").stat().st_size > 0
    saved = [json.loads(x) for x in (tmp_path / "problems.jsonl").read_text().splitlines()]
    assert [p["level"] for p in saved] == [5, 4, 1, 4]


def test_lens_preset_is_the_lens_protocol() -> None:
    """docs/algorithms.md §3: n 16, k 1..16, temperature 1.0, top-p 1.0, 4096 new tokens; curves on
    MATH-500 (and its Levels 4-5, from the per-level results)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    lens = config_from_args(
        parser.parse_args(["--model", "m", "--output", "o", "--preset", "lens"])
    )
    assert lens.benchmarks == ("math500",)
    assert (lens.n, lens.ks) == (16, (1, 2, 4, 8, 16))
    assert (lens.temperature, lens.top_p, lens.max_new_tokens) == (1.0, 1.0, 4096)
    assert lens.prompt == "boxed" and lens.checking == "math_verify"


def test_checking_selects_how_answers_are_checked() -> None:
    """The checking modes of train's reward.checking: amir_eval (AMIR-GRPO's grader) gives
    nothing without an <answer> block; groupwise reads the box anywhere; math_verify is
    Math-Verify on the whole completion; amir_official reads the last box or number."""
    boxed = "So the total is \\boxed{42}."
    tagged = "<think>6 * 7</think> <answer> \\boxed{42} </answer>"
    verdicts = {}
    for mode in ("amir_eval", "groupwise", "math_verify", "amir_official"):
        check = answer_checker(EvalConfig(model="m", checking=mode), workers=1)
        verdicts[mode] = [v.correct for v in check([boxed, tagged], ["42", "42"])]
    assert verdicts == {
        "amir_eval": [False, True],
        "groupwise": [True, True],
        "math_verify": [True, True],
        "amir_official": [True, True],
    }
    with pytest.raises(ValueError, match="checking: must be one of groupwise, math_verify"):
        EvalConfig(model="m", checking="strict")


def test_former_grading_flag_and_folders_map_to_checking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--grading official | lenient | math_verify was --checking's first name: it still works,
    says the new name, and a folder that saved "grading" resumes under the same checking."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    former = {"official": "amir_eval", "lenient": "groupwise", "math_verify": "math_verify"}
    for grading, mode in former.items():
        args = parser.parse_args(["--model", "m", "--output", "o", "--grading", grading])
        assert config_from_args(args).checking == mode
        assert f"--grading {grading} is now --checking {mode}" in capsys.readouterr().err
    both = parser.parse_args(
        ["--model", "m", "--output", "o", "--grading", "official", "--checking", "groupwise"]
    )
    with pytest.raises(ValueError, match="--grading: is the former name of --checking"):
        config_from_args(both)
    config = EvalConfig(model="m", checking="groupwise")
    saved = config.to_dict()
    del saved["checking"]
    (tmp_path / "config.json").write_text(json.dumps({**saved, "grading": "lenient"}))
    (tmp_path / "samples.jsonl").write_text(json.dumps({"problem": "p"}) + "\n")
    check_folder(config, tmp_path)
    with pytest.raises(ResumeMismatch, match="checking: saved 'groupwise', now 'amir_eval'"):
        check_folder(dataclasses.replace(config, checking="amir_eval"), tmp_path)


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


def test_eval_end_to_end_tiny_random_with_adapter(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from groupwise.models import attach_lora, load_model

    model, _ = load_model("tiny-random")
    run = tmp_path / "run"
    attach_lora(model).save_pretrained(run / "checkpoints" / "step-3" / "adapter")
    out = tmp_path / "eval"
    argv = [
        "eval",
        "--model",
        "tiny-random",
        "--adapter",
        str(run),
        "--benchmarks",
        "gsm8k",
        "--limit",
        "2",
        "--n",
        "2",
        "--k",
        "1,2",
        "--max-new-tokens",
        "16",
        "--device",
        "cpu",
        "--data-dir",
        str(data_dir),
        "--quiet",
        "--output",
        str(out),
    ]
    assert cli(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["gsm8k"]["problems"] == 2 and results["gsm8k"]["n"] == 2
    assert set(results["gsm8k"]) >= {
        "pass@1",
        "pass@1_ci",
        "pass@2",
        "pass@2_ci",
        "timeouts",
        "no_answer",
    }
    assert results["config"]["adapter"].endswith("checkpoints/step-3/adapter")
    samples = read_samples(out / "samples.jsonl")
    assert len(samples) == 4
    assert all(1 <= s.tokens <= 16 and s.mean_logp is not None and s.mean_logp < 0 for s in samples)
    assert len({s.problem_id for s in samples}) == 2
    assert (out / "results.png").stat().st_size > 0 and (out / "results.md").is_file()
    before = (out / "samples.jsonl").read_text()
    assert cli(argv) == 0  # resume: nothing left to sample, same samples
    assert (out / "samples.jsonl").read_text() == before
    capsys.readouterr()
    assert cli([*argv, "--top-p", "0.9"]) == 2
    assert "top_p: saved 1.0, now 0.9" in capsys.readouterr().err


# --- refused eval runs: one line, exit 2, before any model loads ------------------------------


def _refused(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    """The one-line message of a refused `groupwise eval` run, exit status 2 (failing if a
    model loads)."""
    import groupwise.models

    def no_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded before the settings were checked")

    monkeypatch.setattr(groupwise.models, "load_model", no_model)
    assert cli(argv) == 2
    message = capsys.readouterr().err
    assert message.count("\n") == 1 and message.startswith("groupwise eval: ")
    return message.removeprefix("groupwise ")


@pytest.mark.parametrize(("flags", "expected"), [
    (["--max-new-tokens", "0"], "--max-new-tokens: must be an integer >= 1, got 0"),
    (["--temperature", "-1"], "--temperature: must be in [0, 1000000) (0 = greedy), got -1.0"),
    (["--top-p", "0"], "--top-p: must be in (0, 1], got 0.0"),
    (["--top-p", "1.5"], "--top-p: must be in (0, 1], got 1.5"),
    (["--n", "0"], "--n: must be an integer >= 1, got 0"),
    (["--n", "2", "--k", "1,4"], "--k: must be integers in 1..n=2, got [1, 4]"),
    (["--limit", "0"], "--limit: must be an integer >= 1, got 0"),
    (["--batch-size", "0"], "--batch-size: must be an integer >= 1, got 0"),
    (["--seed", "-3"], "--seed: must be an integer >= 0, got -3"),
    (["--logp-batch-size", "0"], "--logp-batch-size: must be an integer >= 1, got 0"),
    (["--workers", "0"], "--workers: must be an integer >= 1, got 0"),
    (["--device", "tpu"], "--device: must be cpu, cuda or cuda:N"),
    (["--benchmarks", "gsm8k,nope"], "--benchmarks: unknown benchmark 'nope'; valid benchmarks:"),
    (["--benchmarks", "gsm8k:validation"],
     "--benchmarks: benchmark 'gsm8k' has no split 'validation'; valid splits: ['train', 'test']"),
    (["--adapter", "no/such/run"], "--adapter: no LoRA adapter at no/such/run"),
    (["--data-dir", "no/such/folder"], "--data-dir: no folder no/such/folder"),
])  # fmt: skip
def test_bad_flags_refused_before_anything_is_written(
    tmp_path: Path,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str],
    expected: str,
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
    message = _refused(argv, monkeypatch, capsys)
    assert message.startswith("eval: " + expected)
    assert not out.exists()


def test_unknown_model_refused_before_loading(
    tmp_path: Path,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "eval"
    message = _refused(
        [
            "eval",
            "--model",
            "no such model",
            "--benchmarks",
            "gsm8k",
            "--data-dir",
            str(data_dir),
            "--output",
            str(out),
        ],
        monkeypatch,
        capsys,
    )
    assert message.startswith("eval: --model: unknown model 'no such model': not an alias")
    assert not out.exists()


def test_folder_without_samples_takes_other_settings(tmp_path: Path) -> None:
    """A run that crashed before its first sample left config.json only: the corrected rerun
    may change any setting."""
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_eval(tmp_path, FakeGenerator(fail_on_call=1), max_new_tokens=4)
    assert (tmp_path / "config.json").is_file()
    results = run_eval(tmp_path, FakeGenerator(), max_new_tokens=8)
    assert results["toy"]["problems"] == 4
    assert json.loads((tmp_path / "config.json").read_text())["max_new_tokens"] == 8


# --- real evaluations of a tiny model -----------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_policy() -> tuple:
    from groupwise.models import load_model

    return load_model("tiny-random", seed=0)


def _tiny_eval(folder: Path, tiny_policy: tuple, problems: list[Problem], batch_size: int) -> dict:
    """A real evaluation (tiny-random, the transformers engine, mean_logp), fake answer check."""
    from groupwise.completion_logprobs import rollout_mean_logp
    from groupwise.rollout import TransformersGenerator

    model, tokenizer = tiny_policy
    config = EvalConfig(
        model="tiny-random",
        benchmarks=("gsm8k",),
        n=2,
        ks=(1, 2),
        temperature=1.0,
        max_new_tokens=6,
        prompt="plain",
        batch_size=batch_size,
    )
    return evaluate(
        config,
        {"gsm8k": problems},
        TransformersGenerator(model, tokenizer, batch_size=batch_size),
        folder,
        prompt_fn=lambda p: p.question,
        logp_fn=partial(rollout_mean_logp, model),
        check_fn=fake_check,
        progress=False,
    )


def _by_sample(folder: Path) -> dict[tuple[str, str, int], Sample]:
    return {
        (s.benchmark, s.problem_id, s.sample): s for s in read_samples(folder / "samples.jsonl")
    }


def test_resume_is_sample_exact_wherever_samples_jsonl_was_cut(
    tmp_path: Path, data_dir: Path, tiny_policy: tuple
) -> None:
    from groupwise.data import load_benchmark

    # golds with a multi-byte character, so that a line can be cut inside one
    problems = [
        dataclasses.replace(p, answer=f"√{p.answer}")
        for p in load_benchmark("gsm8k", "test", data_dir=data_dir)[:5]
    ]
    full = tmp_path / "full"
    expected = _tiny_eval(full, tiny_policy, problems, batch_size=6)  # 3 problems per call
    data = (full / "samples.jsonl").read_bytes()
    ends = [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]  # after line k: ends[k-1]
    assert len(ends) == 10
    wide = next(i for i in range(ends[6], ends[7]) if 0x80 <= data[i] < 0xC0)
    cuts = {
        "one sample of the first call": ends[0],
        "two of the first call's three problems": ends[3],
        "mid-line": ends[3] + 25,
        "a whole line but its newline": ends[5] - 1,
        "inside a multi-byte character": wide,
        "mid-line in the second call": ends[8] + 3,
    }
    for (name, cut), batch_size in zip(cuts.items(), [6, 6, 6, 6, 6, 2], strict=True):
        folder = tmp_path / name.replace(" ", "-")
        folder.mkdir()
        for file in ("config.json", "problems.jsonl"):
            (folder / file).write_bytes((full / file).read_bytes())
        (folder / "samples.jsonl").write_bytes(data[:cut])
        # the last cut resumes with another batch size: not a sample-changing setting
        results = _tiny_eval(folder, tiny_policy, problems, batch_size=batch_size)
        got, want = _by_sample(folder), _by_sample(full)
        assert got.keys() == want.keys(), name
        for key, sample in want.items():
            assert dataclasses.replace(got[key], mean_logp=None) == dataclasses.replace(
                sample, mean_logp=None
            ), (name, key)
            assert got[key].mean_logp == pytest.approx(sample.mean_logp, abs=1e-5), (name, key)
        assert results["gsm8k"]["pass@2"] == expected["gsm8k"]["pass@2"], name


# ----------------------------------------------------------------------------- non-UTF-8 input


def test_non_utf8_byte_in_an_eval_file_names_file_and_line(
    tmp_path: Path,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = b'{"question": "caf\xe9?", "answer": "#### 1"}\n'  # latin-1, not UTF-8
    gsm8k = tmp_path / "data" / "gsm8k"
    gsm8k.mkdir(parents=True)
    good = (data_dir / "gsm8k" / "test.jsonl").read_bytes().splitlines(keepends=True)[:2]
    (gsm8k / "test.jsonl").write_bytes(good[0] + bad + good[1])
    out = tmp_path / "eval"
    argv = [
        "eval",
        "--model",
        "tiny-random",
        "--benchmarks",
        "gsm8k",
        "--n",
        "1",
        "--k",
        "1",
        "--data-dir",
        str(tmp_path / "data"),
        "--output",
        str(out),
        "--quiet",
    ]
    message = _refused(argv, monkeypatch, capsys)
    assert f"{gsm8k / 'test.jsonl'} line 2: not valid UTF-8 (byte 0xe9" in message
    assert not out.exists()

    # the folder's own files: samples.jsonl (a middle line) and config.json
    folder = tmp_path / "folder"
    run_eval(folder, FakeGenerator(), limit=2)
    lines = (folder / "samples.jsonl").read_bytes().splitlines(keepends=True)
    (folder / "samples.jsonl").write_bytes(
        lines[0] + lines[1].replace(b"toy", b"t\xffy", 1) + b"".join(lines[2:])
    )
    with pytest.raises(ValueError, match=r"samples.jsonl:2: not valid UTF-8 \(byte 0xff"):
        run_eval(folder, FakeGenerator(), limit=2)
    (folder / "samples.jsonl").write_bytes(b"".join(lines))
    config = (folder / "config.json").read_bytes()
    (folder / "config.json").write_bytes(config.replace(b'"fake"', b'"f\xe4ke"'))
    with pytest.raises(ValueError, match=r"config.json:2: not valid UTF-8 \(byte 0xe4"):
        run_eval(folder, FakeGenerator(), limit=2)
