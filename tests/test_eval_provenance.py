"""Provenance in results.json (groupwise.evaluation.provenance) and `groupwise report`'s refusal
to compare evaluations whose settings change pass@k (docs/guides/evaluate.md)."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

import pytest
import torch

from groupwise.cli import main as cli
from groupwise.evaluation import EvalConfig
from groupwise.evaluation.provenance import (
    adapter_identity,
    folder_digest,
    model_identity,
    package_versions,
)
from groupwise.report import settings_mismatches


def _adapter(folder: Path, content: bytes = b"weights") -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")
    (folder / "adapter_model.safetensors").write_bytes(content)
    return folder


def test_folder_digest_is_content_not_place(tmp_path: Path) -> None:
    one = folder_digest(_adapter(tmp_path / "a"))
    assert one == folder_digest(_adapter(tmp_path / "elsewhere" / "b"))
    assert one["files"] == 2 and one["bytes"] == len(b"{}") + len(b"weights")
    assert one["sha256"] != folder_digest(_adapter(tmp_path / "c", b"weightz"))["sha256"]


def test_adapter_identity_names_step_and_how_it_was_chosen(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _adapter(run / "checkpoints" / "step-2" / "adapter")
    _adapter(run / "checkpoints" / "step-5" / "adapter")
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 6}\n{"step": 7')  # torn last line
    older = adapter_identity(str(run / "checkpoints" / "step-2" / "adapter"))
    assert (older["run"], older["step"]) == (str(run), 2)
    assert older["chosen"] == "checkpoint step-2 (newest: step-5; no final adapter)"
    newest = adapter_identity(str(run / "checkpoints" / "step-5" / "adapter"))
    assert newest["chosen"] == "checkpoint step-5 (the run's newest checkpoint; no final adapter)"
    _adapter(run / "final" / "adapter")
    final = adapter_identity(str(run / "final" / "adapter"))
    assert (final["step"], final["chosen"]) == (6, "the run's final adapter")
    bare = adapter_identity(str(_adapter(tmp_path / "bare")))
    assert (bare["run"], bare["step"], bare["chosen"]) == (None, None, "an adapter folder")
    assert adapter_identity(None) is None


def test_versions_and_model_identity(tmp_path: Path) -> None:
    versions = package_versions()
    assert versions["torch"] == metadata.version("torch")
    assert torch.__version__.startswith(versions["torch"])
    assert versions["groupwise"] == metadata.version("groupwise")
    assert model_identity(EvalConfig(model="tiny-random"))["kind"] == "alias"
    folder = _adapter(tmp_path / "model")
    local = model_identity(EvalConfig(model=str(folder)))
    assert local["kind"] == "folder" and local["sha256"] == folder_digest(folder)["sha256"]
    served = EvalConfig(model="m", engine="openai", api="chat", base_url="http://x/v1")
    assert model_identity(served) == {"name": "m", "kind": "served", "base_url": "http://x/v1"}


def test_results_json_carries_provenance(tmp_path: Path) -> None:
    from test_eval_calibration import PROBLEMS, run

    run(tmp_path, PROBLEMS)
    record = json.loads((tmp_path / "results.json").read_text())["config"]["provenance"]
    assert record["engine"] == "transformers" and record["seed"] == 0
    assert record["sampling"]["temperature"] == 0.6 and record["sampling"]["n"] == 4
    assert record["model"]["kind"] == "hub" and record["adapter"] is None
    assert set(record["versions"]) >= {"groupwise", "torch", "transformers", "vllm", "trl"}
    # the session that sampled is recorded before it samples; a rerun with nothing left to
    # sample adds none and keeps that session's record as the results' provenance
    [session] = json.loads((tmp_path / "results.json").read_text())["config"]["sessions"]
    assert session["problems_to_sample"] == 4 and session["started"].endswith("Z")
    again = run(tmp_path, PROBLEMS)["config"]
    assert len(again["sessions"]) == 1
    assert len((tmp_path / "provenance.jsonl").read_text().splitlines()) == 1
    assert {k: session[k] for k in record} == record


def _results(folder: Path, **config: object) -> Path:
    folder.mkdir(parents=True)
    settings = {"model": "m", "n": 2, "ks": [1], "temperature": 0.6, "top_p": 1.0, **config}
    bench = {"n": 2, "problems": 1, "pass@1": 0.5, "pass@1_ci": [0.0, 1.0]}
    (folder / "results.json").write_text(json.dumps({"gsm8k": bench, "config": settings}))
    return folder


def test_report_refuses_evaluations_that_measure_other_things(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _results(tmp_path / "a", prompt="amir")
    b = _results(tmp_path / "b", temperature=1.0, prompt="boxed")
    page = tmp_path / "page.md"
    assert cli(["report", f"A={a}", f"B={b}", "--output", str(page)]) == 2
    err = capsys.readouterr().err
    assert "temperature: A 0.6, B 1.0" in err and "prompt: A 'amir', B 'boxed'" in err
    assert "--allow-mismatch" in err and not page.exists()
    assert cli(["report", f"A={a}", f"B={b}", "--output", str(page), "--allow-mismatch"]) == 0
    assert "Warning: these evaluations differ in settings that change pass@k" in page.read_text()
    # n, the seed and the model may differ: pass@k is unbiased for any n >= k
    c = _results(tmp_path / "c", n=8, seed=3, model="other", prompt="amir")
    assert cli(["report", f"A={a}", f"C={c}", "--output", str(page)]) == 0
    assert "| A | m |" in page.read_text()
    # results.json written before `stop` existed had none
    assert (
        settings_mismatches(
            {
                "x": {"config": {"temperature": 0.6}},
                "y": {"config": {"temperature": 0.6, "stop": []}},
            }
        )
        == []
    )


def test_a_folder_sampled_with_the_former_amir_wording_is_not_resumed_into_a_mix(
    tmp_path: Path,
) -> None:
    """config.json written before prompt_digest: "amir" then meant the wording now named
    amir_groupwise, so resuming it under today's amir (the official text) is refused by name;
    another prompt, whose text did not change, resumes."""
    from test_eval_calibration import PROBLEMS, run

    from groupwise.evaluation import ResumeMismatch

    for prompt, refused in (("amir", True), ("boxed", False)):
        folder = tmp_path / prompt
        run(folder, PROBLEMS[:1], prompt=prompt)
        saved = json.loads((folder / "config.json").read_text())
        del saved["prompt_digest"]
        (folder / "config.json").write_text(json.dumps(saved))
        if refused:
            with pytest.raises(ResumeMismatch, match="prompt_digest: saved '"):
                run(folder, PROBLEMS, prompt=prompt)
        else:
            assert run(folder, PROBLEMS, prompt=prompt)["toy"]["problems"] == 4
