"""The training loop for GRPO, AMIR-GRPO, LENS and GSPO (and AMIR-GRPO + LENS).

One step, top to bottom (`Trainer.train_step`):

    batch (train.batch_source: questions -> rollout -> score; sampled ahead with
           rollout.staleness=1)
          -> learn (train.learner: targets, then for each epoch and mini-batch one update)
          -> metrics

The algorithm is what `AlgorithmOptions.build` made from the config (train.algorithm
.build_algorithm); every formula lives in groupwise.algorithms. The rooms around this file:
train/batch_source.py (the sampler's side: rollouts and rewards), train/learner.py (targets
and updates), train/step_targets.py (where targets come from), train/update.py (backward,
all-reduce, clip, step), train/policy.py (loading the policy, its forward passes),
train/step_metrics.py (what a step logs), train/checkpoint.py and train/run_folder.py (what
survives a stop), train/heldout.py (held-out evaluation).

Several processes (torchrun / accelerate launch; train.distributed): each samples and trains on
its own whole questions of every mini-batch; rewards and targets are computed over the gathered
batch. Rank 0 writes the logs, checkpoints and final model.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from groupwise.algorithms import AdaptiveEntropy, AdaptiveLambda, ImportanceCorrection
from groupwise.data import MixPart, load_benchmark, load_mix, render_prompt
from groupwise.models import save_merged
from groupwise.rewards import RewardSuite
from groupwise.train.algorithm import build_algorithm
from groupwise.train.batch import Learned, ScoredBatch
from groupwise.train.batch_source import BatchSource
from groupwise.train.checkpoint import (
    TRAINER_STATE,
    CheckpointError,
    find_resume_point,
    load_trainer_state,
    load_weights_into,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from groupwise.train.config import Config, RolloutConfig
from groupwise.train.distributed import Distributed
from groupwise.train.heldout import HeldoutEvaluation
from groupwise.train.host_memory import keep_freed_memory
from groupwise.train.learner import Learner, LearnSettings
from groupwise.train.memory_budget import (
    HostMemory,
    MemoryEstimate,
    MemoryNote,
    ModelShape,
    check_memory,
    estimate_memory,
    peak_memory_gib,
)
from groupwise.train.metrics_log import JsonlLog, MetricsLog
from groupwise.train.policy import PolicyLogprobs, load_trainable_policy
from groupwise.train.precision import autocast_dtype
from groupwise.train.progress import ProgressLine
from groupwise.train.rollout_engine import build_generator, engine_record
from groupwise.train.run_folder import RunFolder
from groupwise.train.sampler import ProblemSampler
from groupwise.train.step_metrics import step_metrics, step_samples
from groupwise.train.step_targets import choose_step_targets
from groupwise.train.update import optimizer_updater


class Trainer:
    """Owns the policy, the generator, the learner (algorithm, updater) and the run folder."""

    def __init__(self, config: Config, resume: bool = False, folder: RunFolder | None = None):
        """Builds everything a run needs; rank 0 first opens (locks) the run folder, unless the
        caller opened it: `groupwise train` does, before any model or data is loaded."""
        self.config = config
        self.dist = Distributed()
        self.run_dir = Path(config.train.output_dir)
        self.folder = folder
        self._owns_folder = folder is None and self.dist.is_main
        if self._owns_folder:
            self.folder = RunFolder.open(self.run_dir, config, "resume" if resume else "fresh")
        try:
            self._build(resume)
        except BaseException:
            self.close()  # a failed start must not keep the folder locked
            raise

    def _build(self, resume: bool) -> None:
        """Data, policy, generator, rewards, algorithm and learner, logs; then resume."""
        cfg = self.config
        torch.manual_seed(cfg.train.seed)
        # Data before the model: a bad file or loader option fails before minutes of loading.
        self.sampler = ProblemSampler(
            self._problems(), cfg.rollout.questions_per_step, cfg.train.seed, cfg.data.shuffle
        )
        self.device = torch.device(self.dist.device(cfg.model.device))
        if self.device.type == "cpu":
            keep_freed_memory()
        self.model, self.tokenizer = load_trainable_policy(cfg.model, str(self.device))
        self.estimate = self._check_memory()
        self.memory: MemoryNote | None = None
        self.generator = build_generator(cfg, self.model, self.tokenizer)
        self.rewards = RewardSuite(
            cfg.reward.weights,
            workers=cfg.reward.workers,
            timeout=cfg.reward.timeout,
            checking=cfg.reward.checking,
        )
        self.batches = BatchSource(
            cfg,
            self.sampler,
            self.generator,
            self.tokenizer,
            self.rewards,
            self.dist,
            self._divergence_hint,
        )
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.learner = self._learner()
        self.step = 0
        resumed = self._resume() if resume else False
        self._logs(resume_step=self.step if resumed else None)
        self._stop_requested = False
        self.stop_signal: int | None = None

    def _check_memory(self) -> tuple[MemoryEstimate, HostMemory] | None:
        """On a CPU, what the settings need against the memory available, before the sampler
        starts (ConfigError naming the setting to lower; train.memory_budget); the estimate and
        the machine's memory for memory.json."""
        if self.device.type != "cpu":
            return None
        cfg, host = self.config, HostMemory.read()
        rendered = [
            render_prompt(p, cfg.data.prompt, self.tokenizer) for p in self.sampler.questions(0)
        ]
        longest = max(len(self.tokenizer(p, add_special_tokens=False).input_ids) for p in rendered)
        estimate = estimate_memory(cfg, ModelShape.of(self.model), longest)
        check_memory(estimate, cfg, host)
        return estimate, host

    def _problems(self) -> list[Any]:
        """The training problems: one benchmark or a mix, the first data.limit of them."""
        data = self.config.data
        problems = (
            load_mix([MixPart.from_dict(part) for part in data.mix], data.data_dir)
            if data.mix
            else load_benchmark(data.benchmark, data.split, data.data_dir, **data.options)
        )
        return problems if data.limit is None else problems[: data.limit]

    def _learner(self) -> Learner:
        """The algorithm the options build, where its targets come from, the policy's passes
        and the optimizer (one update per mini-batch and epoch)."""
        cfg, algo = self.config, self.config.algorithm
        algorithm = build_algorithm(cfg)
        self.lambda_reg, self.adaptive_entropy = algorithm.lambda_reg, algorithm.adaptive_entropy
        updates = cfg.train.max_steps * algo.minibatches * algo.num_iterations
        self.updater = optimizer_updater(
            self.params,
            cfg.optim,
            updates,
            self.dist,
            step=lambda: self.step + 1,
            hint=self._divergence_hint,
        )
        targets = choose_step_targets(
            algorithm,
            cfg.rollout.group_size,
            cfg.reward.correctness_component,
            algo.minibatches,
            self.dist,
            mask_truncated=algo.mask_truncated,
        )
        self.passes = PolicyLogprobs(
            self.model,
            self.device,
            cfg.rollout.group_size,
            cfg.rollout.temperature,
            reference=algorithm.needs_reference,
            autocast=autocast_dtype(cfg.train.precision),
        )
        return Learner(
            _learn_settings(cfg), algorithm, targets, self.passes, self.updater, self.dist
        )

    def _logs(self, resume_step: int | None) -> None:
        """metrics.jsonl (and rollouts.jsonl, heldout.jsonl): rank 0 writes, the others hold silent
        logs."""
        cfg, main = self.config, self.dist.is_main
        self.log = (
            MetricsLog(self.run_dir, cfg.train.tensorboard, resume_step, cfg.train.report_to)
            if main
            else _SilentLog(self.run_dir / "metrics.jsonl")
        )
        self.rollout_log = None
        if cfg.train.log_rollouts:
            path = self.run_dir / "rollouts.jsonl"
            self.rollout_log = JsonlLog(path, resume_step) if main else _SilentLog(path)
        self.heldout = HeldoutEvaluation.from_config(
            cfg, self.generator, self.tokenizer, self.rewards, self.dist, self.run_dir, resume_step
        )

    # -----------------------------------------------------------------------------------------
    # The loop

    def train(self) -> Path:
        """Runs until train.max_steps, checkpointing; returns the final adapter/model folder.

        Ctrl-C (SIGINT) or SIGTERM finishes the current step, writes a checkpoint and returns;
        `groupwise train ... --resume` continues from there.
        """
        cfg = self.config
        bar = tqdm(
            total=cfg.train.max_steps,
            initial=self.step,
            disable=not (cfg.train.progress and self.dist.is_main),
            desc="train",
            unit="step",
            dynamic_ncols=True,
        )
        progress = ProgressLine()
        with self._graceful_stop(), self._memory_session():
            if self.heldout is not None and self.step == 0:
                self.heldout.at(0)
            try:
                while not self._done() and not self._stop_requested:
                    record = self._logged_step()
                    bar.update(1)
                    bar.set_postfix(progress.postfix(record))
                self._save_at_stop()
            finally:
                self.batches.close()
        bar.close()
        return self._finish()

    def _logged_step(self) -> dict[str, Any]:
        """One step, its held-out evaluation when due, its logs and checkpoint; its record."""
        record, samples = self.train_step()
        self.step += 1
        if self.heldout is not None:
            self.batches.settle()  # the evaluation's generator is the sampler's
            record.update(self.heldout.at(self.step, last=self._done()))
        # A signal may reach one process only; all stop after the same step.
        self._stop_requested = self.dist.any(self._stop_requested)
        self.log.write(record)
        if self.rollout_log is not None:
            self.rollout_log.write(samples)
        if self.step % self.config.train.save_every == 0 or self._done():
            self.save()
        if self.memory is not None:
            self.memory.after_step(self.step)
        return record

    def _done(self, steps_after: int = 0) -> bool:
        """train.max_steps reached, or train.max_completions sampled; steps_after=1: once the
        step being taken is done."""
        budget = self.config.train.max_completions
        sampled = self.batches.position * self.config.rollout.group_size
        return self.step + steps_after >= self.config.train.max_steps or 0 < budget <= sampled

    def _save_at_stop(self) -> None:
        """A checkpoint when a signal stopped the run early (the last step's is written)."""
        if self._stop_requested and not self._done():
            self.save()
        else:
            self.stop_signal = None  # a signal during the last step: the run finished

    def _finish(self) -> Path:
        """Close the logs; export when the run is done (train.max_steps or max_completions).
        Returns the final folder (or the run folder when stopped early)."""
        self.log.close()
        if self.rollout_log is not None:
            self.rollout_log.close()
        final = self.export() if self._done() else self.run_dir
        self.dist.close()
        self.close()
        return final

    def close(self) -> None:
        """Release the run folder's lock if this trainer opened it (train() does at its end)."""
        if self._owns_folder and self.folder is not None:
            self.folder.close()

    def train_step(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """One step: rollout -> score (dynamic sampling: draws until the step has its groups)
        -> learn (targets, updates).

        Returns (metrics, samples): the step's metrics.jsonl line and its rollouts.jsonl line.
        """
        t_start = time.perf_counter()
        sampled = self.batches.next()
        if self.config.rollout.staleness and not self._done(steps_after=1):
            self.batches.sample_ahead()  # with the weights before this step's update
        t_scored = time.perf_counter()
        problems, batch = sampled.problems, sampled.batch
        learned = self.learn(batch)
        generation = sampled.seconds_generation
        seconds = (t_start, t_start + generation, t_scored, time.perf_counter())
        tokens = int(self.dist.sum([int(batch.rollouts.completion_mask.sum())])[0])
        step = self.step + 1
        epoch = self.sampler.epoch(self.batches.position)
        metrics = step_metrics(step, epoch, len(problems), batch, learned, tokens, seconds)
        metrics.update(sampled.cost)
        metrics.update(engine_record(self.generator), peak_memory_gib=peak_memory_gib())
        return metrics, step_samples(step, problems, batch, learned)

    def learn(self, batch: ScoredBatch) -> Learned:
        """The batch's targets and updates (train.learner.Learner.learn)."""
        return self.learner.learn(batch, self.step)

    def _divergence_hint(self) -> str:
        return (
            f"lower optim.lr (now {self.config.optim.lr:g}) and start a new run (--overwrite or "
            "another train.output_dir); the checkpoints so far are intact"
        )

    # -----------------------------------------------------------------------------------------
    # Checkpoints, resume, export

    def _state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "optimizer": self.updater.optimizer.state_dict(),
            "scheduler": self.updater.scheduler.state_dict(),
            "lambda_reg": _state_of(self.lambda_reg),
            "adaptive_entropy": _state_of(self.adaptive_entropy),
            "rng": rng_state(),
            "data_position": self.batches.position,
            "ahead": self.batches.ahead_state(),
        }

    def save(self) -> Path | None:
        """RUN/checkpoints/step-N (rank 0 writes it; the other processes return None)."""
        if not self.dist.is_main:
            return None
        return save_checkpoint(
            self.run_dir,
            self.step,
            self.model,
            self.tokenizer,
            self._state(),
            keep=self.config.train.keep_checkpoints,
        )

    def _resume(self) -> bool:
        """Load the newest intact checkpoint (rank 0's folder chose it and set damaged newer
        ones aside; the other ranks look for the same one). False when there is none."""
        point = self.folder.resume_point if self.folder is not None else None
        checkpoint = (point or find_resume_point(self.run_dir)).checkpoint
        if checkpoint is None:
            return False
        state = None
        if self.folder is not None:  # read when the folder was opened; not kept past here
            state, self.folder.trainer_state = self.folder.trainer_state, None
        state = state if state is not None else load_trainer_state(checkpoint)
        load_weights_into(self.model, checkpoint)
        try:
            self.updater.optimizer.load_state_dict(state["optimizer"])
            self.updater.scheduler.load_state_dict(state["scheduler"])
            if self.lambda_reg is not None:
                self.lambda_reg.load_state_dict(state["lambda_reg"])
            if self.adaptive_entropy is not None:
                self.adaptive_entropy.load_state_dict(state["adaptive_entropy"])
            set_rng_state(state["rng"])
            self.step = int(state["step"])
            self.batches.position, self.batches.step = int(state["data_position"]), self.step
            self.batches.load_ahead_state(state.get("ahead"))
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as error:
            raise CheckpointError(
                f"{checkpoint / TRAINER_STATE}: does not fit this run "
                f"({type(error).__name__}: {' '.join(str(error).split())[:200]})"
            ) from None
        return True

    def export(self) -> Path:
        """RUN/final/adapter (or model), and RUN/final/merged when train.export_merged (written
        by rank 0; every process returns the path)."""
        final = self.run_dir / "final"
        target = final / ("adapter" if self.config.model.lora else "model")
        if not self.dist.is_main:
            return target
        self.model.save_pretrained(target)
        self.tokenizer.save_pretrained(target)
        if self.config.train.export_merged:
            save_merged(self.model, self.tokenizer, final / "merged")
        return target

    @contextmanager
    def _memory_session(self) -> Iterator[None]:
        """RUN/memory.json (rank 0, on a CPU), written as training starts; it says the session
        finished when train() ends, by an error too: only a kill leaves it unfinished."""
        if self.estimate is not None and self.dist.is_main:
            self.memory = MemoryNote(self.run_dir, *self.estimate)
        try:
            yield
        finally:
            if self.memory is not None:
                self.memory.finished()

    @contextmanager
    def _graceful_stop(self) -> Iterator[None]:
        def request_stop(signum: int, frame: Any) -> None:
            if self._stop_requested:
                raise KeyboardInterrupt
            self._stop_requested = True
            self.stop_signal = signum

        try:
            previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
        except ValueError:  # not the main thread: signals stay as they are
            previous = {}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


def _state_of(rule: AdaptiveLambda | AdaptiveEntropy | None) -> dict[str, Any] | None:
    """An adaptive rule's state for the checkpoint; None where the run has no such rule."""
    return None if rule is None else rule.state_dict()


def _learn_settings(cfg: Config) -> LearnSettings:
    """What the learner needs of the config; the rollout correction None when off."""
    algo, rollout = cfg.algorithm, cfg.rollout
    return LearnSettings(
        group_size=rollout.group_size,
        micro_batch_size=cfg.train.micro_batch_size,
        minibatches=algo.minibatches,
        num_iterations=algo.num_iterations,
        kl_coef=algo.kl_coef,
        aggregation=algo.aggregation,
        loss=algo.loss_settings(rollout.max_new_tokens),
        log_all_wrong_gradient=cfg.train.log_all_wrong_gradient,
        importance=_rollout_correction(rollout) if rollout.importance_correction else None,
        mask_truncated=algo.mask_truncated,
        logp_old_from_sampler=rollout.logp_old == "sampler",
    )


def _rollout_correction(rollout: RolloutConfig) -> ImportanceCorrection:
    return ImportanceCorrection(
        rollout.importance_mode, rollout.importance_cap, rollout.importance_floor
    )


class _SilentLog:
    """What the processes other than rank 0 hold in place of a log: its path, no writes."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, record: dict[str, Any]) -> None:
        """Rank 0 writes every process's numbers; nothing to do here."""

    def close(self) -> None:
        """Nothing is open."""
