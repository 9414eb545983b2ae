"""Held-out evaluation during training (groupwise.train.heldout): the paired difference and its
interval by hand, the config checks, when a run evaluates and what it logs, that step 0 is the
untrained policy sampled from fixed per-problem streams, that processes split the problems
without changing the counts, and that a resumed run logs what an uninterrupted one does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from groupwise.config import ConfigError
from groupwise.metrics import mean_interval
from groupwise.models import load_model
from groupwise.records import iter_jsonl
from groupwise.rewards import RewardSuite
from groupwise.rollout import TransformersGenerator
from groupwise.train.config_file import load_config
from groupwise.train.heldout import (
    BOOTSTRAP,
    HeldoutEvaluation,
    accuracy_difference,
    read_heldout,
)
from groupwise.train.preflight import load_run_config
from groupwise.train.trainer import Trainer

HELDOUT = "data.heldout={benchmark: arith, split: test, options: {level: easy, size: 6}}"


def run_overrides(run_dir: Path, *extra: str) -> list[str]:
    """A seconds-long run of the shipped arith-base policy on arith, evaluated on 6 problems."""
    return [
        "model.name=arith-base",
        "model.lora=false",
        "data.benchmark=arith",
        "data.options={level: easy, size: 50, seed: 1}",
        "data.prompt=plain",
        HELDOUT,
        "rollout.group_size=4",
        "rollout.questions_per_step=2",
        "rollout.max_new_tokens=40",
        "reward.weights={binary: 1.0}",
        "reward.correctness_component=binary",
        "reward.workers=1",
        "optim.lr=1e-3",
        "optim.schedule=constant",  # the same learning rates whatever max_steps (resume test)
        "optim.warmup_ratio=0",
        "train.micro_batch_size=8",
        "train.max_steps=3",
        "train.eval_every=2",
        "train.eval_samples=2",
        "train.progress=false",
        "train.log_rollouts=false",
        f"train.output_dir={run_dir}",
        *extra,
    ]


def logged(path: Path) -> list[dict]:
    return [row for _, row in iter_jsonl(path)]


def test_accuracy_difference_by_hand() -> None:
    # 3 problems, n = 4: before 0/4, 4/4, 2/4 (accuracy 1/2), after 4/4, 4/4, 2/4 (5/6).
    d = accuracy_difference([0, 4, 2], [4, 4, 2], 4)
    assert d.before == pytest.approx(0.5) and d.after == pytest.approx(5 / 6)
    assert d.delta == pytest.approx(1 / 3)
    # The per-problem differences are 1, 0, 0: every resampled mean is k/3 for k in 0..3.
    assert 0.0 <= d.low <= d.delta <= d.high <= 1.0
    assert min(abs(d.low * 3 - round(d.low * 3)), abs(d.high * 3 - round(d.high * 3))) < 1e-12
    same = accuracy_difference([1, 2, 3], [1, 2, 3], 4)
    assert (same.delta, same.low, same.high) == (0.0, 0.0, 0.0)
    shifted = accuracy_difference([0, 1, 2], [1, 2, 3], 4)  # every problem gains 1/4
    assert shifted.low == pytest.approx(0.25) and shifted.high == pytest.approx(0.25)
    with pytest.raises(ValueError, match="3 and 2 problems"):
        accuracy_difference([0, 1, 2], [1, 2], 4)


def test_mean_interval_covers_the_mean_and_repeats() -> None:
    values = np.random.default_rng(1).random(200)
    low, high = mean_interval(values, bootstrap=BOOTSTRAP)
    assert low < values.mean() < high
    # about 1.96 standard errors each side
    se = values.std(ddof=1) / np.sqrt(values.size)
    assert high - low == pytest.approx(2 * 1.96 * se, rel=0.1)
    assert tuple(mean_interval(values, bootstrap=BOOTSTRAP)) == (low, high)
    assert tuple(mean_interval([0.25] * 5, bootstrap=BOOTSTRAP)) == (0.25, 0.25)
    with pytest.raises(ValueError, match="non-empty"):
        mean_interval([])


def test_the_former_mean_interval_still_works_with_a_deprecation_note() -> None:
    import groupwise.train.heldout as heldout

    values = np.random.default_rng(1).random(50)
    with pytest.warns(DeprecationWarning, match="use groupwise.metrics.mean_interval"):
        former = heldout.mean_interval
    assert former(values, 0.9, 3) == tuple(mean_interval(values, 0.9, BOOTSTRAP, 3))


def test_a_damaged_evaluation_line_is_refused_naming_the_file_and_line(tmp_path: Path) -> None:
    good = '{"step": 0, "n": 4, "correct": [1, 4]}\n'
    for bad in ('{"step": "x", "n": 4, "correct": [1]}', '{"step": 2, "n": 4, "correct": [5]}'):
        (tmp_path / "heldout.jsonl").write_text(good + bad + "\n")
        with pytest.raises(ValueError, match=r"heldout.jsonl:2: expected an object with an int"):
            read_heldout(tmp_path)


def test_config_checks_name_the_key(tmp_path: Path) -> None:
    base = run_overrides(tmp_path)
    config = load_config(None, base)
    assert config.train.eval_every == 2 and config.data.heldout["split"] == "test"
    with pytest.raises(ConfigError, match="train.eval_every=2 needs data.heldout"):
        load_config(None, [*base, "data.heldout={}"])
    with pytest.raises(ConfigError, match="data.heldout: arith:train is a split the run trains"):
        load_config(None, [*base, "data.heldout={benchmark: arith, split: train}"])
    with pytest.raises(ConfigError, match=r"data.heldout: unknown key\(s\) \['level'\]"):
        load_config(None, [*base, "data.heldout={benchmark: arith, level: mid}"])
    with pytest.raises(ConfigError, match="data.heldout.split: benchmark 'arith' has no split"):
        load_run_config(None, [*base, "data.heldout={benchmark: arith, split: dev}"])
    with pytest.raises(ConfigError, match="train.eval_samples must be >= 1, got 0"):
        load_config(None, [*base, "train.eval_samples=0"])
    # no evaluation needs no held-out problems
    assert load_config(None, [*base, "train.eval_every=0", "data.heldout={}"]).data.heldout == {}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3-step run evaluated at steps 0, 2 and 3."""
    run_dir = tmp_path_factory.mktemp("heldout") / "run"
    Trainer(load_run_config(None, run_overrides(run_dir))).train()
    return run_dir


def test_a_run_evaluates_before_every_n_steps_and_at_the_end(run: Path) -> None:
    evaluations = read_heldout(run)
    assert [e["step"] for e in evaluations] == [0, 2, 3]
    for e in evaluations:
        assert e["n"] == 2 and len(e["correct"]) == len(e["problem_ids"]) == 6
        assert all(0 <= c <= 2 for c in e["correct"])
        assert e["accuracy"] == pytest.approx(sum(e["correct"]) / 12)
    metrics = logged(run / "metrics.jsonl")
    with_heldout = {r["step"]: r for r in metrics if "heldout_accuracy" in r}
    assert sorted(with_heldout) == [2, 3]
    for e in evaluations[1:]:
        record = with_heldout[e["step"]]
        assert record["heldout_accuracy"] == e["accuracy"]
        assert (record["heldout_problems"], record["heldout_samples"]) == (6, 2)
        assert record["seconds_heldout"] > 0


def evaluation_of(model: Any, tokenizer: Any, run_dir: Path, dist: Any = None) -> HeldoutEvaluation:
    from groupwise.train.distributed import Distributed

    config = load_config(None, run_overrides(run_dir))
    generator = TransformersGenerator(model, tokenizer, batch_size=64)
    rewards = RewardSuite({"binary": 1.0}, workers=1)
    return HeldoutEvaluation.from_config(
        config, generator, tokenizer, rewards, dist or Distributed(), run_dir, None
    )


def test_step_0_is_the_base_policy_on_fixed_streams(run: Path, tmp_path: Path) -> None:
    model, tokenizer = load_model("arith-base")
    evaluation = evaluation_of(model, tokenizer, tmp_path)
    first = evaluation.evaluate(0)
    again = evaluation.evaluate(0)
    assert first["heldout_accuracy"] == again["heldout_accuracy"]
    written = read_heldout(tmp_path)
    assert 0 < sum(written[0]["correct"]) < 12  # some right, some wrong: the test can fail
    assert written[0]["correct"] == written[1]["correct"]  # the same samples every time
    assert written[0]["correct"] == read_heldout(run)[0]["correct"]  # the run's step 0


class OneOfTwo:
    """Rank `rank` of two processes whose other process found nothing; keeps what it sent."""

    world_size = 2

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.is_main = rank == 0
        self.sent: list[Any] = []

    def gather(self, obj: Any) -> list[Any]:
        self.sent = obj
        return [obj, []] if self.rank == 0 else [[], obj]


def test_processes_split_the_problems_and_find_the_same_counts(tmp_path: Path) -> None:
    model, tokenizer = load_model("arith-base")
    evaluation_of(model, tokenizer, tmp_path / "one").evaluate(0)
    expected = read_heldout(tmp_path / "one")[0]["correct"]
    parts = []
    for rank in (0, 1):
        dist = OneOfTwo(rank)
        evaluation = evaluation_of(model, tokenizer, tmp_path / f"rank{rank}", dist)
        assert (evaluation.log is None) == (rank == 1)  # rank 0 alone writes the log
        evaluation.evaluate(0)
        parts.append(dict(dist.sent))  # {problem index: correct count}
    assert sorted(parts[0]) == [0, 2, 4] and sorted(parts[1]) == [1, 3, 5]
    assert [{**parts[0], **parts[1]}[i] for i in range(6)] == expected


def test_a_resumed_run_logs_the_evaluations_of_an_uninterrupted_one(
    run: Path, tmp_path: Path
) -> None:
    # Stopped after step 2 (its last step then, so evaluated), resumed to step 3: the log keeps
    # steps 0 and 2 and adds 3, as the uninterrupted run wrote them.
    first = Trainer(load_run_config(None, run_overrides(tmp_path, "train.max_steps=2")))
    first.train()
    Trainer(load_run_config(None, run_overrides(tmp_path)), resume=True).train()

    def comparable(rows: list[dict]) -> list[dict]:
        # wall times differ between runs
        return [
            {k: v for k, v in r.items() if k not in ("seconds_heldout", "seconds")} for r in rows
        ]

    assert comparable(read_heldout(tmp_path)) == comparable(read_heldout(run))
