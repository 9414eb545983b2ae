"""What AMIR-GRPO and LENS cost on top of plain GRPO, at equal settings.

AMIR's preference term needs no forward pass of its own: its per-completion coefficients come
from the rollout policy's length-normalised log-likelihoods l(q, o), which the first update's
policy pass provides (it runs at the rollout policy); the official AMIR-GRPO code runs extra
passes for them. LENS needs the rollout policy's confidences of every row before its advantages
exist, so before the first update: the trainer takes them from one no-grad pass after the
rollout (as verl computes its old log-probs), and AMIR-GRPO + LENS reads l_old from the same
pass. This bench shows the cost two ways, on SmolLM2-135M-Instruct + LoRA 16/16 with the
quickstart settings (G=8, 128 new tokens), 2 questions per step (16 completions, micro-batches
of 8):

1. Fixed batch: one batch of rollouts is generated and scored once; then each algorithm's loss
   + backward + optimizer update runs on it (Trainer.learn; one trainer per algorithm, all
   starting from the same weights), the algorithms alternating, and every call of the decoder
   is counted (the shared-prompt pass calls it twice per
   micro-batch: prompt, then completions). Same tokens for all, so the times compare exactly.
2. Whole steps (generate, score, update), alternating; noisier (independent samples).

AMIR's margin is lowered to 0.1 and the reward is groupwise's own five components (partial
credit for the format) so that the untrained model's groups have pairs (with the paper's 2.0
and the official components they rarely do, and the preference term would not run); the pair
count is shown.
"amir-grpo, reference" (ref_free=false) adds the adapter-disabled reference pass by definition.

    python bench/overhead.py                       # 3 rounds of each, 2 whole steps of each
    python bench/overhead.py --rounds 1 --steps 0  # fixed batch only
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    REPO,
    add_threads_argument,
    load_average,
    markdown_table,
    median,
    parse_with_threads,
    write_results,
)

ALGORITHMS = {
    "grpo": [],
    "amir-grpo": ["algorithm.amir=true"],
    "lens": ["algorithm.advantage=lens"],
    "amir-grpo + lens": ["algorithm.amir=true", "algorithm.advantage=lens"],
    "amir-grpo, reference": ["algorithm.amir=true", "algorithm.ref_free=false"],
}


def make_trainer(out: Path, extra: list[str]):
    from groupwise.train.preflight import load_run_config
    from groupwise.train.trainer import Trainer

    config = load_run_config(
        REPO / "configs" / "quickstart_gsm8k.yaml",
        [
            "algorithm.amir=false",
            "algorithm.margin=0.1",
            # ours, which give partial credit: the official ones give an untrained model's
            # completions equal rewards, so no pairs and no AMIR term to time
            "reward.weights={correctness: 1.0, format: 1.0, integer: 1.0, tag_count: 1.0, "
            "calibration: 1.0}",
            "reward.checking=groupwise",
            "rollout.questions_per_step=2",
            "train.micro_batch_size=8",
            "train.max_steps=1000",
            "train.progress=false",
            "train.log_rollouts=false",
            f"train.output_dir={out}",
            *extra,
        ],
    )
    return Trainer(config)


class DecoderCalls:
    """Counts forward calls of the transformer body (prompt and completion passes alike)."""

    def __init__(self, model) -> None:
        self.count = 0
        model.get_decoder().register_forward_pre_hook(self._hook)

    def _hook(self, module, args) -> None:
        self.count += 1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="fixed-batch updates of each")
    parser.add_argument("--steps", type=int, default=2, help="whole steps of each (0: none)")
    parser.add_argument("overrides", nargs="*", help="extra config overrides (key=value)")
    add_threads_argument(parser)
    args = parse_with_threads(parser, argv)

    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="overhead-") as scratch:
        trainers = {
            name: make_trainer(Path(scratch) / str(number), [*args.overrides, *extra])
            for number, (name, extra) in enumerate(ALGORITHMS.items())
        }
        calls = {name: DecoderCalls(trainer.model) for name, trainer in trainers.items()}
        first = trainers["grpo"]
        cfg = first.config
        import torch

        from groupwise.data import render_prompt
        from groupwise.rollout import SamplingParams
        from groupwise.train.batch import ScoredBatch

        problems = first.sampler.batch(0)
        prompts = [render_prompt(p, cfg.data.prompt, first.tokenizer) for p in problems]
        sampling = SamplingParams(max_new_tokens=cfg.rollout.max_new_tokens, seed=0)
        rollouts = first.generator.generate(prompts, cfg.rollout.group_size, sampling)
        golds = [p.answer for p in problems for _ in range(cfg.rollout.group_size)]
        scores = first.rewards.score(rollouts.texts, golds)
        tokens = int(rollouts.completion_mask.sum())
        batch = ScoredBatch(
            rollouts, torch.arange(len(rollouts)), scores, rollouts.texts, rollouts.truncated
        )
        print(f"fixed batch: {len(rollouts)} completions, {tokens} tokens", flush=True)

        fixed: dict[str, list[float]] = {name: [] for name in ALGORITHMS}
        passes, pairs = {}, {}
        for round_ in range(args.rounds + 1):
            for name, trainer in trainers.items():
                before = calls[name].count
                start = time.perf_counter()
                learned = trainer.learn(batch)
                seconds = time.perf_counter() - start
                passes[name] = calls[name].count - before
                pairs[name] = learned.targets.num_pairs
                if round_ > 0:  # the first round warms up
                    fixed[name].append(seconds)
                print(f"fixed batch, {name}: {seconds:.1f} s", flush=True)

        steps: dict[str, list[dict]] = {name: [] for name in ALGORITHMS}
        for _ in range(args.steps):
            for name, trainer in trainers.items():
                metrics, _ = trainer.train_step()
                trainer.step += 1
                steps[name].append(metrics)
                print(f"step, {name}: {metrics['seconds_step']:.1f} s", flush=True)

    base = median(fixed["grpo"])
    micro_batches = len(rollouts) // cfg.train.micro_batch_size
    rows = [
        [
            name,
            passes[name] / micro_batches,
            pairs[name],
            median(fixed[name]),
            median(fixed[name]) / base,
        ]
        for name in ALGORITHMS
    ]
    fixed_table = markdown_table(
        [
            "algorithm",
            "decoder calls per update",
            "pairs",
            "update on the fixed batch (s, median)",
            "x grpo",
        ],
        rows,
    )
    sections = [(f"Fixed batch ({len(rollouts)} completions, {tokens} tokens)", fixed_table)]
    if args.steps:
        base_step = median([m["seconds_step"] for m in steps["grpo"]])
        step_rows = [
            [
                name,
                median([m["seconds_step"] for m in ms]),
                median([m["seconds_training"] for m in ms]),
                median([m["completion_tokens"] for m in ms]),
                median([m["seconds_step"] for m in ms]) / base_step,
            ]
            for name, ms in steps.items()
        ]
        sections.append(
            (
                "Whole steps (median)",
                markdown_table(
                    ["algorithm", "s/step", "training s", "completion tokens", "x grpo"],
                    step_rows,
                ),
            )
        )
    write_results(
        "overhead",
        "AMIR-GRPO and LENS overhead over GRPO",
        sections,
        load_before=load_before,
        notes="\n\n".join(__doc__.split("\n\n")[1:4]),
    )


if __name__ == "__main__":
    main()
