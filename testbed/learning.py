"""The learning testbed: RL from the tiny `arith` base policy with GRPO, AMIR-GRPO (two lambda
rules), LENS (full and its two ablations), AMIR-GRPO + LENS and GSPO at equal sample budgets,
then held-out pass@k per method across paired seeds, and the methods' mechanisms per step.

Every run starts from the same SFT base policy (`groupwise.sft`, alias `arith-base`) and uses
configs/testbed_arith.yaml (binary 1/0 correctness reward, plain prompt, full fine-tuning, the
same questions per step, group size, steps, learning rate and schedule); only the method options
differ (`METHODS`). A run is (level, method, seed). During training its policy is evaluated on
held-out problems at `curve_points` evenly spaced checkpoints (pass@k and the preference margin
of `groupwise analyze margin`, from samples saved with their mean log-probs); after training,
on the level's held-out `arith` test problems with n samples per problem at temperature 1.0
(unbiased pass@k, docs/algorithms.md §4). The base policy's own evaluation is the baseline and step
0. Every method uses the same training seeds and the same evaluation problems and sampling seeds,
so its difference to GRPO is paired over seeds and over problems (testbed/stats.py).

Budgets: every method samples questions_per_step x group_size completions per step for `steps`
steps. The GSPO entry and its control split each rollout batch into 2 PPO mini-batches (one
optimizer step each, the second off-policy): the same questions and completions, twice the
optimizer steps (its sequence ratio is 1 on an on-policy update, so without a later update its
tight clip never acts). The results file lists the three counts per method.

Outputs, under --output (default runs/learning, runs/learning-PRESET): LEVEL/METHOD/seedS/ (the
trainer's run folder: metrics.jsonl, checkpoints, final/model; curve/step-N/ and eval/, each an
evaluation folder with samples and results; summary.json when the run is complete), LEVEL/base/
for the baseline, invocations.json (every invocation's command, start, wall time and load), and
the results of testbed/report.py: learning.md, learning.json and the figures
learning.png, learning-lens.png, learning-amir.png; a complete full preset also writes them to
testbed/results/ (the plateau preset as learning-plateau.*). Ctrl-C or SIGTERM: each training run
finishes its step, checkpoints and the bench stops; the same command resumes it (complete runs
are skipped, a training run continues from its checkpoint, an evaluation from its last problem).
Runs write only their own folders, so --jobs N runs N of them in parallel (one torch thread each
by default: on a small CPU, one thread per process beats two processes sharing two threads).

    python -m testbed.learning --jobs 2           # full preset (about 4.5 hours on 2 cores)
    python -m testbed.learning --quick --jobs 2   # a first look (about 15 minutes on 2 cores)
    python -m testbed.learning --preset plateau --jobs 2   # GRPO at a constant lr, 200 steps
    python -m testbed.learning --preset smoke     # a minute: every method, end to end
    python -m testbed.learning --report-only      # the results of the runs complete so far
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import shlex
import signal
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from .plan import (
    BASE,
    COMMITTED,
    CONFIG,
    CONTROLS,
    METHODS,
    PRESETS,
    REPO,
    RESULTS_DIR,
    STEP_KEYS,
    BenchSettings,
    RunSpec,
    names,
    run_specs,
    select,
    train_overrides,
    with_settings,
)

# ---------------------------------------------------------------------------------------------
# One run: train (or resume), evaluate during and after training, summarise


def evaluate_policy(
    model: Any,
    tokenizer: Any,
    model_name: str,
    level: str,
    problems: int,
    n: int,
    ks: Sequence[int],
    max_new_tokens: int,
    output_dir: Path,
) -> dict[str, Any]:
    """Evaluate `model` on the first `problems` `arith` test problems of `level`, n samples each
    at temperature 1.0 (groupwise.evaluation.evaluate: resumable, samples saved with their mean
    log-probs). Returns {"results": the level's pass@k entry, "counts": correct samples per
    problem in problem order, "margin": mean preference margin over the problems with correct
    and incorrect samples (groupwise analyze margin) or None, "margin_problems": their count}."""
    from groupwise.analysis.preference_margin import preference_margins
    from groupwise.analysis.runs import load_run
    from groupwise.completion_logprobs import rollout_mean_logp
    from groupwise.data import load_benchmark, render_prompt
    from groupwise.evaluation import EvalConfig, evaluate
    from groupwise.rollout import TransformersGenerator

    bench = f"arith:{level}"
    config = EvalConfig(
        model=model_name,
        benchmarks=(bench,),
        n=n,
        ks=tuple(ks),
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        prompt="plain",
        batch_size=256,
        seed=0,
    )
    items = load_benchmark("arith", split="test", level=level, size=problems)
    results = evaluate(
        config,
        {bench: items},
        TransformersGenerator(model, tokenizer, batch_size=config.batch_size),
        output_dir,
        prompt_fn=lambda p: render_prompt(p, "plain", tokenizer),
        logp_fn=partial(rollout_mean_logp, model, batch_size=64),
        progress=False,
    )
    groups = load_run("run", output_dir).by_problem()
    margins = preference_margins(groups)
    return {
        "results": results[bench],
        "counts": [sum(s.correct for s in groups[(bench, p.id)]) for p in items],
        "margin": statistics.fmean(margins.values()) if margins else None,
        "margin_problems": len(margins),
    }


def read_steps(metrics_path: Path) -> dict[str, list[float]]:
    """{key: [value per step]} for STEP_KEYS from a run's metrics.jsonl (NaN where absent),
    read by groupwise.run_reader."""
    from groupwise.run_reader import read_metrics

    records = read_metrics(metrics_path)
    return {key: [float(r.get(key, math.nan)) for r in records] for key in ("step", *STEP_KEYS)}


def _curve_point(step: int, evaluation: Mapping[str, Any], ks: Sequence[int]) -> dict[str, Any]:
    point = {"step": step, "margin": evaluation["margin"]}
    return point | {f"pass@{k}": evaluation["results"][f"pass@{k}"] for k in ks}


def run_one(spec: RunSpec, settings: BenchSettings, root: Path, progress: bool = False) -> dict:
    """Train (resuming a killed run) and evaluate one run; returns and saves its summary.

    A run whose summary.json exists is not touched again.
    """
    folder = spec.folder(root)
    summary_path = folder / "summary.json"
    if summary_path.is_file():
        return json.loads(summary_path.read_text())
    from groupwise.models import load_model
    from groupwise.train.checkpoint import load_weights_into
    from groupwise.train.preflight import load_run_config
    from groupwise.train.trainer import Trainer

    s = settings
    curve_eval = partial(
        evaluate_policy,
        level=spec.level,
        problems=s.curve_problems,
        n=s.curve_n,
        ks=[k for k in s.eval_ks if k <= s.curve_n],
        max_new_tokens=s.max_new_tokens,
    )
    started = time.perf_counter()
    steps: dict[str, list[float]] = {}
    curve = []
    if spec.method == BASE:
        model_name = s.model
        model, tokenizer = load_model(model_name)
        trained = time.perf_counter()
        first = curve_eval(model, tokenizer, model_name, output_dir=folder / "curve" / "step-0")
        curve.append(_curve_point(0, first, curve_eval.keywords["ks"]))
    else:
        final = folder / "final" / "model"
        if not (final / "config.json").is_file():
            config = load_run_config(CONFIG, train_overrides(spec, s, folder))
            config.train.progress = progress
            trainer = Trainer(config, resume=True)
            trainer.train()
            if trainer.stop_signal is not None:
                raise SystemExit(
                    f"{spec.name}: stopped by signal {trainer.stop_signal} after a "
                    "checkpoint; rerun the same command to resume"
                )
        trained = time.perf_counter()
        model_name = str(final.resolve())
        model, tokenizer = load_model(s.model)
        for step in s.curve_steps(spec.level)[1:]:
            checkpoint = folder / "checkpoints" / f"step-{step}"
            load_weights_into(model, checkpoint)
            model.eval()
            out = folder / "curve" / checkpoint.name
            point = curve_eval(model, tokenizer, f"{model_name}@{step}", output_dir=out)
            curve.append(_curve_point(step, point, curve_eval.keywords["ks"]))
        steps = read_steps(folder / "metrics.jsonl")
    # The last checkpoint holds the final weights (the trainer saves at max_steps).
    final_eval = evaluate_policy(
        model,
        tokenizer,
        model_name,
        spec.level,
        s.eval_problems,
        s.eval_n,
        s.eval_ks,
        s.max_new_tokens,
        folder / "eval",
    )
    summary = {
        "level": spec.level,
        "method": spec.method,
        "seed": spec.seed,
        **final_eval,
        "curve": curve,
        "steps": steps,
        "seconds_train": trained - started,
        "seconds_eval": time.perf_counter() - trained,
    }
    tmp = summary_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary))
    tmp.replace(summary_path)
    return summary


# ---------------------------------------------------------------------------------------------
# The bench


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def check_output(settings: BenchSettings, root: Path) -> None:
    """Refuse an output folder whose runs were made with other run-defining settings."""
    path = root / "settings.json"
    mine = settings.to_dict()
    if path.is_file():
        # a key added since the folder's runs were made had its default then
        saved = {"extra": [], **json.loads(path.read_text())}
        diffs = [
            f"{k}: saved {saved.get(k)!r}, now {mine[k]!r}"
            for k in BenchSettings.RUN_KEYS
            if saved.get(k) != mine[k]
        ]
        if diffs:
            raise SystemExit(
                f"{root} holds runs made with other settings ({'; '.join(diffs)}); use another "
                "--output folder or the same settings"
            )
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(mine, indent=2) + "\n")


def complete_runs(settings: BenchSettings, root: Path) -> int:
    """How many runs of `settings` under `root` are complete (have a summary.json)."""
    return sum((s.folder(root) / "summary.json").is_file() for s in run_specs(settings))


def run_bench(settings: BenchSettings, root: Path, jobs: int, threads: int) -> list[dict]:
    """Every run of `settings` not yet complete under `root`, `jobs` at a time, with a bar
    over runs showing the last one's pass@1; returns all summaries."""
    specs = run_specs(settings)
    done = [s for s in specs if (s.folder(root) / "summary.json").is_file()]
    todo = [s for s in specs if s not in done]
    summaries = [run_one(s, settings, root) for s in done]
    bar = tqdm(total=len(specs), initial=len(done), desc="runs", unit="run", dynamic_ncols=True)

    def finished(summary: dict) -> None:
        summaries.append(summary)
        bar.update(1)
        name = RunSpec(summary["level"], summary["method"], summary["seed"]).name
        bar.set_postfix_str(
            f"{name} pass@1 {100 * summary['results']['pass@1']:.1f}% "
            f"({(summary['seconds_train'] + summary['seconds_eval']) / 60:.1f} min)"
        )

    if jobs == 1:
        for spec in todo:
            bar.set_description(f"runs ({spec.name})")
            finished(run_one(spec, settings, root, progress=True))
    else:
        run_in_processes(todo, settings, root, jobs, threads, finished)
    bar.close()
    return summaries


def _run_in_child(spec: RunSpec, settings: BenchSettings, root: Path, threads: int) -> None:
    torch.set_num_threads(threads)
    run_one(spec, settings, root)


def run_in_processes(
    specs: Sequence[RunSpec],
    settings: BenchSettings,
    root: Path,
    jobs: int,
    threads: int,
    finished: Callable[[dict], None],
) -> None:
    """Run each spec in its own process, `jobs` at a time, calling `finished` with each
    summary. One process per run, so a stop is clean: on SIGTERM this process sends SIGTERM to
    the running ones (a training run finishes its step and checkpoints) and waits for them;
    Ctrl-C reaches them directly. A run that fails or is stopped stops the bench the same way."""
    import multiprocessing
    from multiprocessing.connection import wait

    def terminate(signum: int, frame: Any) -> None:
        raise _Terminated

    context = multiprocessing.get_context("spawn")
    queue, running = list(specs), {}
    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        while queue or running:
            while queue and len(running) < jobs:
                spec = queue.pop(0)
                child = context.Process(target=_run_in_child, args=(spec, settings, root, threads))
                child.start()
                running[child.sentinel] = (spec, child)
            for sentinel in wait(list(running)):
                spec, child = running.pop(sentinel)
                child.join()
                if child.exitcode != 0:
                    raise RuntimeError(
                        f"{spec.name} stopped (exit code {child.exitcode}); its "
                        "output is above; the same command resumes the bench"
                    )
                finished(json.loads((spec.folder(root) / "summary.json").read_text()))
    except BaseException as error:
        for _, child in running.values():
            if isinstance(error, (_Terminated, RuntimeError)):
                child.terminate()  # Ctrl-C (KeyboardInterrupt) already reached the children
        for _, child in running.values():
            child.join()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Terminated(Exception):
    """SIGTERM reached the bench."""


def record_invocation(root: Path, record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Append one invocation's record to ROOT/invocations.json; returns all records so far."""
    path = root / "invocations.json"
    records = json.loads(path.read_text()) if path.is_file() else []
    records.append(dict(record))
    path.write_text(json.dumps(records, indent=1) + "\n")
    return records


def complete_part(settings: BenchSettings, root: Path) -> tuple[BenchSettings, list[str]]:
    """The part of `settings` whose runs under `root` are all complete: the longest run of
    first seeds complete for every method but the CONTROLS, and the CONTROLS complete for those
    seeds; with what that leaves out, in words."""

    def complete(spec: RunSpec) -> bool:
        return (spec.folder(root) / "summary.json").is_file()

    def seeds_done(methods: Sequence[str]) -> int:
        count = 0
        for seed in settings.seeds:
            if not all(
                complete(RunSpec(lv, m, seed))
                for lv, ms in settings.levels.items()
                for m in ms
                if m in methods
            ):
                break
            count += 1
        return count

    main_methods = [m for ms in settings.levels.values() for m in ms if m not in CONTROLS]
    seeds = settings.seeds[: seeds_done(main_methods)]
    part = dataclasses.replace(settings, seeds=seeds)
    left_out = []
    if len(seeds) < len(settings.seeds):
        left_out.append(f"seeds {list(settings.seeds[len(seeds) :])}")
    for control in CONTROLS:
        if seeds and seeds_done([control]) < len(seeds):
            part = select(
                part, None, [m for ms in part.levels.values() for m in ms if m != control]
            )
            left_out.append(f"the {METHODS[control].label} control")
    return part, left_out


def report_so_far(settings: BenchSettings, root: Path, preset: str) -> int:
    """--report-only: the results of the complete part of the bench (complete_part), into the
    output folder and, for a committed preset, testbed/results, with a header naming the part."""
    part, left_out = complete_part(settings, root)
    if not part.seeds:
        raise SystemExit(f"{root}: no seed is complete for every method yet")
    summaries = [run_one(spec, part, root) for spec in run_specs(part)]
    status = ""
    if left_out:
        status = (
            f"Partial results: the runs complete so far (seeds {list(part.seeds)}); not "
            f"yet run: {', '.join(left_out)}. The same bench command continues the "
            "runs; a complete run rewrites this file."
        )
    path = root / "invocations.json"
    invocations = json.loads(path.read_text()) if path.is_file() else []
    folders = [root] + ([RESULTS_DIR] if preset in COMMITTED else [])
    name = COMMITTED.get(preset, "learning")
    from .report import write_results

    print(
        write_results(part, summaries, folders, invocations=invocations, name=name, status=status)
    )
    print("written: " + ", ".join(str(f / f"{name}.md") for f in folders))
    return 0


def _parser() -> argparse.ArgumentParser:
    """The bench's command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="full")
    parser.add_argument("--quick", action="store_true", help="the quick preset (--preset quick)")
    parser.add_argument("--seeds", type=int, default=None, help="number of seeds (0..N-1)")
    parser.add_argument(
        "--levels",
        type=names,
        default=None,
        help="comma-separated levels of the preset to run (default: all)",
    )
    parser.add_argument(
        "--methods",
        type=names,
        default=None,
        help=f"comma-separated methods to run (default: all): {', '.join(METHODS)}",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change one setting of the preset (repeatable), e.g. --set lr=3e-4 --set "
        "'steps={mid: 150}'",
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (default 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="runs folder (default runs/learning, runs/learning-PRESET)",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="train nothing: write the results of the runs complete so far (the first seeds "
        "complete for every method), saying so in their header",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.threads < 1:
        parser.error("--jobs and --threads must be >= 1")
    preset = "quick" if args.quick else args.preset
    settings = PRESETS[preset]
    if args.seeds is not None:
        settings = dataclasses.replace(settings, seeds=tuple(range(args.seeds)))
    try:
        settings = select(with_settings(settings, args.set), args.levels, args.methods)
    except ValueError as err:
        parser.error(str(err))
    root = args.output or REPO / "runs" / ("learning" if preset == "full" else f"learning-{preset}")
    check_output(settings, root)
    if args.report_only:
        return report_so_far(settings, root, preset)
    return _train_and_report(settings, root, preset, args)


def _train_and_report(
    settings: BenchSettings, root: Path, preset: str, args: argparse.Namespace
) -> int:
    """Make the runs not complete yet (resumable), record the invocation, write the results."""
    load_before = load_average()
    started_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    # Load the base policy once (arith-base is shipped; the smoke preset's is trained here,
    # before parallel workers would each train it).
    from groupwise.models import load_model

    load_model(settings.model)
    before = complete_runs(settings, root)

    def record(note: str | None = None) -> list[dict[str, Any]]:
        return record_invocation(
            root,
            {
                "command": " ".join(
                    shlex.quote(a) for a in ["python", "-m", "testbed.learning", *sys.argv[1:]]
                ),
                "started": started_at,
                "wall_seconds": time.perf_counter() - started,
                "runs_made": complete_runs(settings, root) - before,
                "load_before": load_before,
                "load_after": load_average(),
                **({"note": note} if note else {}),
            },
        )

    try:
        summaries = run_bench(settings, root, args.jobs, args.threads)
    except (_Terminated, KeyboardInterrupt):
        record("stopped before the end")
        raise SystemExit(
            "stopped; the runs in progress checkpointed after their step; the same "
            "command resumes the bench"
        ) from None
    invocations = record()
    # Only a complete, unchanged run of the full or plateau preset replaces committed results.
    complete = (
        preset in COMMITTED
        and not args.set
        and all(option is None for option in (args.levels, args.methods, args.seeds))
    )
    folders = [root] + ([RESULTS_DIR] if complete else [])
    name = COMMITTED.get(preset, "learning")
    from .report import write_results

    text = write_results(settings, summaries, folders, invocations=invocations, name=name)
    print(text)
    print("written: " + ", ".join(str(f / f"{name}.md") for f in folders))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
