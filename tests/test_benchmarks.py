"""Benchmark loaders (groupwise.data.loaders, the registry groupwise.data.benchmarks) on the offline
copies in ../shared/data."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import types
from pathlib import Path

import pytest

from groupwise.cli import main as cli
from groupwise.data import (
    BenchmarkFormatError,
    BenchmarkSpec,
    Problem,
    benchmark_names,
    benchmark_splits,
    load_benchmark,
    register_benchmark,
)
from groupwise.data import benchmarks as benchmarks_module
from groupwise.rewards import check_answers, summarize

# (name, split) -> (records, gold answers of the first three records). Counts from the data
# README; golds read from the files by hand (the loader's mapping is what is under test).
EXPECTED = {
    ("gsm8k", "train"): (7473, ["72", "10", "5"]),
    ("gsm8k", "test"): (1319, ["18", "3", "70000"]),
    # 7500 records; lines 5530 and 5532 end in an empty \boxed{} and are skipped (no gold).
    ("math", "train"): (7498, ["0", "8+4i", "36"]),
    ("math", "test"): (5000, ["2", "\\frac{1}{2}", "5"]),
    ("math500", "test"): (500, ["\\left( 3, \\frac{\\pi}{2} \\right)", "p - q", "\\frac{14}{3}"]),
    ("aime24", "test"): (30, ["204", "113", "371"]),
    ("aime25", "test"): (30, ["70", "588", "16"]),  # 70.0, 588.0, 16.0 in the file
    ("amc23", "test"): (40, ["27", "36", "45"]),  # 27.0, 36.0, 45.0 in the file
    ("olympiadbench", "test"): (675, ["2", "\\frac{1}{2 n+2}", "2^{1009}"]),
    ("minerva", "test"): (272, ["1.6", "4.5e33", "41.8"]),
    ("aqua", "test"): (254, ["A", "E", "A"]),
    ("livemathbench", "AMC_en"): (46, ["2", "246", "21"]),
    ("livemathbench", "CCEE_en"): (44, ["-3", "\\{2,5\\}", "-3"]),
    ("livemathbench", "CNMO_en"): (18, ["4049", "[-\\frac{1}{4}, 0) \\cup (0, 2)", "7"]),
    ("livemathbench", "WLPMC_en"): (11, ["n=18", "\\pm 1/n!", "r=\\frac{\\pi}{2}"]),
    ("livemathbench", "hard_en"): (21, ["591", "(-\\infty,-1)\\cup(6,+\\infty)", "291"]),
}


@pytest.mark.parametrize(("name", "split"), list(EXPECTED))
def test_counts_and_first_golds(name: str, split: str, data_dir: Path) -> None:
    count, golds = EXPECTED[(name, split)]
    problems = load_benchmark(name, split, data_dir=data_dir)
    assert len(problems) == count
    assert [p.answer for p in problems[:3]] == golds
    assert len({p.id for p in problems}) == count
    assert all(p.id.startswith(f"{name}/") for p in problems)
    assert all(p.question.strip() and p.answer.strip() for p in problems)
    # No `$` math delimiters left in a gold (an escaped `\$`, a dollar sign, may stay).
    assert not any(re.search(r"(?<!\\)\$", p.answer) for p in problems)


def test_every_registered_name_and_split_is_covered() -> None:
    covered = {(name, split) for name, split in EXPECTED}
    for name in benchmark_names():
        # arith: generated, no files (groupwise.data.synthetic); dapo_math_17k: not in the
        # offline data (test_dapo_math_17k_* use a fixture)
        if name in ("arith", "dapo_math_17k"):
            continue
        assert {(name, s) for s in benchmark_splits(name)} <= covered, name


def test_registered_names() -> None:
    assert set(benchmark_names()) >= {
        "gsm8k", "math", "math500", "aime24", "aime25", "amc23", "olympiadbench", "minerva",
        "aqua", "livemathbench", "arith", "dapo_math_17k",
    }  # fmt: skip


# Every gold of these sets must be judged correct against itself in a box: this exercises
# extraction (balanced braces, \left/\right, sets, units) and the normalisation of both sides.
SELF_CHECKED = [
    ("gsm8k", "test"),
    ("math500", "test"),
    ("aime24", "test"),
    ("aime25", "test"),
    ("amc23", "test"),
    ("minerva", "test"),
    ("olympiadbench", "test"),
    ("livemathbench", "AMC_en"),
    ("livemathbench", "CCEE_en"),
    ("livemathbench", "CNMO_en"),
    ("livemathbench", "WLPMC_en"),
    ("livemathbench", "hard_en"),
]


def test_golds_judged_correct_against_themselves(data_dir: Path) -> None:
    problems = [p for n, s in SELF_CHECKED for p in load_benchmark(n, s, data_dir=data_dir)]
    completions = [f"Reasoning... so the answer is $\\boxed{{{p.answer}}}$." for p in problems]
    verdicts = check_answers(completions, [p.answer for p in problems], workers=2)
    failures = [
        (p.id, p.answer, v) for p, v in zip(problems, verdicts, strict=True) if not v.correct
    ]
    assert failures == []
    assert summarize(verdicts)["correct"] == len(problems)


def test_aqua_maps_options_to_choices(data_dir: Path) -> None:
    problem = load_benchmark("aqua", data_dir=data_dir)[2]
    assert problem.choices == ["36", "15", "17", "5", "7"]  # file: ["A)36", "B)15", ...]
    assert problem.answer == "A"
    assert load_benchmark("aqua", data_dir=data_dir)[1].choices == ["$61", "$65", "$67.40", "$70",
                                                                   "$78.20"]  # fmt: skip


def test_aqua_official_format_hides_options_and_grades_their_text(data_dir: Path) -> None:
    from groupwise.data import render_prompt

    letters = load_benchmark("aqua", data_dir=data_dir)
    official = load_benchmark("aqua", data_dir=data_dir, format="official")
    assert [p.id for p in official] == [p.id for p in letters]
    assert [p.question for p in official] == [p.question for p in letters]
    # record 2: correct "A" of ["A)36", "B)15", ...]; record 1: "E" of [..., "E)$78.20"]
    assert (official[2].answer, official[2].choices) == ("36", None)
    assert official[1].answer == "$78.20"
    assert official[2].meta["options"] == letters[2].choices and official[2].meta["letter"] == "A"
    assert all(p.answer == p.meta["options"]["ABCDE".index(p.meta["letter"])] for p in official)
    assert "A) 36" in render_prompt(letters[2], "plain", None)
    assert "36" not in render_prompt(official[2], "plain", None)
    assert BenchmarkSpec.parse("aqua@format=official").load(data_dir) == official
    with pytest.raises(ValueError, match=r"aqua: format must be one of \['letters', 'official'\]"):
        load_benchmark("aqua", data_dir=data_dir, format="text")


def test_difficulty_levels_of_math_and_math500(data_dir: Path) -> None:
    from collections import Counter

    from groupwise.data import difficulty_level

    math500 = Counter(difficulty_level(p) for p in load_benchmark("math500", data_dir=data_dir))
    assert math500 == {1: 43, 2: 90, 3: 105, 4: 128, 5: 134}  # counts of the data README's file
    math = Counter(difficulty_level(p) for p in load_benchmark("math", "test", data_dir=data_dir))
    assert math == {1: 437, 2: 894, 3: 1131, 4: 1214, 5: 1324}
    train = Counter(difficulty_level(p) for p in load_benchmark("math", "train", data_dir=data_dir))
    assert train[None] == 2  # "Level ?"
    assert difficulty_level(load_benchmark("gsm8k", data_dir=data_dir)[0]) is None
    assert difficulty_level(Problem("a", "q", "1", meta={"level": "mid"})) is None


def test_olympiadbench_joins_multiple_answers_and_keeps_unit(data_dir: Path) -> None:
    problems = {p.id: p for p in load_benchmark("olympiadbench", data_dir=data_dir)}
    # final_answer ['$\\angle B E A_{1}=90$,$\\angle A E B_{1}=90$'] (line 32), unit ^{\\circ}
    problem = problems["olympiadbench/1760"]
    assert problem.answer == "\\angle B E A_{1}=90,\\angle A E B_{1}=90"
    assert problem.meta["unit"] == "^{\\circ}"
    assert problem.meta["is_multiple_answer"] in (True, False)


def test_gsm8k_keeps_the_worked_solution(data_dir: Path) -> None:
    problem = load_benchmark("gsm8k", "test", data_dir=data_dir)[0]
    assert problem.meta["solution"].endswith("#### 18")
    assert problem.question.startswith("Janet")


def test_default_split(data_dir: Path) -> None:
    assert benchmark_splits("livemathbench")[0] == "AMC_en"
    assert len(load_benchmark("livemathbench", data_dir=data_dir)) == 46
    assert len(load_benchmark("gsm8k", data_dir=data_dir)) == 1319  # default "test"


def test_env_variable_is_the_default_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "aime25").mkdir()
    (tmp_path / "aime25" / "test.jsonl").write_text(
        json.dumps({"id": "7", "question": "Q?", "answer": 0.5}) + "\n"
    )
    monkeypatch.setenv("GROUPWISE_DATA", str(tmp_path))
    [problem] = load_benchmark("aime25")
    assert problem == Problem("aime25/7", "Q?", "0.5", None, {})  # a non-integral float stays


def test_unknown_names_and_splits(data_dir: Path) -> None:
    with pytest.raises(
        ValueError, match=r"unknown benchmark 'gsm9k'; valid benchmarks: \[.*'gsm8k'"
    ):
        load_benchmark("gsm8k".replace("8", "9"), data_dir=data_dir)
    with pytest.raises(ValueError, match=r"no split 'test'; valid splits: \['AMC_en', 'CCEE_en'"):
        load_benchmark("livemathbench", "test", data_dir=data_dir)
    with pytest.raises(
        ValueError, match=r"no split 'validation'; valid splits: \['train', 'test'\]"
    ):
        load_benchmark("gsm8k", "validation", data_dir=data_dir)


def _write(tmp_path: Path, folder: str, split: str, lines: list[str]) -> Path:
    (tmp_path / folder).mkdir(exist_ok=True)
    path = tmp_path / folder / f"{split}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("name", "folder", "lines", "message"),
    [
        ("gsm8k", "gsm8k", ['{"question": "q", "answer": "#### 1"}', '{"question": "q"}'],
         "line 2: missing field 'answer'"),
        ("gsm8k", "gsm8k", ['{"question": "q", "answer": "no final line"}'],
         "line 1: field 'answer' has no '#### N' final answer"),
        ("aime25", "aime25", ['{"id": 1, "question": "q", "answer": 1}', "{not json"],
         "line 2: not valid JSON"),
        ("aime25", "aime25", ['["a list"]'], "line 1: expected a JSON object"),
        ("amc23", "amc23", ['{"id": 1, "question": "q", "answer": true}'],
         "line 1: answer True is not a number"),
        ("aqua", "aqua",
         ['{"question": "q", "options": ["A)1", "C)2"], "correct": "A"}'],
         "line 1: option 1 is 'C)2'; expected it to start with 'B)'"),
        ("aqua", "aqua",
         ['{"question": "q", "options": ["A)1", "B)2"], "correct": "D"}'],
         "line 1: field 'correct' is 'D'; expected one of ['A', 'B']"),
        ("olympiadbench", "olympiadbench",
         ['{"id": 1, "question": "q", "final_answer": []}'],
         "line 1: field 'final_answer' must be a list of strings"),
        ("math500", "math500", ['{"problem": "q", "answer": ""}'],
         "line 1: field 'answer' must be a non-empty string"),
    ],
)  # fmt: skip
def test_malformed_records_name_file_and_line(
    tmp_path: Path, name: str, folder: str, lines: list[str], message: str
) -> None:
    path = _write(tmp_path, folder, "test", lines)
    with pytest.raises(BenchmarkFormatError, match="^" + re.escape(f"{path} {message}")):
        load_benchmark(name, "test", data_dir=tmp_path)


def test_non_utf8_byte_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "aime25", "test", ['{"id": 1, "question": "q", "answer": 1}'])
    path.write_bytes(path.read_bytes() + b'{"id": 2, "question": "\xff", "answer": 2}\n')
    with pytest.raises(
        BenchmarkFormatError,
        match="^" + re.escape(f"{path} line 2: not valid UTF-8 (byte 0xff at column 24)"),
    ):
        load_benchmark("aime25", data_dir=tmp_path)


def test_benchmark_spec_parses_split_and_options(data_dir: Path) -> None:
    spec = BenchmarkSpec.parse("arith:train@level=easy@size=3@seed=2")
    assert spec == BenchmarkSpec("arith", "train", (("level", "easy"), ("size", 3), ("seed", 2)))
    assert [p.id for p in spec.load()] == [
        p.id for p in load_benchmark("arith", "train", level="easy", size=3, seed=2)
    ]
    assert (
        BenchmarkSpec.parse("livemathbench")
        .load(data_dir)[0]
        .id.startswith("livemathbench/AMC_en/")
    )
    for text, message in [
        ("nope", "unknown benchmark 'nope'; valid benchmarks: ['aime24'"),
        ("gsm8k:dev", "benchmark 'gsm8k' has no split 'dev'; valid splits: ['train', 'test']"),
        ("arith@levl=easy", "benchmark 'arith' has no option 'levl'; valid options: ['level'"),
        ("gsm8k@x=1", "benchmark 'gsm8k' takes no options, got 'x'"),
        ("arith@level", "benchmark 'arith@level': option 'level' is not KEY=VALUE"),
    ]:
        with pytest.raises(ValueError, match="^" + re.escape(message)):
            BenchmarkSpec.parse(text)


def _dapo_row(question: str, gold: object, index: str | None, wrapped: bool = True) -> str:
    from groupwise.data.loaders import DAPO_PREFIX, DAPO_SUFFIX

    content = DAPO_PREFIX + question + DAPO_SUFFIX if wrapped else question
    row: dict = {
        "data_source": "math_dapo",
        "prompt": [{"role": "user", "content": content}],
        "ability": "MATH",
        "reward_model": {"ground_truth": gold, "style": "rule"},
    }
    if index is not None:
        row["extra_info"] = {"index": index}
    return json.dumps(row)


def test_dapo_math_17k_from_a_local_jsonl(tmp_path: Path) -> None:
    open_r1 = json.dumps(
        {"prompt": "What is 2+3?", "solution": "5", "extra_info": {"index": "b2"}}
    )  # open-r1's processed copy
    path = _write(tmp_path, "dapo_math_17k", "train", [
        _dapo_row("What is 1+1?", "2", "a1"),
        _dapo_row("What is 1+1?", "2", "a1"),  # the published file repeats every problem
        open_r1,
        _dapo_row("Find $x$ if $2x = 14$.", 7, None, wrapped=False),
    ])  # fmt: skip
    problems = load_benchmark("dapo_math_17k", data_dir=tmp_path)  # the one split: train
    assert [(p.id, p.question, p.answer) for p in problems] == [
        ("dapo_math_17k/a1", "What is 1+1?", "2"),
        ("dapo_math_17k/b2", "What is 2+3?", "5"),
        ("dapo_math_17k/3", "Find $x$ if $2x = 14$.", "7"),  # no index: the row's position
    ]
    assert problems[0].meta == {"data_source": "math_dapo"}
    for lines, message in [
        (
            [_dapo_row("What is 1+1?", "2", "a1"), _dapo_row("What is 1+1?", "3", "a1")],
            "line 2: repeats dapo_math_17k/a1 of line 1 with another question or gold",
        ),
        (
            [json.dumps({"prompt": "q", "reward_model": {"style": "rule"}})],
            "line 1: missing field 'reward_model.ground_truth' (or 'solution')",
        ),
        (
            [_dapo_row("", "2", "a1")],
            "line 1: field 'prompt' holds the instruction but no question",
        ),
        (
            [json.dumps({"prompt": [{"role": "system", "content": "x"}], "solution": "1"})],
            "line 1: field 'prompt' must be a string or a list of messages with a user message",
        ),
    ]:
        path = _write(tmp_path, "dapo_math_17k", "train", lines)
        with pytest.raises(BenchmarkFormatError, match="^" + re.escape(f"{path} {message}")):
            load_benchmark("dapo_math_17k", data_dir=tmp_path)


def test_dapo_math_17k_absent_offline_says_how_to_get_it(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(FileNotFoundError) as missing:
        load_benchmark("dapo_math_17k", data_dir=data_dir)
    message = str(missing.value)
    assert message.startswith(
        f"{data_dir / 'dapo_math_17k' / 'train.jsonl'} (or train.parquet) "
        "not found: DAPO-Math-17k is not in the offline data"
    )
    assert "BytedTsinghua-SIA/DAPO-Math-17k" in message
    assert "pip install 'groupwise[hub]'" in message
    # a parquet copy without pyarrow installed
    (tmp_path / "dapo_math_17k").mkdir()
    (tmp_path / "dapo_math_17k" / "train.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(
        ImportError,
        match=re.escape(
            f"reading {tmp_path / 'dapo_math_17k' / 'train.parquet'} needs pyarrow: pip install "
            f"pyarrow, or convert the file to {tmp_path / 'dapo_math_17k' / 'train.jsonl'}"
        ),
    ):
        load_benchmark("dapo_math_17k", data_dir=tmp_path)
    # no data folder: the hub, which needs `datasets`
    monkeypatch.setenv("GROUPWISE_DATA", "hub")  # not a local folder
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match=r"BytedTsinghua-SIA/DAPO-Math-17k.*groupwise\[hub\]"):
        load_benchmark("dapo_math_17k")


def test_solution_without_box_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _write(
        tmp_path,
        "minerva_math",
        "test",
        ['{"problem": "q1", "solution": "so \\\\boxed{}", "idx": 0}',
         '{"problem": "q2", "solution": "so \\\\boxed{4}", "idx": 1}'],
    )  # fmt: skip
    problems = load_benchmark("minerva", data_dir=tmp_path)
    assert [(p.id, p.answer) for p in problems] == [("minerva/1", "4")]
    assert f"{path} line 1: no non-empty \\boxed{{...}} answer" in caplog.text


def test_missing_file_explains_the_layout(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"aime24/test.jsonl not found.*GROUPWISE_DATA"):
        load_benchmark("aime24", data_dir=tmp_path)


def test_hub_fallback_needs_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GROUPWISE_DATA", "hub")  # not a local folder
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'groupwise\[hub\]'.*GROUPWISE_DATA"):
        load_benchmark("gsm8k")


def test_unreachable_hub_is_one_line_naming_the_local_copy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Offline (as on these machines), datasets raises ConnectionError after its retries: the
    error names the dataset and where a local copy goes, and `groupwise eval` prints it as one
    line before anything is written."""
    monkeypatch.setenv("GROUPWISE_DATA", "hub")  # not a local folder
    offline = types.ModuleType("datasets")

    def load_dataset(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Couldn't reach 'HuggingFaceH4/MATH-500' on the Hub")

    offline.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", offline)
    with pytest.raises(
        FileNotFoundError,
        match=r"cannot load HuggingFaceH4/MATH-500 .*Couldn't "
        r"reach.*; point GROUPWISE_DATA \(or data_dir, --data-dir\)",
    ):
        load_benchmark("math500")
    out = tmp_path / "eval"
    code = cli(["eval", "--model", "tiny-random", "--benchmarks", "math500", "--output", str(out)])
    assert code != 0 and not out.exists()
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "--benchmarks: math500: cannot load" in error


def test_register_benchmark(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(benchmarks_module, "_REGISTRY", dict(benchmarks_module._REGISTRY))
    seen = {}

    @register_benchmark("toy", splits=("train", "dev"))
    def load_toy(data_dir: Path | None, split: str, size: int = 1) -> list[Problem]:
        seen.update(data_dir=data_dir, split=split)
        return [Problem(f"toy/{i}", f"{i}+1?", str(i + 1)) for i in range(size)]

    assert benchmark_splits("toy") == ("train", "dev")  # no "test": the first is the default
    assert [p.answer for p in load_benchmark("toy", size=2, data_dir="/nowhere")] == ["1", "2"]
    assert seen == {"data_dir": Path("/nowhere"), "split": "train"}
    with pytest.raises(ValueError, match="'toy' is already registered"):
        register_benchmark("toy")(load_toy)
    with pytest.raises(ValueError, match="default_split 'test' is not one of"):
        register_benchmark("toy2", splits=("a",), default_split="test")


def test_problem_is_frozen_with_its_own_meta() -> None:
    first, second = Problem("a", "q", "1"), Problem("b", "q", "2")
    assert first.meta == {} and first.meta is not second.meta
    assert first.choices is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.answer = "2"  # type: ignore[misc]
