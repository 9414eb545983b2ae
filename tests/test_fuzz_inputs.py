"""Property-based fuzzing of the input surface: `groupwise train` config files and `key=value`
overrides, `groupwise eval` flags, and what `report` (table and page), `analyze coverage`, `eval
--regrade`, an eval resume and a train resume read from folders (metrics.jsonl, rollouts.jsonl,
heldout.jsonl, config.yaml, samples.jsonl, results.json and the other eval files, checkpoints)
after random damage: truncated, lines replaced by junk or by JSON of another shape, fields given
values of other types, files emptied or deleted.

Whatever the input, the command ends in success (exit 0) or in a one-line error with exit
status 2: no traceback, no hang, and no file that was there before is removed or altered (the
folder hashed before and after; a resumed run's documented moves, damaged checkpoints renamed
and log lines set aside, keep every byte). The entry functions are called in process; two
subprocesses check the real exit status. Examples are fixed (the "fixed" hypothesis profile of
tests/conftest.py: derandomized), and their counts keep the module within about a minute.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from test_heldout import run_overrides

import groupwise.evaluation.command as eval_command
from groupwise.cli import main
from groupwise.train.checkpoint import (
    TRAINER_STATE,
    CheckpointError,
    find_resume_point,
    load_trainer_state,
    load_weights_into,
)
from groupwise.train.config import Config
from groupwise.train.config_file import config_to_dict, load_config
from groupwise.train.run_folder import RunFolder, RunFolderError

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


def fuzz(examples: int) -> settings:
    """This module's hypothesis settings: `examples` inputs, no deadline (a loaded machine), and
    no shrinking: a failure is reported as drawn, within the module's minute, not minutes later."""
    return settings(
        max_examples=examples,
        deadline=None,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# --- running a command in process ---------------------------------------------------------------


class WouldSample(BaseException):
    """Raised in place of opening an engine: every check before sampling has passed."""


def command(argv: list[str]) -> tuple[int, str]:
    """(exit status, stderr) of `groupwise ARGV` run in process; argparse's exit is a status."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as stop:
            code = stop.code
    return code, err.getvalue()


def assert_clean(code: Any, err: str, argv: list[str]) -> None:
    """Success, or one error line (after the command's notes, each one line) and exit 2; for
    `analyze`, also exit 1 with one line: an analysis that produced nothing it was asked for
    (docs/guides/evaluate.md, "Analyses"), as when damage leaves two runs no problem in common."""
    assert "Traceback" not in err, (argv, err)
    assert code in ((0, 1, 2) if argv[0] == "analyze" else (0, 2)), (argv, code, err)
    if code in (1, 2):
        lines = err.strip().split("\n")  # (str.splitlines would also split at \x1e, \x85, ...)
        assert lines, (argv, f"exit {code} without a message")
        assert lines[-1].startswith(f"groupwise {argv[0]}"), (argv, err)


def folder_bytes(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under `folder` by relative path (the lock file aside: it holds the
    pid of whoever last opened the folder)."""
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def assert_kept(before: dict[str, str], folder: Path) -> None:
    """Every file of `before` is still there with the same bytes (new files may appear)."""
    after = folder_bytes(folder)
    changed = [name for name, digest in before.items() if after.get(name) != digest]
    assert not changed, f"removed or altered: {changed}"


# --- inputs ---------------------------------------------------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-3, max_value=3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "auto", "cpu", "cuda", "grpo", "lens", "arith", "mid", "1e-4", "~"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def _keys(tree: dict[str, Any], prefix: str = "") -> list[str]:
    return [
        key
        for name, value in tree.items()
        for key in (
            _keys(value, f"{prefix}{name}.")
            if isinstance(value, dict) and value
            else [f"{prefix}{name}"]
        )
    ]


# reward.plugins imports the modules it names: no fuzzed value goes there.
CONFIG_KEYS = [k for k in _keys(config_to_dict(Config())) if not k.startswith("reward.plugins")]
KEYS = st.one_of(
    st.sampled_from(CONFIG_KEYS),
    st.sampled_from(CONFIG_KEYS).map(lambda k: k.rsplit(".", 1)[0]),  # a whole section
    st.sampled_from(CONFIG_KEYS).map(lambda k: k + ".x"),  # below an option
    st.text(alphabet="abcdefghij._-", min_size=0, max_size=12),
)


@st.composite
def config_texts(draw: st.DrawFn) -> str:
    """A shipped config with one to three values replaced, a key added, or its text cut."""
    path = draw(st.sampled_from(CONFIGS))
    text = path.read_text(encoding="utf-8")
    kind = draw(st.sampled_from(["values", "cut", "junk"]))
    if kind == "cut":
        return text[: draw(st.integers(0, len(text)))]
    if kind == "junk":
        return draw(
            st.text(max_size=80) | st.binary(max_size=40).map(lambda b: b.decode("latin-1"))
        )
    data = yaml.safe_load(text)
    for _ in range(draw(st.integers(1, 3))):
        node = data
        *sections, last = draw(KEYS).split(".")
        for part in sections:
            node = node.setdefault(part, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node[last] = draw(VALUES)
    return yaml.safe_dump(data, allow_unicode=True)


OVERRIDES = st.lists(
    st.one_of(
        st.builds(
            lambda k, v: f"{k}={yaml.safe_dump(v, default_flow_style=True).strip()}", KEYS, VALUES
        ),
        st.builds(lambda k, v: f"{k}={v}", KEYS, st.text(max_size=12)),
        st.text(max_size=16),
    ),
    min_size=1,
    max_size=3,
)


# --- groupwise train: config files and overrides --------------------------------------------------


@fuzz(120)
@given(text=config_texts())
def test_train_config_files(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        argv = ["train", "--config", str(path), "--print-config"]
        assert_clean(*command(argv), argv)


@fuzz(120)
@given(overrides=OVERRIDES, preset=st.sampled_from([None, *CONFIGS]))
def test_train_overrides(overrides: list[str], preset: Path | None) -> None:
    argv = ["train", *(["--config", str(preset)] if preset else []), *overrides, "--print-config"]
    assert_clean(*command(argv), argv)


# --- groupwise eval: flags ------------------------------------------------------------------------

EVAL_FLAGS = {
    "--model": st.sampled_from(["tiny-random", "arith-base", "no/such-model", "./nowhere", ""]),
    "--benchmarks": st.sampled_from(
        ["arith", "gsm8k", "arith@level=x", "nobench", "math500,arith", ""]
    ),
    "--n": st.integers(-2, 5).map(str),
    "--k": st.sampled_from(["1", "1,2", "0", "-1", "3,1", "x", "", "1,,2"]),
    "--limit": st.integers(-2, 3).map(str),
    "--temperature": st.sampled_from(["0", "-1", "nan", "inf", "0.6", "x"]),
    "--top-p": st.sampled_from(["0", "1.5", "nan", "1.0", "-0.1"]),
    "--max-new-tokens": st.integers(-1, 4).map(str),
    "--seed": st.sampled_from(["0", "-1", "x", "99999999999999999999"]),
    "--engine": st.sampled_from(["transformers", "vllm", "openai", "nope"]),
    "--base-url": st.sampled_from(["http://127.0.0.1:9/v1", "ftp://x", "", "localhost"]),
    "--checking": st.sampled_from(["math_verify", "amir_official", "nope"]),
    "--prompt": st.sampled_from(["amir", "boxed", "plain", "nope"]),
    "--preset": st.sampled_from(["amir", "lens", "nope"]),
    "--batch-size": st.integers(-1, 3).map(str),
    "--workers": st.integers(-1, 2).map(str),
    "--device": st.sampled_from(["cpu", "cuda", "tpu", ""]),
    "--data-dir": st.sampled_from(["/nonexistent", str(REPO.parent / "shared" / "data")]),
    "--stop": st.sampled_from(["", "\n", "###"]),
    "--adapter": st.sampled_from(["/nonexistent", "."]),
    "--vllm-arg": st.sampled_from(["x=1", "tensor_parallel_size=2", "=", "y"]),
    "--request-timeout": st.sampled_from(["0", "-1", "nan", "5"]),
}


@fuzz(120)
@given(
    chosen=st.dictionaries(st.sampled_from(sorted(EVAL_FLAGS)), st.just(None), max_size=6),
    data=st.data(),
)
def test_eval_flags(chosen: dict[str, None], data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["eval", "--output", str(Path(tmp) / "out"), "--quiet"]
        for flag in chosen:
            argv += [flag, data.draw(EVAL_FLAGS[flag], label=flag)]
        assert_clean(*eval_without_engines(argv), argv)


def eval_without_engines(argv: list[str]) -> tuple[int, str]:
    """`command(argv)` with engines not opened: a command that gets that far has accepted
    every flag and would now load the model and sample; that counts as success here."""
    with mock.patch.object(eval_command, "open_sampler", side_effect=WouldSample):
        try:
            return command(argv)
        except WouldSample:
            return 0, ""


# --- folders: a real training run and a real evaluation, then damaged -----------------------------


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A 3-step arith-base run (held-out evaluations, rollouts, a checkpoint per step) and an
    evaluation of its final weights on 3 arith problems, written by the commands themselves."""
    root = tmp_path_factory.mktemp("fuzz")
    run = root / "run"
    code, err = command(
        ["train", *run_overrides(run, "train.log_rollouts=true", "train.save_every=1")]
    )
    assert code == 0, err
    code, err = command(eval_argv(run, root / "eval"))
    assert code == 0, err
    return {"run": run, "eval": root / "eval"}


def eval_argv(run: Path, output: Path) -> list[str]:
    """`groupwise eval` of the run's final weights on 3 arith problems, 2 samples each."""
    flags = ["--benchmarks", "arith", "--limit", "3", "--n", "2", "--k", "1,2"]
    return [
        "eval",
        "--model",
        str(run),
        *flags,
        "--max-new-tokens",
        "24",
        "--output",
        str(output),
        "--quiet",
    ]


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=5,
)


@st.composite
def damage(draw: st.DrawFn, files: list[str]) -> Callable[[Path], None]:
    """One random harm to one file of a folder (given relative names)."""
    name = draw(st.sampled_from(files))
    kind = draw(st.sampled_from(["cut", "line", "field", "append", "empty", "delete", "bytes"]))
    fraction = draw(st.floats(0, 1))
    junk = draw(
        st.binary(max_size=30)
        | JSON_VALUES.map(lambda v: json.dumps(v).encode())
        | st.sampled_from([b"{", b"[]", b'{"step": "x"}', b'{"step": -1}', b"NaN", b"\xff\xfe"])
    )
    key, value = draw(st.text(max_size=8)), draw(JSON_VALUES)
    index = draw(st.integers(0, 50))

    def harm(folder: Path) -> None:
        path = folder / name
        if not path.is_file():
            return
        data = path.read_bytes()
        lines = data.split(b"\n")
        line = index % len(lines)
        if kind == "cut":
            path.write_bytes(data[: int(len(data) * fraction)])
        elif kind == "line":
            lines[line] = junk
            path.write_bytes(b"\n".join(lines))
        elif kind == "field":
            path.write_bytes(b"\n".join(_set_field(text, key, value, fraction) for text in lines))
        elif kind == "append":
            path.write_bytes(data + junk)
        elif kind == "empty":
            path.write_bytes(b"")
        elif kind == "delete":
            path.unlink()
        else:
            spot = int(len(data) * fraction) % max(len(data), 1)
            path.write_bytes(data[:spot] + junk + data[spot + len(junk) :])

    return harm


def _set_field(line: bytes, key: str, value: Any, fraction: float) -> bytes:
    """`line` (a JSON object) with one existing key (chosen by `fraction`) or `key` set to
    `value`; any other line as it is."""
    try:
        obj = json.loads(line)
    except ValueError:
        return line
    if not isinstance(obj, dict):
        return line
    keys = sorted(obj)
    chosen = keys[int(fraction * len(keys)) % len(keys)] if keys and fraction < 0.8 else key
    obj[chosen] = value
    return json.dumps(obj).encode()


RUN_FILES = ["metrics.jsonl", "rollouts.jsonl", "heldout.jsonl", "config.yaml"]
EVAL_FILES = ["samples.jsonl", "results.json", "config.json", "problems.jsonl", "provenance.jsonl"]


@contextlib.contextmanager
def damaged_copy(
    made: dict[str, Path], harms: list[Callable[[Path], None]]
) -> Iterator[dict[str, Path]]:
    """Copies of the run and the evaluation with `harms` applied to both, removed after."""
    with tempfile.TemporaryDirectory() as tmp:
        copies = {
            name: Path(shutil.copytree(made[name], Path(tmp) / name)) for name in ("run", "eval")
        }
        for harm in harms:
            for folder in copies.values():
                harm(folder)
        copies["out"] = Path(tmp) / "out"
        yield copies


@fuzz(60)
@given(harms=st.lists(damage(RUN_FILES), min_size=1, max_size=2))
def test_report_table_of_a_damaged_run(made: dict[str, Path], harms) -> None:
    with damaged_copy(made, harms) as folders:
        before = folder_bytes(folders["run"])
        argv = ["report", str(folders["run"]), "--each"]
        assert_clean(*command(argv), argv)
        assert_kept(before, folders["run"])


@fuzz(20)
@given(harms=st.lists(damage(RUN_FILES + EVAL_FILES), min_size=1, max_size=2))
def test_report_of_a_damaged_run_and_evaluation(made: dict[str, Path], harms) -> None:
    with damaged_copy(made, harms) as folders:
        before = {name: folder_bytes(folders[name]) for name in ("run", "eval")}
        page = folders["out"] / "page.md"
        argv = ["report", str(folders["run"]), f"eval={folders['eval']}", "--output", str(page)]
        assert_clean(*command(argv), argv)
        for name in ("run", "eval"):
            assert_kept(before[name], folders[name])


@fuzz(40)
@given(harms=st.lists(damage(EVAL_FILES), min_size=1, max_size=2))
def test_analyze_coverage_of_damaged_evaluations(made: dict[str, Path], harms) -> None:
    with damaged_copy(made, harms) as folders:
        intact = folders["out"].parent / "intact"
        shutil.copytree(made["eval"], intact)
        before = folder_bytes(folders["eval"])
        argv = ["analyze", "coverage", f"a={folders['eval']}", f"b={intact}"]
        argv += ["--output", str(folders["out"])]
        assert_clean(*command(argv), argv)
        assert_kept(before, folders["eval"])


@fuzz(40)
@given(harms=st.lists(damage(EVAL_FILES), min_size=1, max_size=2))
def test_eval_resume_of_a_damaged_evaluation(made: dict[str, Path], harms) -> None:
    """The same command again on the damaged folder: it resumes (or only rewrites the results),
    or refuses in one line; what it samples is no business of this test (no engine opens)."""
    with damaged_copy(made, harms) as folders:
        before = folder_bytes(folders["eval"])
        argv = eval_argv(folders["run"], folders["eval"])
        assert_clean(*eval_without_engines(argv), argv)
        # results.json, results.md and the figures are the command's output: it rewrites them
        outputs = {"results.json", "results.md", "results.png", "calibration.png"}
        assert_kept({k: v for k, v in before.items() if k not in outputs}, folders["eval"])


@fuzz(12)
@given(harms=st.lists(damage(EVAL_FILES), min_size=1, max_size=2))
def test_regrade_of_a_damaged_evaluation(made: dict[str, Path], harms) -> None:
    with damaged_copy(made, harms) as folders:
        before = folder_bytes(folders["eval"])
        argv = ["eval", "--output", str(folders["eval"]), "--regrade", "--checking", "math_verify"]
        assert_clean(*command([*argv, "--workers", "1"]), argv)
        assert_kept(before, folders["eval"])


@fuzz(60)
@given(
    harms=st.lists(
        damage(["metrics.jsonl", "rollouts.jsonl", "heldout.jsonl"]), min_size=1, max_size=3
    )
)
def test_resume_of_a_run_with_damaged_logs_keeps_every_line(made: dict[str, Path], harms) -> None:
    """Opening a run folder to resume it: refused in one line, or the logs cut back to the
    checkpoint with every removed line set aside (metrics_log.trim_jsonl)."""
    with damaged_copy(made, harms) as folders:
        run = folders["run"]
        lines = {name: _lines(run / name) for name in ("metrics.jsonl", "rollouts.jsonl")}
        before = folder_bytes(run)
        config = load_config(
            None, run_overrides(run, "train.log_rollouts=true", "train.save_every=1")
        )
        try:
            RunFolder.open(run, config, "resume").close()
        except RunFolderError as error:
            assert "\n" not in str(error)
            assert_kept(before, run)
            return
        for name, kept in lines.items():
            after = _lines(run / name) + _lines(run / f"{name}.set-aside")
            assert sorted(after) == sorted(kept), name


def _lines(path: Path) -> list[bytes]:
    return (
        [line for line in path.read_bytes().split(b"\n") if line.strip()] if path.is_file() else []
    )


@fuzz(40)
@given(
    name=st.sampled_from([TRAINER_STATE, "model/model.safetensors"]),
    cut=st.floats(0, 1),
    flip=st.integers(0, 10**6),
)
def test_a_damaged_checkpoint_loads_or_is_refused_by_name(
    made: dict[str, Path], name: str, cut: float, flip: int
) -> None:
    """Truncated or with one byte changed: resume passes it over when its manifest no longer
    matches, and reading it directly (a manifest updated to match) either succeeds or is a
    CheckpointError naming the file."""
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(shutil.copytree(made["run"], Path(tmp) / "run"))
        newest = find_resume_point(run).checkpoint
        path = newest / name
        data = bytearray(path.read_bytes())
        if cut < 0.5:
            data = data[: int(len(data) * cut * 2)]
        else:
            data[flip % len(data)] ^= 0xFF
        path.write_bytes(bytes(data))
        assert find_resume_point(run).checkpoint != newest  # its manifest no longer matches
        try:
            if name == TRAINER_STATE:
                load_trainer_state(newest)
            else:
                load_weights_into(_arith_model(), newest)
        except CheckpointError as error:
            assert str(path) in str(error) or str(path.parent) in str(error)
            assert "\n" not in str(error)


_MODEL: list[torch.nn.Module] = []


def _arith_model() -> torch.nn.Module:
    from groupwise.models import load_model

    if not _MODEL:
        _MODEL.append(load_model("arith-base")[0])
    return _MODEL[0]


# --- the real exit status -------------------------------------------------------------------------


def test_the_real_commands_exit_2_in_one_line(made: dict[str, Path], tmp_path: Path) -> None:
    run = Path(shutil.copytree(made["run"], tmp_path / "run"))
    (run / "metrics.jsonl").write_bytes(b'{"step": 1, "group_mixed": "x"}\n')
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: {max_steps: -3}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for argv in (
        [sys.executable, "-m", "groupwise", "report", str(run)],
        [sys.executable, "-m", "groupwise", "train", "--config", str(bad), "--print-config"],
    ):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 2, (argv, done.stderr)
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
