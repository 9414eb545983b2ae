"""groupwise.data.mix: a training-data mix from benchmark parts, deterministic from the seeds."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from groupwise.data import MixPart, Problem, load_benchmark, load_mix, mix_problems, select_part

TEN = [Problem(f"toy/{i}", f"q{i}", str(i)) for i in range(10)]


def test_whole_part_and_seeded_subsets() -> None:
    assert select_part(MixPart("toy"), TEN) == TEN
    three = select_part(MixPart("toy", size=3, seed=7), TEN)
    assert len(three) == 3 and len({p.id for p in three}) == 3
    positions = [TEN.index(p) for p in three]
    assert positions == sorted(positions)  # kept in the benchmark's order
    assert select_part(MixPart("toy", size=3, seed=7), TEN) == three  # same seed, same draw
    draws = {
        tuple(p.id for p in select_part(MixPart("toy", size=3, seed=s), TEN)) for s in range(20)
    }
    assert len(draws) > 10  # the seed chooses the subset
    # fraction: 0.25 x 10 = 2.5 -> 3 (half up); 0.04 x 10 = 0.4 -> none, an error
    assert len(select_part(MixPart("toy", fraction=0.25), TEN)) == 3
    assert select_part(MixPart("toy", fraction=1.0), TEN) == TEN
    with pytest.raises(ValueError, match=r"toy: fraction 0.04 of 10 problems in toy selects"):
        select_part(MixPart("toy", fraction=0.04), TEN)


def test_draws_are_uniform_over_problems() -> None:
    # each of 10 problems is in a random 3-subset with probability 3/10: 600 of 2000 draws,
    # binomial sd sqrt(2000 * 0.3 * 0.7) = 20.5; allow 5 sd
    counts = Counter(
        p.id for seed in range(2000) for p in select_part(MixPart("toy", size=3, seed=seed), TEN)
    )
    assert len(counts) == 10 and all(abs(c - 600) < 103 for c in counts.values())


def test_mix_concatenates_parts_and_names_the_failing_one() -> None:
    other = [Problem(f"other/{i}", f"r{i}", str(i)) for i in range(4)]
    mixed = mix_problems([(MixPart("toy", size=2, seed=1), TEN), (MixPart("other"), other)])
    assert mixed[2:] == other and len(mixed) == 6
    assert mixed[:2] == select_part(MixPart("toy", size=2, seed=1), TEN)
    with pytest.raises(
        ValueError,
        match=re.escape("mix part 1 (other:train): size 17500 > 4 problems in other:train"),
    ):
        mix_problems([(MixPart("toy"), TEN), (MixPart("other", "train", size=17500), other)])
    with pytest.raises(
        ValueError, match=re.escape("mix part 1 (toy) takes toy/0, which part 0 (toy) takes too")
    ):
        mix_problems([(MixPart("toy", size=9, seed=0), TEN), (MixPart("toy"), TEN)])
    with pytest.raises(ValueError, match="at least one part"):
        mix_problems([])


@pytest.mark.parametrize(("data", "message"), [
    ({"benchmark": "math", "sise": 3}, "data.mix[1]: unknown key(s) ['sise']; valid keys: "
                                       "['benchmark', 'split', 'options', 'size', 'fraction', "
                                       "'seed']"),
    ({"split": "train"}, "data.mix[1]: missing key 'benchmark'"),
    ({"benchmark": "math", "size": 0}, "data.mix[1]: math: size must be an integer >= 1, got 0"),
    ({"benchmark": "math", "size": 5, "fraction": 0.5},
     "data.mix[1]: math: give size or fraction, not both"),
    ({"benchmark": "math", "fraction": 1.5}, "data.mix[1]: math: fraction must be in (0, 1]"),
    ({"benchmark": "math", "seed": -1}, "data.mix[1]: math: seed must be an integer >= 0"),
    (["math"], "data.mix[1]: expected a mapping"),
])  # fmt: skip
def test_part_from_config_mapping(data: object, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        MixPart.from_dict(data, "data.mix[1]")  # type: ignore[arg-type]


def test_lens_mix_math_train_and_a_random_part_of_dapo(tmp_path: Path, data_dir: Path) -> None:
    """MATH train (all) + a seeded subset of DAPO-Math-17k (here a 3-problem fixture)."""
    (tmp_path / "math").symlink_to(data_dir / "math")
    (tmp_path / "dapo_math_17k").mkdir()
    rows = [
        {
            "prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
            "reward_model": {"ground_truth": str(2 * i)},
            "extra_info": {"index": f"id{i}"},
        }
        for i in range(3)
    ]
    (tmp_path / "dapo_math_17k" / "train.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows)
    )
    parts = [
        MixPart.from_dict({"benchmark": "math", "split": "train"}),
        MixPart.from_dict({"benchmark": "dapo_math_17k", "split": "train", "size": 2, "seed": 0}),
    ]
    mixed = load_mix(parts, tmp_path)
    math_train = load_benchmark("math", "train", data_dir=data_dir)
    assert mixed[: len(math_train)] == math_train and len(mixed) == len(math_train) + 2
    assert all(p.id.startswith("dapo_math_17k/id") for p in mixed[len(math_train) :])
    assert load_mix(parts, tmp_path) == mixed  # deterministic
    with pytest.raises(
        ValueError,
        match=re.escape(
            "mix part 1 (dapo_math_17k:train): size 17500 > 3 problems in dapo_math_17k:train"
        ),
    ):
        load_mix([parts[0], MixPart("dapo_math_17k", "train", size=17500)], tmp_path)
    with pytest.raises(
        FileNotFoundError,
        match=re.escape("mix part 0 (dapo_math_17k): ") + ".*not in the offline data",
    ):
        load_mix([MixPart("dapo_math_17k")], data_dir)
