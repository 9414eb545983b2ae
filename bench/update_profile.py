"""Where the update's time goes, by operator: torch.profiler over the training forward and
backward pass of the SmolLM2 preset's update (bench/update_pass.py's setup: SmolLM2-135M-Instruct
+ LoRA 16/16, 2 prompts of 266 tokens x 8 completions of 128 tokens, random ids,
`groupwise.completion_logprobs.completion_logprobs` with the shared prompt pass, then backward
of the sum), in float32 and under bfloat16 autocast (`train.precision=bfloat16`), freed memory
kept (as `groupwise train` runs on a CPU). One warm-up pass, then `--repeats` profiled passes;
each variant in its own process.

The table gives each variant's operators by self CPU time (the time inside the operator, not its
children), summed over the profiled passes, as a share of the passes' total: what a faster
update would have to cut (docs/guides/train.md, "Mixed precision").

    python bench/update_profile.py              # 2 profiled passes per variant

Writes bench/results/update_profile.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import chosen_variants, load_average, markdown_table, write_results

VARIANTS = ("float32", "bfloat16")
TOP = 12


def profile(precision: str, repeats: int) -> dict:
    """{"total_s": seconds per pass, "ops": [[name, calls per pass, self seconds per pass]]},
    the operators sorted by self time."""
    import contextlib

    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from groupwise.completion_logprobs import completion_logprobs
    from groupwise.models import LoraSettings, attach_lora, load_model
    from groupwise.train.host_memory import keep_freed_memory

    keep_freed_memory()
    torch.manual_seed(0)
    model, _ = load_model("smollm2-135m-instruct", dtype="float32", device="cpu", seed=0)
    model = attach_lora(model, LoraSettings(r=16, alpha=16, dropout=0.0))
    model.eval()
    vocab = model.config.vocab_size
    prompts, prompt_mask = torch.randint(0, vocab, (2, 266)), torch.ones(2, 266, dtype=torch.long)
    completions = torch.randint(0, vocab, (16, 128))
    completion_mask = torch.ones(16, 128, dtype=torch.long)
    autocast = (
        torch.autocast("cpu", dtype=torch.bfloat16)
        if precision == "bfloat16"
        else contextlib.nullcontext()
    )

    def update_pass() -> None:
        with autocast:
            logp = completion_logprobs(
                model, prompts, prompt_mask, completions, completion_mask, group_size=8
            )
        logp.sum().backward()
        model.zero_grad(set_to_none=True)

    update_pass()
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(repeats):
            update_pass()
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) / 1e6 / repeats
    ops = [[e.key, e.count / repeats, e.self_cpu_time_total / 1e6 / repeats] for e in events]
    return {"total_s": total, "ops": ops}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"of: {list(VARIANTS)}")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(profile(args.child, args.repeats)))
        return
    before = load_average()
    sections = []
    for name in chosen_variants(parser, args.variants, list(VARIANTS)):
        command = [sys.executable, __file__, "--child", name, "--repeats", str(args.repeats)]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        found = json.loads(out.splitlines()[-1])
        total = found["total_s"]
        rows = [
            [f"`{op}`", calls, seconds, f"{100 * seconds / total:.1f} %"]
            for op, calls, seconds in found["ops"][:TOP]
        ]
        rest = sum(seconds for _, _, seconds in found["ops"][TOP:])
        rows.append(["the other operators", "", rest, f"{100 * rest / total:.1f} %"])
        table = markdown_table(["operator", "calls per pass", "self CPU (s)", "share"], rows)
        heading = f"{name}: {total:.2f} s of self CPU time per forward + backward pass"
        sections.append((heading, table))
        print(f"{name}: done", file=sys.stderr)
    write_results(
        "update_profile",
        "The update's forward + backward pass by operator",
        sections,
        load_before=before,
    )


if __name__ == "__main__":
    main()
