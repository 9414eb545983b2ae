"""The worker pool of answer checking: judgements (`groupwise.rewards.checking`) run in a pool
of worker processes (docs/algorithms.md §2 and §3).

math-verify's own timeouts use `signal.alarm`, which fails off the main thread and is caught
inside math-verify as a silent False; they are disabled (`parsing_timeout=None`,
`timeout_seconds=None`). Instead every judgement runs in a worker process of an
`AnswerChecker`: a persistent pool of fresh interpreters (started with `subprocess`, so no fork
of a threaded parent and no re-import of the caller's `__main__`), one task at a time per
worker with a per-task deadline; a worker that overruns is killed and replaced and its item
gets a "timeout" verdict. This works from any thread and inside other worker processes.
Workers run in a session of their own, so a terminal's Ctrl-C reaches only the parent, which
shuts them down (docs/guides/train.md, "Ctrl-C").

Every call names a checking mode (`checking.MODES`: "groupwise", the default, "math_verify",
"amir_official", "amir_eval"); each task carries its mode, so one pool serves them all.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from tqdm import tqdm

from groupwise.rewards.checking import (
    DEFAULT_MODE,
    UNPARSED,
    CheckingMode,
    Verdict,
    answers_equivalent,
    checking_mode,
    judge,
)

__all__ = [
    "DEFAULT_MODE",
    "STATUSES",
    "AnswerChecker",
    "Verdict",
    "answers_equivalent",
    "check_answers",
    "is_correct",
    "judge",
    "summarize",
]

logger = logging.getLogger(__name__)

STATUSES: tuple[str, ...] = ("correct", "wrong", "no_answer", "timeout", "error")

DEFAULT_TIMEOUT = 5.0
_STARTUP_TIMEOUT = 120.0


# ---------------------------------------------------------------------------------------------
# The worker side


def _exit_when_orphaned(parent: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(0)


def serve(task_fd: int, result_fd: int, memory_limit_mb: int | None = None) -> None:
    """Worker main loop: receive (index, completion, gold, mode), send back (index, Verdict).

    Started by `AnswerChecker` in a fresh interpreter; exits when the task pipe closes or the
    parent disappears. Python's limit on int/str conversion is lifted (a 5,000-digit answer is
    a number, not an error): the parent's deadline bounds the cost instead.
    """
    tasks = Connection(task_fd, writable=False)
    results = Connection(result_fd, readable=False)
    if memory_limit_mb:
        import resource

        limit = memory_limit_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)
    # Timeouts are the parent's job; math-verify warns once per process that its own are off.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    import math_verify  # noqa: F401  (import before "ready" so deadlines do not pay for it)

    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True).start()
    results.send(("ready", os.getpid()))
    while True:
        try:
            index, completion, gold, mode = tasks.recv()
        except (EOFError, OSError):
            return
        try:
            verdict = judge(completion, gold, mode)
        except Exception as error:  # RecursionError and MemoryError included
            verdict = Verdict("error", None, f"{type(error).__name__}: {error}"[:300])
        results.send((index, verdict))


# ---------------------------------------------------------------------------------------------
# The parent side


class _Worker:
    """One worker process and its two pipes; `index`/`deadline` describe its current task."""

    def __init__(self, memory_limit_mb: int | None) -> None:
        task_read, task_write = os.pipe()
        result_read, result_write = os.pipe()
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [package_root, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
        )
        code = (
            "from groupwise.rewards.pool import serve; "
            f"serve({task_read}, {result_write}, {memory_limit_mb!r})"
        )
        try:
            # A session of its own: the terminal's Ctrl-C (SIGINT to the whole foreground
            # process group) and Ctrl-\ reach the parent only, which finishes its step and
            # stops the workers itself (close(); an orphaned worker exits within a second).
            self.process = subprocess.Popen(
                [sys.executable, "-c", code],
                pass_fds=(task_read, result_write),
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        finally:
            os.close(task_read)
            os.close(result_write)
        self.tasks = Connection(task_write, readable=False)
        self.results = Connection(result_read, writable=False)
        self.started = time.monotonic()
        self.ready = False
        self.index: int | None = None
        self.deadline = 0.0

    def kill(self) -> None:
        for connection in (self.tasks, self.results):
            connection.close()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


class AnswerChecker:
    """A reusable pool of answer-checking worker processes with hard per-answer timeouts.

    workers: processes (each holds one task at a time). timeout: default seconds per answer.
    memory_limit_mb: address-space cap of each worker (a runaway sympy computation fails with
    MemoryError, reported as an "error" verdict, instead of eating the machine); None: no cap.
    Use as a context manager or call `close()`; processes start on the first `check`.
    Thread-safe: concurrent `check` calls run one after the other.
    """

    def __init__(
        self,
        workers: int = 2,
        timeout: float = DEFAULT_TIMEOUT,
        memory_limit_mb: int | None = 4096,
    ) -> None:
        if workers < 1:
            raise ValueError(f"AnswerChecker: workers must be >= 1, got {workers}")
        if timeout <= 0:
            raise ValueError(f"AnswerChecker: timeout must be > 0 seconds, got {timeout}")
        self.workers = workers
        self.timeout = timeout
        self.memory_limit_mb = memory_limit_mb
        self.restarts = 0
        """Workers replaced so far (after a timeout or a crash)."""
        self._pool: list[_Worker] = []
        self._lock = threading.Lock()
        self._owner = os.getpid()

    def __enter__(self) -> AnswerChecker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker processes; a later `check` starts new ones."""
        with self._lock:
            self._stop_all()

    def _stop_all(self) -> None:
        if os.getpid() == self._owner:
            for worker in self._pool:
                worker.kill()
        self._pool = []

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        self._pool[self._pool.index(worker)] = _Worker(self.memory_limit_mb)
        self.restarts += 1

    def check(
        self,
        completions: Sequence[str],
        golds: Sequence[str],
        timeout: float | None = None,
        progress: bool = False,
        mode: str = DEFAULT_MODE,
    ) -> list[Verdict]:
        """One Verdict per (completion, gold) pair, in order; never raises for an answer.

        timeout: seconds each answer may take (default: the checker's); an overrun gives a
        "timeout" verdict. progress: show a tqdm bar with the running counts. mode: the
        checking mode (`checking.MODES`; an unknown name raises naming the valid ones). Logs a
        warning when some answers timed out or errored.
        """
        if len(completions) != len(golds):
            raise ValueError(f"check: {len(completions)} completions but {len(golds)} gold answers")
        limit = self.timeout if timeout is None else timeout
        if limit <= 0:
            raise ValueError(f"check: timeout must be > 0 seconds, got {limit}")
        checking = checking_mode(mode)
        with self._lock:
            try:
                verdicts = self._run(list(completions), list(golds), limit, progress, checking)
            except BaseException:
                # An interrupted batch leaves tasks in flight: start clean next time.
                self._stop_all()
                raise
        _warn_if_unusual(verdicts, limit)
        return verdicts

    def _run(
        self,
        completions: list[str],
        golds: list[str],
        limit: float,
        progress: bool,
        mode: CheckingMode,
    ) -> list[Verdict]:
        if os.getpid() != self._owner:
            self._pool, self._owner = [], os.getpid()
        while len(self._pool) < self.workers:
            self._pool.append(_Worker(self.memory_limit_mb))
        verdicts: list[Verdict | None] = [None] * len(completions)
        queue = deque(range(len(completions)))
        counts: Counter[str] = Counter()
        bar = tqdm(total=len(completions), desc="checking answers", disable=not progress)

        def finish(index: int, verdict: Verdict) -> None:
            verdicts[index] = verdict
            counts[verdict.status] += 1
            bar.update(1)
            if progress:
                bar.set_postfix(counts, refresh=False)

        while queue or any(worker.index is not None for worker in self._pool):
            now = time.monotonic()
            for worker in self._pool:
                if worker.ready and worker.index is None and queue:
                    index = queue.popleft()
                    worker.index, worker.deadline = index, now + limit
                    # A dead worker shows up as EOF on its result pipe below.
                    with contextlib.suppress(OSError):
                        worker.tasks.send((index, completions[index], golds[index], mode.name))
            deadlines = [w.deadline for w in self._pool if w.index is not None]
            deadlines += [w.started + _STARTUP_TIMEOUT for w in self._pool if not w.ready]
            wait_for = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            ready = wait([w.results for w in self._pool], timeout=wait_for)
            for worker in [w for w in self._pool if w.results in ready]:
                try:
                    message = worker.results.recv()
                except (EOFError, OSError):
                    self._worker_died(worker, finish, completions, golds, mode)
                    continue
                if message[0] == "ready":
                    worker.ready = True
                else:
                    index, verdict = message
                    worker.index = None
                    finish(index, verdict)
            now = time.monotonic()
            for worker in list(self._pool):
                if worker.index is not None and now >= worker.deadline:
                    index = worker.index
                    self._replace(worker)
                    finish(
                        index,
                        Verdict(
                            "timeout",
                            mode.extract(completions[index], golds[index]),
                            f"no verdict within {limit:g} s; worker restarted",
                        ),
                    )
                elif not worker.ready and now >= worker.started + _STARTUP_TIMEOUT:
                    raise RuntimeError(
                        f"answer-checking worker (pid {worker.process.pid}) did not start "
                        f"within {_STARTUP_TIMEOUT:g} s"
                    )
        bar.close()
        return [v for v in verdicts if v is not None]

    def _worker_died(
        self,
        worker: _Worker,
        finish: Any,
        completions: list[str],
        golds: list[str],
        mode: CheckingMode,
    ) -> None:
        code = worker.process.poll()
        if not worker.ready:
            worker.kill()
            raise RuntimeError(
                f"answer-checking worker exited with code {code} before it was ready; "
                f"its traceback is on stderr (is groupwise importable by {sys.executable}?)"
            )
        index = worker.index
        self._replace(worker)
        if index is not None:
            finish(
                index,
                Verdict(
                    "error",
                    mode.extract(completions[index], golds[index]),
                    f"worker died (exit code {code}); worker restarted",
                ),
            )


def summarize(verdicts: Sequence[Verdict]) -> dict[str, int]:
    """Counts per status (every status present, zeros included) plus "unparsed": verdicts
    reached without math-verify understanding one side (see `Verdict.detail`)."""
    counts = dict.fromkeys(STATUSES, 0)
    for verdict in verdicts:
        counts[verdict.status] += 1
    counts[UNPARSED] = sum(verdict.detail.startswith(UNPARSED) for verdict in verdicts)
    return counts


def _warn_if_unusual(verdicts: Sequence[Verdict], limit: float) -> None:
    # Only what went wrong warns: answers compared as text (math-verify could not parse one
    # side) are common and expected, and are counted where they are shown (the training
    # bar's and summary's answer checks, summarize()).
    counts = summarize(verdicts)
    if counts["timeout"] or counts["error"]:
        logger.warning(
            "answer checking: of %d answers %d timed out (> %g s), %d errored, %d were "
            "compared as text because math-verify could not parse them",
            len(verdicts),
            counts["timeout"],
            limit,
            counts["error"],
            counts[UNPARSED],
        )


# ---------------------------------------------------------------------------------------------
# Module-level functions over a shared, lazily started checker

_default: AnswerChecker | None = None
_default_lock = threading.Lock()


def _default_checker(workers: int | None) -> AnswerChecker:
    global _default
    with _default_lock:
        if _default is not None and workers is not None and _default.workers != workers:
            _default.close()
            _default = None
        if _default is None:
            _default = AnswerChecker(workers=workers or 2)
        return _default


def _close_default() -> None:
    if _default is not None:
        _default.close()


atexit.register(_close_default)


def check_answers(
    completions: Sequence[str],
    golds: Sequence[str],
    workers: int | None = 2,
    timeout: float = DEFAULT_TIMEOUT,
    progress: bool = False,
    *,
    mode: str = DEFAULT_MODE,
) -> list[Verdict]:
    """Verdicts for a batch under checking mode `mode` ("groupwise", "math_verify",
    "amir_official", "amir_eval": `checking.MODES`), checked in the shared pool of `workers`
    processes (created on first use, resized when `workers` changes, stopped at exit; None:
    keep the current size). See `AnswerChecker.check`."""
    return _default_checker(workers).check(
        completions, golds, timeout=timeout, progress=progress, mode=mode
    )


def is_correct(
    completion: str, gold: str, timeout: float = DEFAULT_TIMEOUT, *, mode: str = DEFAULT_MODE
) -> bool:
    """Whether `completion`'s final answer is equivalent to `gold` under checking mode `mode`
    (docs/algorithms.md §2).

    Never raises for any completion and returns within about `timeout` seconds (a timeout or
    an error counts as not correct; `check_answers` reports which it was).
    """
    return check_answers([completion], [gold], workers=None, timeout=timeout, mode=mode)[0].correct
