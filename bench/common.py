"""Shared helpers of the bench scripts: machine description, load average, Markdown tables and
the results file (command, machine, date, table, and the file's History section kept) every
bench writes under bench/results/."""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from groupwise.train.precision import BFLOAT16_CPU_FLAGS, cpu_flags

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"
# Every bench reads the shipped data beside the repository and never reaches for the hub.
os.environ.setdefault("GROUPWISE_DATA", str(REPO.parent / "shared" / "data"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (platform.processor() elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, e.g. '0.42 0.61 0.70' ('n/a' where unknown)."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def machine() -> str:
    """One line: CPU (cores, bf16 support) or GPU, memory, library versions."""
    import peft
    import transformers

    parts = [f"{cpu_model()}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}"]
    units = sorted(set(BFLOAT16_CPU_FLAGS) & cpu_flags())
    parts.append(", ".join(units) if units else "no avx512_bf16 or amx_bf16")
    mem = memory_gib()
    if mem is not None:
        parts.append(f"{mem:.0f} GiB RAM")
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        parts.append(f"GPU {props.name} ({props.total_memory / 2**30:.0f} GiB)")
    parts.append(
        f"python {platform.python_version()}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, peft {peft.__version__}"
    )
    return "; ".join(parts)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub Markdown table; floats get 2 to 3 significant decimals."""

    def cell(value: object) -> str:
        if isinstance(value, float):
            if value != value:  # NaN
                return "n/a"
            return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
        return str(value)

    lines = [
        "| " + " | ".join(headers) + " |",
        "| " + " | ".join("---" for _ in headers) + " |",
    ]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def command_line() -> str:
    """The command that ran this bench, as one would type it."""
    return " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])


HISTORY = "## History"
"""Heading of a results file's record of earlier measurements and one-off comparisons (written
by hand, dated, each with its command), which a rerun of the bench keeps."""


def kept_history(path: Path) -> str:
    """The History section of the results file at `path`, heading included ('' if none)."""
    text = path.read_text() if path.is_file() else ""
    start = text.find(f"\n{HISTORY}\n")
    if start < 0:
        return ""
    end = text.find("\n## ", start + 1)
    return text[start + 1 : end if end >= 0 else len(text)].strip()


def write_results(
    name: str,
    title: str,
    sections: Sequence[tuple[str, str]],
    *,
    load_before: str,
    notes: str = "",
) -> Path:
    """Writes bench/results/{name}.md: title, command, date, machine, load averages (before and
    after the run), then each (heading, body) section, then the file's History section as it
    was; prints the same text; returns the path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.md"
    history = kept_history(path)
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    header = [
        f"# {title}",
        "",
        f"- command: `{command_line()}`",
        f"- date: {now}",
        f"- machine: {machine()}",
        f"- load average (1/5/15 min) before: {load_before}; after: {load_average()}",
    ]
    body = [*header, ""]
    if notes:
        body += [notes.strip(), ""]
    for heading, text in sections:
        body += [f"## {heading}", "", text.strip(), ""]
    if history:
        body += [history, ""]
    text = "\n".join(body)
    path.write_text(text)
    print(text)
    print(f"written: {path}")
    return path


def add_threads_argument(parser: argparse.ArgumentParser) -> None:
    """--threads N: torch threads of the bench (default: torch's own choice)."""
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's own choice)"
    )


def chosen_variants(parser: argparse.ArgumentParser, text: str, known: Sequence[str]) -> list[str]:
    """The names of a comma-separated --variants value, in order; an unknown one is the parser's
    error naming the known ones."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"--variants: unknown {unknown}; known: {list(known)}")
    return names


def parse_with_threads(
    parser: argparse.ArgumentParser, argv: list[str] | None
) -> argparse.Namespace:
    """parser.parse_args(argv), then torch.set_num_threads(--threads) when given."""
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    return args


def trl_grpo_settings(cfg: Any, output_dir: Path, steps: int) -> dict[str, Any]:
    """TRL GRPOConfig keyword arguments for groupwise config `cfg`'s settings, as the benches
    that pair the two trainers share them: one generation batch of questions_per_step x G rows
    in one micro-batch, the rollout's sampling (no top-k), plain GRPO (loss "grpo", no KL, clip
    eps_low, group-scaled advantages, one update per batch), groupwise's optimizer and cosine
    schedule, no dropout, data in order, no saving or logging but TRL's own, no workers."""
    opt = cfg.optim
    return {
        "output_dir": str(output_dir),
        "max_steps": steps,
        "per_device_train_batch_size": cfg.rollout.group_size * cfg.rollout.questions_per_step,
        "gradient_accumulation_steps": 1,
        "num_generations": cfg.rollout.group_size,
        "max_completion_length": cfg.rollout.max_new_tokens,
        "temperature": cfg.rollout.temperature,
        "top_p": cfg.rollout.top_p,
        "top_k": 0,
        "loss_type": "grpo",
        "beta": 0.0,
        "epsilon": cfg.algorithm.eps_low,
        "scale_rewards": "group",
        "num_iterations": 1,
        "learning_rate": opt.lr,
        "lr_scheduler_type": "cosine",
        "warmup_steps": opt.warmup_ratio,
        "weight_decay": opt.weight_decay,
        "adam_beta1": opt.beta1,
        "adam_beta2": opt.beta2,
        "max_grad_norm": opt.max_grad_norm,
        "gradient_checkpointing": False,
        "disable_dropout": True,
        "shuffle_dataset": False,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "seed": cfg.train.seed,
        "dataloader_num_workers": 0,
    }


def lora_config(cfg: Any) -> Any:
    """peft's LoraConfig of groupwise config `cfg`'s LoRA settings (a causal LM)."""
    from peft import LoraConfig

    return LoraConfig(
        r=cfg.model.lora_r,
        lora_alpha=cfg.model.lora_alpha,
        lora_dropout=cfg.model.lora_dropout,
        target_modules=cfg.model.lora_target_modules,
        task_type="CAUSAL_LM",
    )
