"""Pass@k and calibration on held-out problems while TRL trains (docs/guides/trl.md,
"Held-out pass@k while training").

`PassAtKCallback` is a transformers `TrainerCallback` for TRL's `GRPOTrainer` and for
`GroupwiseGRPOTrainer`. Before the first step, every `every` steps and after the last, it
samples n completions of each held-out problem through the trainer's own generation path
(TRL's `_generate_single_turn`: vLLM colocate or server when the trainer uses vLLM, else
transformers' generate, with the trainer's temperature, top_p and max_completion_length),
checks them with groupwise's answer checking and logs, through the trainer's loggers
(`report_to`), the unbiased pass@k (docs/algorithms.md §4) with its bootstrap interval over
problems, the group shares and, when the prompt asks for a confidence, the calibration
figures (docs/algorithms.md §6).

Files, under OUTPUT_DIR/heldout/: heldout.jsonl (one line per evaluation: the step, each
problem's correct count, the pass@k and calibration tables with their intervals, the sampling
settings) and samples-step<STEP>.jsonl (every completion, in `groupwise eval`'s samples.jsonl
format). A run resumed from a checkpoint keeps the evaluations up to the checkpoint's step and
evaluates the later steps again (the lines they replace are set aside, never deleted), so a
crash loses no evaluation.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import gather_object
from transformers import Trainer, TrainerCallback

from groupwise.evaluation.sampling import problem_seed
from groupwise.metrics import doubling_ks
from groupwise.records import Sample, read_jsonl
from groupwise.rewards import DEFAULT_MODE, check_answers, parse_confidence
from groupwise.train.heldout import CALIBRATION_METRICS
from groupwise.train.metrics_log import JsonlLog

__all__ = ["HELDOUT_FOLDER", "PassAtKCallback", "read_evaluations"]

HELDOUT_FOLDER = "heldout"
PREFIX = "heldout/"


class PassAtKCallback(TrainerCallback):
    """Evaluates the policy on held-out problems while a TRL GRPOTrainer trains.

    Args:
        trainer: the GRPOTrainer (or GroupwiseGRPOTrainer) it evaluates; add the callback with
            `trainer.add_callback(callback)`.
        problems: held-out rows, each with a "prompt" (a string or chat messages, as in TRL's
            dataset) and the gold answer in `answer_column`; an "id" column names the problems
            (else the row number).
        n: completions per problem (>= 1).
        every: evaluate every `every` optimizer steps (>= 1), besides step 0 and the last.
        ks: the k of pass@k (each in [1, n]); default 1, 2, 4, ..., n.
        calibration: the prompt asks for a verbalized confidence (groupwise's `amir` prompts):
            log its calibration too. Completions without a parsable confidence are counted
            (`heldout/confidence_coverage`) and left out of the figures, never set to 0.5.
        checking: groupwise's answer-checking mode (groupwise.rewards.MODES).
        answer_column: the rows' gold-answer field.
        benchmark: the name written into the samples files.
        seed: seeds the transformers sampling of each evaluation and the bootstrap; default
            the trainer's args.seed. The trainer's own random state is left as it was.
        workers, timeout: the answer-checking processes and their per-answer limit (seconds).
    """

    def __init__(
        self,
        trainer: Any,
        problems: Sequence[Mapping[str, Any]],
        n: int = 8,
        every: int = 50,
        ks: Sequence[int] | None = None,
        calibration: bool = False,
        checking: str = DEFAULT_MODE,
        answer_column: str = "answer",
        benchmark: str = "heldout",
        seed: int | None = None,
        workers: int = 2,
        timeout: float = 5.0,
    ) -> None:
        from groupwise.integrations.trl.compat import check_trl_compatibility
        from groupwise.rewards import checking_mode

        check_trl_compatibility()
        checking_mode(checking)  # an unknown mode is an error naming the modes
        if n < 1 or every < 1:
            raise ValueError(f"PassAtKCallback: n and every must be >= 1, got n={n}, every={every}")
        self.ks = list(ks) if ks is not None else doubling_ks(n)
        if not self.ks or any(not 1 <= k <= n for k in self.ks):
            raise ValueError(f"PassAtKCallback: every k must be in [1, n={n}], got {self.ks}")
        if getattr(trainer, "environment_factories", None) is not None:
            raise ValueError(
                "PassAtKCallback: the trainer's environment_factories give each prompt its own "
                "tools; the callback samples single-turn completions only"
            )
        self.trainer = trainer
        self.rows = _checked_rows(problems, answer_column)
        self.ids = [str(row.get("id", number)) for number, row in enumerate(self.rows)]
        self.index = {problem_id: number for number, problem_id in enumerate(self.ids)}
        if len(self.index) != len(self.ids):
            raise ValueError("PassAtKCallback: the problems' 'id' values repeat")
        self.golds = [str(row[answer_column]) for row in self.rows]
        self.n, self.every, self.calibration = n, every, calibration
        self.checking, self.benchmark = checking, benchmark
        self.seed = trainer.args.seed if seed is None else seed
        self.workers, self.timeout = workers, timeout
        self.folder = Path(trainer.args.output_dir) / HELDOUT_FOLDER
        self.log: JsonlLog | None = None
        self.done: set[int] = set()

    # -- the callback events ------------------------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):
        resumed = state.global_step if state.global_step > 0 else None
        if state.is_world_process_zero:
            self.log = JsonlLog(self.folder / "heldout.jsonl", resumed)
            for note in self.log.notes:
                print(f"groupwise: {note}")
            self._set_aside_samples_after(state.global_step)
        self.done = set(range(state.global_step + 1))  # steps the kept log already covers
        if resumed is None:
            self.evaluate(0)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0:
            self.evaluate(state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        if state.global_step not in self.done:
            self.evaluate(state.global_step)

    # -- one evaluation -----------------------------------------------------------------------

    def evaluate(self, step: int) -> dict[str, float]:
        """Sample, check and log one evaluation of the policy as it is after `step` steps;
        returns the logged metrics (the same on every process)."""
        from groupwise.calibration import calibration_table
        from groupwise.metrics import pass_at_k_table

        started = time.perf_counter()
        samples = self._sample_and_check(step)
        samples.sort(key=lambda s: (self.index[s.problem_id], s.sample))
        correct = [0] * len(self.rows)
        for s in samples:
            correct[self.index[s.problem_id]] += int(s.correct)
        passes = pass_at_k_table(correct, self.n, self.ks, seed=self.seed)
        metrics = {PREFIX + "accuracy": sum(correct) / (len(correct) * self.n)}
        for k in self.ks:
            metrics |= _with_interval(f"pass@{k}", passes[f"pass@{k}"], passes[f"pass@{k}_ci"])
        metrics |= {
            PREFIX + "all_correct": sum(c == self.n for c in correct) / len(correct),
            PREFIX + "all_wrong": sum(c == 0 for c in correct) / len(correct),
            PREFIX + "mixed": sum(0 < c < self.n for c in correct) / len(correct),
        }
        line: dict[str, Any] = {"step": step, "n": self.n, "problem_ids": self.ids}
        line |= {"correct": correct, "pass_at_k": passes, "sampling": self._sampling()}
        if self.calibration:
            table = calibration_table(
                [s.confidence for s in samples],
                [s.correct for s in samples],
                [s.problem_id for s in samples],
                seed=self.seed,
            )
            line["calibration"] = table
            for key, name in CALIBRATION_METRICS.items():
                if table[key] is not None:
                    metrics |= _with_interval(name, table[key], table[f"{key}_ci"])
        metrics[PREFIX + "seconds"] = time.perf_counter() - started
        if self.log is not None:
            _write_atomically(
                self.folder / f"samples-step{step}.jsonl",
                "".join(s.to_json() + "\n" for s in samples),
            )
            self.log.write(line)
        self.done.add(step)
        # Trainer.log, not GRPOTrainer.log: TRL's log would flush its pending training metrics
        # into this line; the base class sends these values alone to every report_to logger.
        # Logging clears control.should_log, which the step's own training line still needs.
        should_log = self.trainer.control.should_log
        Trainer.log(self.trainer, dict(metrics))
        self.trainer.control.should_log = should_log
        return metrics

    def _sample_and_check(self, step: int) -> list[Sample]:
        """Every process samples its share of the problems (the same number on each, as TRL's
        server mode requires); the checked samples of all processes, gathered."""
        trainer = self.trainer
        rank, world = trainer.accelerator.process_index, trainer.accelerator.num_processes
        share = -(-len(self.rows) // world)
        first = rank * share
        # the last problem repeated fills the last processes' shares; those samples are dropped
        mine = [min(first + i, len(self.rows) - 1) for i in range(share)]
        real = max(0, min(share, len(self.rows) - first))
        completion_ids = self._generate([self.rows[i]["prompt"] for i in mine], step)
        completion_ids = completion_ids[: real * self.n]
        texts = trainer.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
        rows = [(i, j) for i in mine[:real] for j in range(self.n)]
        verdicts = check_answers(
            texts, [self.golds[i] for i, _ in rows], self.workers, self.timeout, mode=self.checking
        )
        stops = {*trainer.eos_token_ids, trainer.processing_class.pad_token_id}
        samples = [
            Sample(
                benchmark=self.benchmark,
                problem_id=self.ids[i],
                sample=j,
                completion=text,
                extracted=verdict.extracted,
                verdict=verdict.status,
                tokens=len(ids),
                truncated=bool(ids) and ids[-1] not in stops,  # TRL's clipped_ratio rule
                mean_logp=None,
                confidence=parse_confidence(text),
                gold=self.golds[i],
            )
            for (i, j), text, verdict, ids in zip(
                rows, texts, verdicts, completion_ids, strict=True
            )
        ]
        return list(gather_object(samples))

    def _generate(self, prompts: Sequence[Any], step: int) -> list[list[int]]:
        """n completions of each prompt (prompt-major) as token ids, through TRL's generation
        path. The transformers path draws from a stream seeded by (seed, step, process) inside
        a forked torch RNG, so training draws what it would have drawn without the callback."""
        trainer = self.trainer
        repeated = [p for p in prompts for _ in range(self.n)]
        prompt_ids, images, fields = trainer._tokenize_prompts(repeated)
        model = trainer.model
        was_training = model.training
        devices = [trainer.accelerator.device] if torch.cuda.is_available() else []
        rank = trainer.accelerator.process_index
        try:
            model.eval()
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(problem_seed(self.seed, "trl-heldout", f"{step}/{rank}"))
                completion_ids, _ = trainer._generate_single_turn(
                    prompt_ids, images, fields, self.n
                )
        finally:
            model.train(was_training)
        return [list(ids) for ids in completion_ids]

    def _sampling(self) -> dict[str, Any]:
        """The sampling settings of the evaluation, as the trainer generates."""
        args, trainer = self.trainer.args, self.trainer
        engine = (
            f"vllm-{trainer.vllm_mode}" if getattr(trainer, "use_vllm", False) else ("transformers")
        )
        return {
            "engine": engine,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "top_k": args.top_k,
            "max_completion_length": args.max_completion_length,
            "checking": self.checking,
            "seed": self.seed,
            "processes": trainer.accelerator.num_processes,
        }

    def _set_aside_samples_after(self, step: int) -> None:
        """A resumed run evaluates the steps after its checkpoint again: their samples files
        are renamed (.set-aside), as heldout.jsonl's later lines are."""
        for path in self.folder.glob("samples-step*.jsonl"):
            if int(path.stem.removeprefix("samples-step")) > step:
                os.replace(path, path.with_name(path.name + ".set-aside"))


def _with_interval(name: str, value: float, interval: Sequence[float] | None) -> dict[str, float]:
    """{heldout/NAME: value, heldout/NAME_low, heldout/NAME_high} (the interval when defined)."""
    out = {PREFIX + name: float(value)}
    if interval:
        out |= {
            f"{PREFIX}{name}_low": float(interval[0]),
            f"{PREFIX}{name}_high": float(interval[1]),
        }
    return out


def _checked_rows(problems: Sequence[Mapping[str, Any]], answer_column: str) -> list[dict]:
    """The rows as dicts; a row without a prompt or an answer is an error naming the row."""
    rows = [dict(row) for row in problems]
    if not rows:
        raise ValueError("PassAtKCallback: no held-out problems")
    for number, row in enumerate(rows):
        missing = [key for key in ("prompt", answer_column) if row.get(key) in (None, "")]
        if missing:
            raise ValueError(
                f"PassAtKCallback: held-out row {number} has no {' or '.join(missing)} "
                f"(fields: {', '.join(sorted(row))})"
            )
    return rows


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_evaluations(output_dir: str | Path) -> list[dict[str, Any]]:
    """OUTPUT_DIR/heldout/heldout.jsonl's evaluations in step order ([] when there are none);
    a line that cannot be read is an error naming the file and line."""
    path = Path(output_dir) / HELDOUT_FOLDER / "heldout.jsonl"
    if not path.is_file():
        return []
    rows, _ = read_jsonl(path)
    return sorted((row for _, row in rows), key=lambda row: row["step"])
