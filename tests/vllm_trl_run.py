"""GroupwiseGRPOTrainer with TRL's vLLM colocate mode, on vLLM's CPU build: run as a script in
its own process (vLLM spawns its engine there), by tests/test_vllm_trl.py and bench/trl_vllm.py.

    python tests/vllm_trl_run.py MODEL_DIR OUT.json [--correction on|off] [--steps N] [...]

Trains AMIR-GRPO + LENS for a few steps on arithmetic prompts with two reward functions (a
binary one, named as the correctness reward, and a length bonus so that AMIR has pairs), and
writes OUT.json: per generation batch the rollout l(q, o) that LENS and AMIR used (gathered row
order) and the old policy TRL's loss used for the same rows (its old_per_token_logps where the
batch has them, else its own forward pass), whether TRL had old_per_token_logps, and the
trainer's log history.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


# TRL's colocate engine opens a one-process torch.distributed group; the default port (29500)
# may be taken by another run on the machine (another test, an accelerate launch).
os.environ.setdefault("MASTER_PORT", _free_port())


def tiny_vllm_model(folder: str) -> str:
    """A 2-layer Llama with random weights, head size 64 (vLLM's CPU attention supports it;
    groupwise's tiny-random has 16) and SmolLM2's tokenizer, saved to `folder`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from groupwise.models import load_model

    _, tokenizer = load_model("tiny-random")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def correct(completions, **_):
    return [float(len(c) % 2) for c in completions]


def bonus(completions, **_):
    return [min(len(c), 60) / 40 for c in completions]


def recording_trainer():
    """GroupwiseGRPOTrainer recording what LENS/AMIR used (per generation batch) and what TRL's
    loss used as the old policy (trl_support.OldPolicyRecorder)."""
    from trl_support import OldPolicyRecorder

    # Algorithm.targets looks group_targets up in its own module: patched there.
    import groupwise.algorithms.options as adapter

    class Recording(OldPolicyRecorder):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.used, self.batch_starts = [], []
            core = adapter.group_targets

            def group_targets(rewards, *a, **k):
                self.used.append(rewards.mean_logp_old.tolist())
                self.batch_starts.append(len(self.old_policy))
                return core(rewards, *a, **k)

            adapter.group_targets = group_targets

        def trl_old(self) -> list[dict[int, float]]:
            """Per generation batch: {row: TRL's old-policy mean log-prob}."""
            ends = [*self.batch_starts[1:], len(self.old_policy)]
            return [
                {
                    row: mean
                    for rows, means, _ in self.old_policy[start:end]
                    for row, mean in zip(rows, means, strict=True)
                }
                for start, end in zip(self.batch_starts, ends, strict=True)
            ]

    return Recording


def weight_sync_check(trainer, model_dir: str, prompt: str) -> dict[str, float]:
    """After TRL's weight sync (as at the start of each generation), how far vLLM's log-probs
    of a sampled completion are from the trained policy's and from the initial model's (max
    over its tokens, nats): the first is small when the weights reach vLLM."""
    import torch
    from transformers import AutoModelForCausalLM
    from vllm import SamplingParams

    trainer.vllm_generation.sync_weights()
    ids = trainer.processing_class(text=prompt)["input_ids"]
    sampled = trainer.vllm_generation.llm.generate(
        [{"prompt_token_ids": ids}],
        SamplingParams(max_tokens=8, logprobs=0, seed=0),
        use_tqdm=False,
    )[0].outputs[0]
    completion = list(sampled.token_ids)
    vllm = torch.tensor(
        [step[token].logprob for step, token in zip(sampled.logprobs, completion, strict=True)]
    )

    def logps(policy) -> torch.Tensor:
        with torch.no_grad():
            logits = policy(input_ids=torch.tensor([ids + completion])).logits[0].float()
        picked = logits[len(ids) - 1 : -1].log_softmax(-1)
        return picked.gather(1, torch.tensor(completion)[:, None]).squeeze(1)

    initial = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return {
        "vllm_vs_trained": float((vllm - logps(trainer.model)).abs().max()),
        "vllm_vs_initial": float((vllm - logps(initial)).abs().max()),
    }


def heldout_evaluations(output_dir: str) -> list[dict]:
    """PassAtKCallback's evaluations (heldout.jsonl), with each one's sample count."""
    from pathlib import Path

    from groupwise.integrations.trl.heldout import HELDOUT_FOLDER, read_evaluations

    folder = Path(output_dir) / HELDOUT_FOLDER
    return [
        {
            **line,
            "samples": len((folder / f"samples-step{line['step']}.jsonl").read_text().splitlines()),
        }
        for line in read_evaluations(output_dir)
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--correction", choices=["on", "off"], default="on")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--lora", action="store_true", help="train a LoRA adapter")
    parser.add_argument("--cores", help="the engine's cores, e.g. 0-1 (default: all of them)")
    parser.add_argument(
        "--heldout", action="store_true", help="PassAtKCallback every step (3 problems, n=2)"
    )
    args = parser.parse_args(argv)
    if args.cores:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = args.cores  # what colocate_binding reads
    from datasets import Dataset
    from peft import LoraConfig

    from groupwise.integrations.trl import GroupwiseGRPOConfig

    model = args.model if os.path.isdir(args.model) else tiny_vllm_model(args.model)
    prompts = [f"What is {i} + {2 * i}? Answer:" for i in range(8)]
    config = GroupwiseGRPOConfig(
        output_dir=tempfile.mkdtemp(),
        use_cpu=True,
        bf16=False,
        report_to=[],
        seed=0,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=args.tokens,
        max_steps=args.steps,
        logging_steps=1,
        save_strategy="no",
        learning_rate=args.learning_rate,
        optim="sgd",
        lr_scheduler_type="constant",
        max_grad_norm=1.0,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.3,
        vllm_importance_sampling_correction=args.correction == "on",
        amir=True,
        amir_margin=0.5,
        advantage_estimator="lens",
        correctness_reward="correct",
    )
    start = time.perf_counter()
    trainer = recording_trainer()(
        model=model,
        reward_funcs=[correct, bonus],
        args=config,
        train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]),
        peft_config=LoraConfig(r=8, lora_alpha=16, target_modules="all-linear")
        if args.lora
        else None,
    )
    built = time.perf_counter()
    import torch

    from groupwise.rollout.vllm_cpu import process_cores

    binding = {
        "recorded": trainer.vllm_cpu_binding,
        "process_cores": process_cores(os.getpid()),
        "torch_threads": torch.get_num_threads(),
    }
    if args.heldout:
        from groupwise.integrations.trl import PassAtKCallback

        rows = [{"prompt": p, "answer": str(3 * i)} for i, p in enumerate(prompts[:3])]
        trainer.add_callback(PassAtKCallback(trainer, rows, n=2, every=1))
    trainer.train()
    done = time.perf_counter()
    synced = weight_sync_check(trainer, model, prompts[0])
    with open(args.out, "w") as handle:
        json.dump(
            {
                **synced,
                "used": trainer.used,
                "trl_old": [[batch[row] for row in sorted(batch)] for batch in trainer.trl_old()],
                "had_old": [had for _, _, had in trainer.old_policy],
                "log_history": trainer.state.log_history,
                "heldout": heldout_evaluations(config.output_dir),
                "cpu_binding": binding,
                "seconds_build": built - start,
                "seconds_train": done - built,
            },
            handle,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
