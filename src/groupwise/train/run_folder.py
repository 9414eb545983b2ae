"""A run folder belongs to one run: locked while it trains, never silently reused, and resumed
only with the settings it was started with (docs/design.md, "Output folder of a run").

`RunFolder.open(path, config, mode)` does all of it before any model or data is loaded:

- lock: an exclusive `flock` on RUN/.lock, which holds the holder's pid. The OS drops the lock
  when the process ends, however it ends (kill -9 included), so no stale lock is ever left; a
  second training into the folder is refused with the holder's pid. POSIX only (fcntl).
- mode "fresh": the folder must be new or empty (the lock file aside), or hold only what a
  start that never finished a step leaves behind (`never_started`: config.yaml, empty logs, a
  held-out evaluation of step 0), which the new run takes over (docs/guides/train.md, "A start
  that failed").
- mode "overwrite": the folder's contents are deleted first (only a folder that holds a run:
  config.yaml, metrics.jsonl or checkpoints/; anything else is refused, never deleted).
- mode "resume": the config must equal the saved config.yaml key by key, except the keys of
  RESUMABLE_CHANGES; every other change is refused by name (old -> new; a rollout.engine that
  `auto` resolves otherwise here than where the run started is explained, with what resumes
  it: `engine_note`). Then the newest
  intact checkpoint is chosen (checkpoint.find_resume_point) and its trainer state read
  (weights only: a state holding anything else is refused, the folder unchanged), the damaged
  newer ones are renamed step-N.damaged with the reason in `notes`, and metrics.jsonl /
  rollouts.jsonl are cut back to its step (metrics_log.trim_jsonl: what is removed is set
  aside, never deleted).
  A resume into a new or empty folder, or one that never started, starts the run (so a
  scheduler can always pass --resume); a folder whose checkpoints are all damaged is refused.
- config.yaml is then written (atomically) with the config the run will use.

`close(discard_unstarted=True)` (what `groupwise train` does when it ends) removes what the run
wrote when it never finished a step, and the folder itself when this run created it: a start
that fails (a missing model or data folder) leaves nothing that blocks the corrected command.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Literal

import yaml

from groupwise.train.checkpoint import (
    CheckpointError,
    ResumePoint,
    find_resume_point,
    load_trainer_state,
    set_aside,
)
from groupwise.train.config import Config
from groupwise.train.config_file import config_to_dict
from groupwise.train.distributed import processes_from_environment
from groupwise.train.metrics_log import METRICS_FILE, ROLLOUTS_FILE, trim_jsonl
from groupwise.train.preflight import installed_engine

__all__ = [
    "CONFIG_FILE",
    "LOCK_FILE",
    "RESUMABLE_CHANGES",
    "RunFolder",
    "RunFolderError",
    "never_started",
]

CONFIG_FILE = "config.yaml"
LOCK_FILE = ".lock"
CHECKPOINTS = "checkpoints"
# What a start leaves before its first step is logged: the config, the logs opened (empty), the
# held-out evaluation of the untrained policy (step 0) and TensorBoard's folder. A folder holding
# nothing else never trained (never_started).
HELDOUT_FILE = "heldout.jsonl"
STARTUP_FILES = (CONFIG_FILE, CONFIG_FILE + ".tmp", METRICS_FILE, ROLLOUTS_FILE, HELDOUT_FILE)
STARTUP_FOLDERS = ("tensorboard", "wandb")  # train.report_to's local folders
Mode = Literal["fresh", "resume", "overwrite"]

# The settings a resumed run may change, and why that is sound: each is applied as given, and
# none changes what the finished steps did or what the next ones compute (beyond float
# rounding of a different batching or device).
RESUMABLE_CHANGES: dict[str, str] = {
    "train.max_steps": "lengthens or shortens the run (not below the checkpoint's step); a "
    "cosine or linear schedule then runs over the new length from the current step on",
    "train.max_completions": "lengthens or shortens the run's budget of completions sampled",
    "train.save_every": "when checkpoints are written",
    "train.keep_checkpoints": "how many checkpoints are kept",
    "train.progress": "the progress bar",
    "train.tensorboard": "the TensorBoard copy of metrics.jsonl, from the resumed step on",
    "train.report_to": "the loggers that mirror metrics.jsonl, from the resumed step on",
    "train.export_merged": "what is exported at the end",
    "train.output_dir": "the run folder itself, which a path can name in several ways",
    "reward.workers": "how many processes check answers; verdicts do not depend on it",
    "rollout.batch_size": "how many completions are decoded together; each prompt's samples "
    "come from its own seeded stream",
    "model.device": "where the run computes (resuming on another machine)",
    "train.micro_batch_size": "how many completions a forward and backward pass takes; the "
    'update is their sum, the same for any value (memory: docs/guides/train.md, "Memory")',
    "rollout.vllm_memory": "how much memory vLLM reserves; each prompt's samples come from its "
    "own seeded stream",
}


class RunFolderError(Exception):
    """The run folder cannot be used as asked; the message names the folder and what to do."""


class RunFolder:
    """An opened run folder: holds its lock until `close()` (or the process ends).

    path: the folder. resume_point: the checkpoint a resumed run starts from (mode "resume";
    None otherwise), and trainer_state its trainer_state.pt (checkpoint.load_trainer_state:
    weights only, read before the folder is changed). notes: what opening did that the user
    should know (checkpoints skipped and why, log lines set aside), one line each.
    """

    def __init__(self, path: Path, lock_fd: int, created: bool = False) -> None:
        self.path = path
        self.resume_point: ResumePoint | None = None
        self.trainer_state: dict[str, Any] | None = None  # resume_point's, read on open
        self.notes: list[str] = []
        self._lock_fd: int | None = lock_fd
        self._created = created  # open() made the folder: a start that never ran removes it

    @classmethod
    def open(cls, path: str | Path, config: Config, mode: Mode = "fresh") -> RunFolder:
        """Creates `path` if needed, locks it, applies `mode` (module docstring) and writes
        config.yaml. Raises RunFolderError (nothing in the folder changed) when the folder is
        locked by another process, or `mode` does not fit what the folder holds."""
        if mode not in ("fresh", "resume", "overwrite"):
            raise ValueError(f"mode must be fresh, resume or overwrite, got {mode!r}")
        if not str(path).strip():  # Path("") would be the working folder
            raise RunFolderError("train.output_dir is empty: name the run folder")
        path = Path(path)
        created = not path.exists()
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise RunFolderError(f"cannot create the run folder {path}: {error}") from None
        folder = cls(path, _lock(path), created)
        try:
            if mode != "overwrite" and folder._contents() and never_started(path):
                folder._take_unstarted()
            if mode == "fresh":
                folder._require_empty()
            elif mode == "overwrite":
                folder._clear()
            else:
                folder._prepare_resume(config)
            folder._write_config(config)
        except BaseException:
            folder.close()
            raise
        return folder

    def close(self, discard_unstarted: bool = False) -> None:
        """Releases the lock. With `discard_unstarted`, a run that never finished a step
        (`never_started`) first removes what it wrote, and the folder too when open() created
        it, so that nothing blocks the next start (the lock file goes too). Otherwise the lock
        file stays."""
        if self._lock_fd is None:
            return
        if discard_unstarted and never_started(self.path):
            self._remove_startup_files()
            if not self._contents():
                # Safe while locked: a process that opened the old lock file finds, once it holds
                # the lock, that the path no longer names that file, and starts over (_lock).
                (self.path / LOCK_FILE).unlink(missing_ok=True)
                os.close(self._lock_fd)
                self._lock_fd = None
                if self._created:
                    with contextlib.suppress(OSError):  # something appeared meanwhile: it stays
                        self.path.rmdir()
                return
        os.close(self._lock_fd)  # closing the only descriptor releases the flock
        self._lock_fd = None

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -----------------------------------------------------------------------------------------

    def _contents(self) -> list[Path]:
        return sorted(p for p in self.path.iterdir() if p.name != LOCK_FILE)

    def _holds_a_run(self) -> bool:
        return any((self.path / name).exists() for name in (CONFIG_FILE, METRICS_FILE, CHECKPOINTS))

    def _take_unstarted(self) -> None:
        """A previous start here never finished a step: its files go and this run takes the
        folder (so neither a fresh start nor --resume is refused for what never ran)."""
        shown = ", ".join(p.name for p in self._contents())
        self._remove_startup_files()
        self.notes.append(
            f"{self.path} held a start that never finished a step ({shown}); this run takes it"
        )

    def _remove_startup_files(self) -> None:
        for entry in self._contents():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()

    def _require_empty(self) -> None:
        contents = self._contents()
        if contents:
            shown = ", ".join(p.name for p in contents[:4]) + (", ..." if len(contents) > 4 else "")
            raise RunFolderError(
                f"{self.path} is not empty ({shown}): continue its run with --resume, start it "
                "over with --overwrite (deletes what is there), or choose another train.output_dir"
            )

    def _clear(self) -> None:
        contents = self._contents()
        if contents and not self._holds_a_run():
            raise RunFolderError(
                f"{self.path} is not empty and holds no run ({CONFIG_FILE}, {METRICS_FILE} or "
                f"{CHECKPOINTS}/): --overwrite deletes only run folders; choose another "
                "train.output_dir"
            )
        for entry in contents:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        if contents:
            self.notes.append(f"--overwrite: deleted the previous run in {self.path}")

    def _prepare_resume(self, config: Config) -> None:
        saved_path = self.path / CONFIG_FILE
        if not saved_path.is_file():
            if self._contents():
                raise RunFolderError(
                    f"{self.path} has no {CONFIG_FILE}, so the settings of its run are unknown "
                    "and it cannot be resumed; start over with --overwrite, or choose another "
                    "train.output_dir"
                )
            self.resume_point = ResumePoint(None)
            self.notes.append(f"nothing to resume in {self.path}: the run starts at step 0")
            return
        _check_unchanged(_read_saved(saved_path), config, saved_path)

        point = find_resume_point(self.path)
        if point.checkpoint is None and point.skipped:
            reasons = "; ".join(f"{c.name}: {why}" for c, why in point.skipped)
            raise RunFolderError(
                f"no intact checkpoint in {self.path / CHECKPOINTS} ({reasons}); start over with "
                "--overwrite, or choose another train.output_dir"
            )
        if point.step > config.train.max_steps:
            raise RunFolderError(
                f"train.max_steps={config.train.max_steps} is below the step of the checkpoint "
                f"to resume from ({point.checkpoint}); give train.max_steps >= {point.step}"
            )
        if point.checkpoint is not None:
            # Read (weights only) before anything in the folder changes: a refused or unreadable
            # state stops the resume with the folder as it was.
            try:
                self.trainer_state = load_trainer_state(point.checkpoint)
            except CheckpointError as error:
                raise RunFolderError(str(error)) from None
        for checkpoint, why in point.skipped:
            moved = set_aside(checkpoint)
            self.notes.append(f"skipped checkpoint {checkpoint.name} ({why}); moved to {moved}")
        for name in (METRICS_FILE, ROLLOUTS_FILE):
            if (self.path / name).is_file():
                self.notes.extend(trim_jsonl(self.path / name, point.step))
        self.resume_point = point
        self.notes.append(
            f"resuming from {point.checkpoint} (step {point.step})"
            if point.checkpoint is not None
            else f"no checkpoint in {self.path} yet: the run starts at step 0"
        )

    def _write_config(self, config: Config) -> None:
        target = self.path / CONFIG_FILE
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(yaml.safe_dump(config_to_dict(config), sort_keys=False), encoding="utf-8")
        os.replace(tmp, target)


def never_started(path: Path) -> bool:
    """True when the folder `path` holds only what a start leaves before its first step:
    STARTUP_FILES and STARTUP_FOLDERS, with no logged step (metrics.jsonl and rollouts.jsonl
    empty, heldout.jsonl of step 0 only). A checkpoint, final/, any other file, or a log line
    that cannot be read counts as progress: such a folder stays protected."""
    for entry in path.iterdir():
        if entry.name == LOCK_FILE:
            continue
        if entry.name in STARTUP_FOLDERS and entry.is_dir() and not entry.is_symlink():
            continue
        if entry.name not in STARTUP_FILES or not entry.is_file() or entry.is_symlink():
            return False
        if entry.name in (METRICS_FILE, ROLLOUTS_FILE) and entry.read_bytes().strip():
            return False
        if entry.name == HELDOUT_FILE and not _only_step_0(entry):
            return False
    return True


def _only_step_0(path: Path) -> bool:
    for line in path.read_bytes().splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            return False
        if not isinstance(record, dict) or record.get("step") != 0:
            return False
    return True


def _lock(path: Path) -> int:
    """An open descriptor of path/.lock holding an exclusive flock, the pid written in it.

    A start that never ran removes its lock file while holding the lock (RunFolder.close); a
    process that opened that file meanwhile sees, once it holds the lock, that the path names
    another file (or none), and opens it again."""
    lock_path = path / LOCK_FILE
    for _ in range(100):
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:  # the folder itself was removed meanwhile
            path.mkdir(parents=True, exist_ok=True)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = _holder_pid(fd)
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunFolderError(f"cannot lock {lock_path}: {error}") from None
            raise RunFolderError(
                f"{path} is in use by another training (pid {holder}); wait for it to end or "
                "stop it, or choose another train.output_dir"
            ) from None
        if _same_file(fd, lock_path):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd
        os.close(fd)
    raise RunFolderError(f"cannot lock {lock_path}: it keeps being removed")


def _same_file(fd: int, path: Path) -> bool:
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _holder_pid(fd: int) -> str:
    # The holder writes its pid right after taking the lock: give it a moment when it is empty.
    for _ in range(10):
        text = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
        if text:
            return text
        time.sleep(0.02)
    return "unknown"


def _read_saved(path: Path) -> dict[str, Any]:
    try:
        saved = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise RunFolderError(f"{path} cannot be read ({error}); it cannot be resumed") from None
    if not isinstance(saved, dict) or not all(isinstance(v, dict) for v in saved.values()):
        raise RunFolderError(f"{path} is not a saved groupwise config; it cannot be resumed")
    return saved


# Options added since a run may have been saved whose default differs from what that run did:
# the value an older config.yaml without the key stands for.
ADDED_OPTIONS_BEFORE: dict[str, Any] = {"algorithm.advantage_std": "population"}


def _check_unchanged(saved: dict[str, Any], config: Config, where: Path) -> None:
    """Raise RunFolderError naming every key (old -> new) whose value differs from the saved
    config, except RESUMABLE_CHANGES. A key the saved config lacks (an option added since) counts
    as what the run did without it: ADDED_OPTIONS_BEFORE, else the option's default."""
    now = _flat(config_to_dict(config))
    defaults = {**_flat(config_to_dict(Config())), **ADDED_OPTIONS_BEFORE}
    before = _flat(saved)
    changed = [
        f"{key}: {before.get(key, defaults[key])!r} -> {value!r}"
        + (engine_note(before.get(key, defaults[key]), value) if key == "rollout.engine" else "")
        + (PRECISION_NOTE if key in ("train.precision", "rollout.dtype") else "")
        for key, value in now.items()
        if key not in RESUMABLE_CHANGES and before.get(key, defaults[key]) != value
    ]
    if changed:
        raise RunFolderError(
            f"--resume continues the run with the settings in {where}; these differ: "
            + "; ".join(changed)
            + f". A resumed run may change only {', '.join(RESUMABLE_CHANGES)}; to change the "
            "others, start a new run (another train.output_dir, or --overwrite)"
        )


PRECISION_NOTE = (
    " (where the config says train.precision: auto or rollout.dtype: precision, it is "
    "bfloat16 on a machine that multiplies bfloat16 in hardware, else float32 and auto: resume "
    "with the run's value given explicitly)"
)
"""Why a precision may differ on resume: train.precision.resolved_precision."""


def engine_note(started: str, now: str) -> str:
    """Why rollout.engine reads `now` here but `started` in the run's config.yaml when `now` is
    what `auto` resolves to here (train.preflight.installed_engine: vllm where vLLM is
    installed and the run is one process, else transformers), with what resumes the run; ""
    when `now` is not auto's value here. The saved config holds the resolved engine, so whether
    the config said auto is not known here: the note says "where the config says auto"."""
    if now != installed_engine() or started == now or now == "auto":
        return ""
    if now == "vllm":
        return (
            " (where the config says rollout.engine: auto, as the GSM8K presets do, it resolves "
            "to vllm here, where vLLM is installed; the run started with transformers: resume "
            "it with rollout.engine=transformers given explicitly, or where it started)"
        )
    processes = processes_from_environment()
    here = (
        f"this run has {processes} training processes"
        if processes > 1
        else "this environment has no vLLM"
    )
    return (
        " (where the config says rollout.engine: auto, as the GSM8K presets do, it resolves to "
        f"transformers here: {here}; the run started with vllm: resume it as one process in an "
        "environment with vLLM installed, as the one it started in, e.g. .venv-vllm; the "
        "engine cannot change on resume)"
    )


def _flat(config: dict[str, Any]) -> dict[str, Any]:
    """{"section.key": value} of a nested config mapping (values that are mappings stay whole)."""
    return {
        f"{section}.{key}": value for section, keys in config.items() for key, value in keys.items()
    }
