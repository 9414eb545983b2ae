"""What produced an evaluation, recorded in its results.json (`results["config"]
["provenance"]`, and every sampling session in `results["config"]["sessions"]` and
provenance.jsonl; docs/guides/evaluate.md, "What produced the numbers"): the package versions,
the engine, the model's and the adapter's identity (content hashes of local folders, the
cached hub revision of a hub id), the training run, checkpoint step and how that checkpoint
was chosen, the sampling settings and the seed.

`groupwise report` reads it back to show the settings side by side, and refuses to compare
evaluations whose settings change pass@k (`PASS_AT_K_SETTINGS`) unless told to.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from groupwise.evaluation.config import EvalConfig
from groupwise.records import iter_jsonl

SESSIONS_FILE = "provenance.jsonl"
"""One line per session that sampled into an output folder: its provenance, when it started
and how many problems it had to sample (a resumed folder lists each session)."""

PACKAGES = ("groupwise", "torch", "transformers", "peft", "vllm", "trl", "numpy")
"""The packages whose versions a results.json records (None: not installed)."""

PASS_AT_K_SETTINGS = (
    "temperature",
    "top_p",
    "max_new_tokens",
    "prompt",
    "checking",
    "stop",
    "limit",
)
"""Settings of an evaluation that change what its pass@k measures (the sampling distribution,
what counts as correct, which problems): two evaluations that differ in one of them do not
estimate the same quantity for the same model. n only changes the intervals (pass@k is
unbiased for every n >= k), the seed only the draw, the model and adapter are what is
compared."""

SAMPLING_SETTINGS = (
    "n",
    "temperature",
    "top_p",
    "max_new_tokens",
    "stop",
    "seed",
    "seeding",
    "dtype",
    "prompt",
    "api",
)

_CHUNK = 1 << 20


def package_versions() -> dict[str, str | None]:
    """{package: installed version or None} of PACKAGES, and "python"."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def folder_digest(folder: Path) -> dict[str, Any]:
    """{"sha256", "files", "bytes"} of every file under `folder`: sha256 over the sorted
    relative paths and each file's content, so the same weights give the same digest wherever
    they lie."""
    digest = hashlib.sha256()
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    total = 0
    for path in files:
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
                total += len(chunk)
        digest.update(b"\0")
    return {"sha256": digest.hexdigest(), "files": len(files), "bytes": total}


def model_identity(config: EvalConfig) -> dict[str, Any]:
    """How the model is identified: a groupwise alias (its weights ship with groupwise or a
    package), a local folder (content digest), a hub id (the commit of its cached snapshot, None
    when not cached), or a name served at base_url (the openai engine: only the name is known)."""
    from groupwise.models import model_aliases

    name = config.model
    if config.engine == "openai":
        return {"name": name, "kind": "served", "base_url": config.base_url}
    if name in model_aliases():
        return {"name": name, "kind": "alias"}
    folder = Path(name).expanduser()
    if folder.is_dir():
        return {"name": name, "kind": "folder", **folder_digest(folder)}
    return {"name": name, "kind": "hub", "revision": _cached_revision(name)}


def _cached_revision(repo_id: str) -> str | None:
    """The commit of the hub snapshot the cache holds for `repo_id` (what loading used), or
    None when it is not cached or not a valid id."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, local_files_only=True)).name
    except Exception:  # not cached, not a valid id, offline: the revision is unknown
        return None


def adapter_identity(adapter: str | None) -> dict[str, Any] | None:
    """The adapter's digest, and where it comes from: {"path", "sha256", "files", "bytes",
    "run", "step", "chosen"}. run: the training run folder (None for a bare adapter folder);
    step: the checkpoint's step (the final adapter: the last step in the run's metrics.jsonl);
    chosen: how this adapter stands in its run (the final one, or checkpoint step-N and whether
    it is the newest)."""
    if adapter is None:
        return None
    path = Path(adapter)
    out: dict[str, Any] = {"path": str(path), **folder_digest(path)}
    parent = path.parent
    if path.name == "adapter" and parent.name == "final":
        run = parent.parent
        out.update(run=str(run), step=_last_logged_step(run), chosen="the run's final adapter")
    elif path.name == "adapter" and parent.parent.name == "checkpoints":
        run = parent.parent.parent
        step = _step_of(parent.name)
        newest = max(
            (s for p in parent.parent.glob("step-*") if (s := _step_of(p.name))), default=0
        )
        final = (run / "final" / "adapter").is_dir()
        chosen = f"checkpoint step-{step}" + (
            " (the run's newest checkpoint" if step == newest else f" (newest: step-{newest}"
        )
        chosen += "; the run has a final adapter)" if final else "; no final adapter)"
        out.update(run=str(run), step=step, chosen=chosen)
    else:
        out.update(run=None, step=None, chosen="an adapter folder")
    return out


def _step_of(name: str) -> int | None:
    text = name.removeprefix("step-")
    return int(text) if name.startswith("step-") and text.isdigit() else None


def _last_logged_step(run: Path) -> int | None:
    """The "step" of the last whole line of run/metrics.jsonl, None if there is none."""
    path = run / "metrics.jsonl"
    if not path.is_file():
        return None
    for line in reversed(path.read_text(encoding="utf-8", errors="replace").splitlines()):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line of a run still writing
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            return int(row["step"])
    return None


def provenance(config: EvalConfig) -> dict[str, Any]:
    """The provenance record of an evaluation with settings `config` (see the module doc)."""
    settings = config.to_dict()
    return {
        "versions": package_versions(),
        "engine": config.engine,
        "model": model_identity(config),
        "adapter": adapter_identity(config.adapter),
        "sampling": {key: settings[key] for key in SAMPLING_SETTINGS},
        "checking": config.checking,
        "seed": config.seed,
    }


def record_session(config: EvalConfig, output_dir: Path, pending: int) -> dict[str, Any]:
    """Append this sampling session's provenance to output_dir/provenance.jsonl (with its start
    time, UTC, and the problems it has to sample) and return the provenance record."""
    record = provenance(config)
    line = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "problems_to_sample": pending,
        **record,
    }
    with (output_dir / SESSIONS_FILE).open("a", encoding="utf-8") as sink:
        sink.write(json.dumps(line) + "\n")
    return record


def read_sessions(output_dir: Path) -> list[dict[str, Any]]:
    """The sessions of output_dir/provenance.jsonl, oldest first ([] when there is none; a
    torn last line is skipped)."""
    path = output_dir / SESSIONS_FILE
    if not path.is_file():
        return []
    return [row for _, row in iter_jsonl(path, on_torn_tail=lambda line: None)]
