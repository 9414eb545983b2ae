"""AMIR-GRPO, LENS or both with TRL's GRPOTrainer: a complete script to copy.

Every GroupwiseGRPOConfig option (TRL's GRPOConfig plus groupwise's AMIR-GRPO and LENS options:
--amir, --advantage_estimator lens, --amir_beta, --amir_margin, --lens_alpha, ...) is a
command-line flag, as in TRL's own example scripts; `--help` lists them with their
documentation. Without --amir and --advantage_estimator it is plain TRL GRPO.

On a CPU, offline, with the SmolLM2-135M-Instruct that groupwise embeds and GSM8K from the
shared data folder (GROUPWISE_DATA or ../shared/data):

    python examples/trl_amir_grpo.py --amir --amir_margin 0.1 --max_steps 2 \
        --max_completion_length 64 --bf16 false --gradient_checkpointing false \
        --output_dir runs/trl-example --report_to none
    python examples/trl_amir_grpo.py --advantage_estimator lens --rewards lens ...   # LENS
    python examples/trl_amir_grpo.py --amir --advantage_estimator lens ...           # both

(--amir_margin 0.1 only so that the untrained model's groups have preference pairs; the official
margin is 2.0 with the AMIR-GRPO reward.) On GPUs, with vLLM and DeepSpeed / FSDP: see the
README section "Use with TRL" and the accelerate configs in examples/accelerate/.

The changes from a plain TRL GRPO script are the two class names (GroupwiseGRPOConfig,
GroupwiseGRPOTrainer) and the options.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from datasets import Dataset
from peft import LoraConfig
from transformers import HfArgumentParser

from groupwise.data import build_messages, get_template, load_benchmark
from groupwise.integrations.trl import (
    GroupwiseGRPOConfig,
    GroupwiseGRPOTrainer,
    PassAtKCallback,
    reward_functions,
)
from groupwise.models import load_model, model_aliases
from groupwise.rewards import AMIR_GRPO_CHECKING, AMIR_GRPO_WEIGHTS, LENS_CHECKING, LENS_WEIGHTS

REWARDS = {
    # preset: (component weights, checking mode, correctness reward, its value when correct)
    "amir": (AMIR_GRPO_WEIGHTS, AMIR_GRPO_CHECKING, "correctness", 2.0),  # AMIR-GRPO official
    "lens": (LENS_WEIGHTS, LENS_CHECKING, "binary", 1.0),  # LENS: binary, Math-Verify
}


@dataclass
class ScriptArguments:
    model_name_or_path: str = field(
        default="smollm2-135m-instruct",
        metadata={"help": "Hub id, folder, or a groupwise alias (smollm2-135m-instruct)."},
    )
    benchmark: str = field(default="gsm8k", metadata={"help": "groupwise benchmark to train on."})
    split: str = field(default="train", metadata={"help": "Split of the benchmark."})
    data_dir: str | None = field(
        default=None,
        metadata={
            "help": "Folder laid out like ../shared/data; default env GROUPWISE_DATA, "
            "else ../shared/data."
        },
    )
    prompt: str = field(
        default="amir", metadata={"help": "groupwise prompt template: amir | boxed | gsm8k."}
    )
    rewards: str = field(
        default="amir",
        metadata={
            "help": "Reward preset: amir (five components) | lens (binary).",
            "choices": list(REWARDS),
        },
    )
    heldout_problems: int = field(
        default=0,
        metadata={
            "help": "Evaluate pass@k (and calibration with an amir prompt) on this many problems "
            "of the benchmark's test split while training (groupwise's PassAtKCallback); 0: none."
        },
    )
    heldout_every: int = field(default=50, metadata={"help": "Steps between evaluations."})
    heldout_n: int = field(default=8, metadata={"help": "Completions per held-out problem."})
    use_peft: bool = field(default=True, metadata={"help": "Train a LoRA adapter."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank (AMIR-GRPO paper: 16)."})
    lora_alpha: int = field(default=16, metadata={"help": "LoRA alpha (AMIR-GRPO paper: 16)."})


def parse_args(argv: list[str] | None = None) -> tuple[ScriptArguments, GroupwiseGRPOConfig]:
    """The script's options and the trainer's (GroupwiseGRPOConfig), from argv (or sys.argv)."""
    parser = HfArgumentParser((ScriptArguments, GroupwiseGRPOConfig))
    # The AMIR-GRPO official settings where TRL's defaults differ (docs/algorithms.md §2).
    parser.set_defaults(
        learning_rate=5e-6,
        loss_type="grpo",  # token mean per completion, then mean (the papers' Eq. 1)
        max_grad_norm=0.1,
        weight_decay=0.1,
        adam_beta2=0.99,
        lr_scheduler_type="cosine",
        warmup_steps=0.1,  # a float in [0, 1): the ratio of the total steps
        num_generations=8,
        per_device_train_batch_size=8,
        max_completion_length=1024,
        logging_steps=1,
    )
    return parser.parse_args_into_dataclasses(args=argv)


def main(argv: list[str] | None = None) -> GroupwiseGRPOTrainer:
    """Train as the flags say; returns the trainer (its state holds the logged metrics)."""
    script, training_args = parse_args(argv)
    weights, checking, correctness, value = REWARDS[script.rewards]
    if training_args.correctness_reward is None:
        training_args.correctness_reward, training_args.correctness_value = correctness, value
    funcs, reward_weights = reward_functions(weights, checking=checking)
    training_args.reward_weights = reward_weights

    # data_dir None: GROUPWISE_DATA, else ../shared/data (groupwise train's default, too)
    problems = load_benchmark(script.benchmark, split=script.split, data_dir=script.data_dir)
    dataset = Dataset.from_list(
        [{"prompt": build_messages(p, script.prompt), "answer": p.answer} for p in problems]
    )

    model, tokenizer = script.model_name_or_path, None
    if script.model_name_or_path in model_aliases():  # groupwise's shipped models
        model, tokenizer = load_model(script.model_name_or_path)
    peft_config = (
        LoraConfig(
            r=script.lora_r,
            lora_alpha=script.lora_alpha,
            target_modules="all-linear",
            task_type="CAUSAL_LM",
        )
        if script.use_peft
        else None
    )
    trainer = GroupwiseGRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=training_args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    if script.heldout_problems:
        heldout = load_benchmark(script.benchmark, split="test", data_dir=script.data_dir)
        rows = [
            {"prompt": build_messages(p, script.prompt), "answer": p.answer, "id": p.id}
            for p in heldout[: script.heldout_problems]
        ]
        trainer.add_callback(
            PassAtKCallback(
                trainer,
                rows,
                n=script.heldout_n,
                every=script.heldout_every,
                calibration=get_template(script.prompt).asks_confidence,
                checking=checking,
            )
        )
    trainer.train()
    trainer.save_model(training_args.output_dir)
    return trainer


if __name__ == "__main__":
    main()
