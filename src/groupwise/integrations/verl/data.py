"""groupwise's benchmarks as verl's training and validation files (docs/guides/verl.md, "Data
and reward").

One row per problem in the layout of verl's own preprocessing scripts (examples/data_preprocess):
`data_source` ("groupwise/<benchmark>"), `prompt` (the chat messages of groupwise's prompt
template), `ability` "math", `reward_model` {"style": "rule", "ground_truth": the gold answer}
and `extra_info` {"index", "id", "checking"}: the checking mode that
groupwise.integrations.verl.reward.compute_score judges the response with.

    python -m groupwise.integrations.verl.data gsm8k train ~/data/gsm8k/train.parquet --prompt amir
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from groupwise.data.benchmarks import Problem, load_benchmark
from groupwise.data.prompts import TEMPLATES, build_messages
from groupwise.rewards.checking import DEFAULT_MODE, MODES

DATA_SOURCE_PREFIX = "groupwise/"


def verl_rows(
    problems: list[Problem], benchmark: str, prompt: str, checking: str
) -> list[dict[str, Any]]:
    """verl's rows (module docstring) of `problems`, asked with prompt template `prompt` and
    judged with checking mode `checking`."""
    if checking not in MODES:
        raise ValueError(f"checking: unknown mode {checking!r}; valid modes: {sorted(MODES)}")
    return [
        {
            "data_source": DATA_SOURCE_PREFIX + benchmark,
            "prompt": build_messages(problem, prompt),
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": problem.answer},
            "extra_info": {"index": index, "id": problem.id, "checking": checking},
        }
        for index, problem in enumerate(problems)
    ]


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    """Write `rows` as one Parquet file (pyarrow, which verl brings), creating its folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m groupwise.integrations.verl.data",
        description="Write a groupwise benchmark split as a verl Parquet file.",
    )
    parser.add_argument("benchmark", help="a groupwise benchmark (gsm8k, math, ...)")
    parser.add_argument("split", help="its split (train, test, ...)")
    parser.add_argument("output", type=Path, help="the .parquet file to write")
    parser.add_argument("--prompt", default="amir", choices=sorted(TEMPLATES))
    parser.add_argument("--checking", default=DEFAULT_MODE, choices=sorted(MODES))
    parser.add_argument("--data-dir", default=None, help="default: $GROUPWISE_DATA, else the hub")
    parser.add_argument("--limit", type=int, default=None, help="the first N problems only")
    args = parser.parse_args(argv)
    problems = load_benchmark(args.benchmark, args.split, args.data_dir)[: args.limit]
    rows = verl_rows(problems, args.benchmark, args.prompt, args.checking)
    print(f"{write_parquet(rows, args.output)}: {len(rows)} problems")


if __name__ == "__main__":
    main()
