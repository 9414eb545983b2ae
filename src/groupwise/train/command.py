"""`groupwise train --config configs/X.yaml [key.sub=value ...] [--resume]`."""

from __future__ import annotations

import argparse
import json
import sys

from groupwise.train.config import ConfigError, load_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "Train a policy with GRPO, AMIR-GRPO, LENS or GSPO."
    parser.add_argument("--config", help="YAML preset (see configs/); defaults apply without it")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key.sub=value",
        help="override any option, e.g. model.name=tiny-random train.max_steps=2",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest checkpoint in train.output_dir",
    )
    parser.add_argument(
        "--print-config", action="store_true", help="print the resolved config and exit"
    )


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, args.overrides)
    except ConfigError as err:
        print(f"groupwise train: {err}", file=sys.stderr)
        return 2
    if args.print_config:
        import dataclasses

        print(json.dumps(dataclasses.asdict(config), indent=2))
        return 0

    from groupwise.train.trainer import Trainer

    trainer = Trainer(config, resume=args.resume)
    final = trainer.train()
    print(f"run folder: {trainer.run_dir}")
    print(f"metrics:    {trainer.log.path}")
    print(f"weights:    {final}")
    return 0
