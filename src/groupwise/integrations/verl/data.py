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

from groupwise.data.benchmarks import Problem, benchmark_splits, load_benchmark
from groupwise.data.prompts import TEMPLATES, build_messages
from groupwise.entry import main_of
from groupwise.rewards.checking import DEFAULT_MODE, MODES

DATA_SOURCE_PREFIX = "groupwise/"
PARQUET_SUFFIX = ".parquet"
MESSAGE_TEXT_TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"
"""A chat template that renders the messages' text alone, for a model taught on the bare
question (groupwise's `arith-base`, whose tokenizer has none): with `--prompt plain` (one user
message) verl then gives the model what groupwise's own `render_prompt` does. verl applies a
chat template to every prompt; pass it as `actor_rollout_ref.model.custom_chat_template`
(docs/guides/verl.md, "On a CPU")."""


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


def check_output(path: Path) -> None:
    """Refuse an output file name whose suffix is not .parquet (what is written is Parquet)."""
    if path.suffix.lower() != PARQUET_SUFFIX:
        raise ValueError(f"output {path}: what is written is Parquet; name it NAME.parquet")


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    """Write `rows` as one Parquet file (pyarrow, which verl brings), creating its folder.
    Raises ValueError for a path that does not end in .parquet, ImportError without pyarrow."""
    check_output(path)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError(
            f"writing {path} needs pyarrow (verl brings it; else pip install pyarrow)"
        ) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's arguments (module docstring)."""
    parser.add_argument("benchmark", help="a groupwise benchmark (gsm8k, math, ...)")
    parser.add_argument("split", help="its split (train, test, ...)")
    parser.add_argument("output", type=Path, help="the .parquet file to write")
    parser.add_argument("--prompt", default="amir", choices=sorted(TEMPLATES))
    parser.add_argument("--checking", default=DEFAULT_MODE, choices=sorted(MODES))
    parser.add_argument(
        "--data-dir",
        default=None,
        help="a folder laid out like ../shared/data (default: $GROUPWISE_DATA, else "
        "../shared/data beside the working folder or beside groupwise's checkout, else the hub)",
    )
    parser.add_argument("--limit", type=int, default=None, help="the first N problems only")


def run(args: argparse.Namespace) -> int:
    """Check the arguments, load the split, write it; a mistake raises before anything is
    written (the entry point prints it as one line, exit status 2)."""
    check_output(args.output)
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        raise ValueError(f"--data-dir: no folder {args.data_dir}")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit: must be an integer >= 1, got {args.limit}")
    split = benchmark_splits(args.benchmark)  # an unknown name raises naming the valid ones
    if args.split not in split:
        raise ValueError(
            f"benchmark {args.benchmark!r} has no split {args.split!r}; valid splits: {list(split)}"
        )
    problems = load_benchmark(args.benchmark, args.split, args.data_dir)[: args.limit]
    rows = verl_rows(problems, args.benchmark, args.prompt, args.checking)
    print(f"{write_parquet(rows, args.output)}: {len(rows)} problems")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m groupwise.integrations.verl.data BENCHMARK SPLIT OUTPUT.parquet [...]`."""
    return main_of(
        "python -m groupwise.integrations.verl.data",
        add_arguments,
        run,
        argv,
        "Write a groupwise benchmark split as a verl Parquet file.",
    )


if __name__ == "__main__":
    raise SystemExit(main())
