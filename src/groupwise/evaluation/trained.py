"""`groupwise eval --model RUN_FOLDER`: evaluate a training run as it was trained
(docs/guides/evaluate.md, "Evaluate a training run").

`--model` may name a run folder (the one `groupwise train` wrote: it holds config.yaml), its
final/ folder, a checkpoint folder (checkpoints/step-N) or a weights folder inside them
(final/model, final/adapter, final/merged, step-N/model, step-N/adapter). `trained_model`
finds the run and the weights: in a run folder final/merged, else final/model, else
final/adapter, else the newest checkpoint's; full weights load as the model, an adapter on the
run's base model (model.name). The run's config.yaml gives the defaults of the sampling and
checking flags (RUN_DEFAULTS: data.prompt, reward.checking, rollout.temperature, top_p and
max_new_tokens) and of --benchmarks: data.heldout when the run has one, else the test split of
each benchmark it trained on (data.benchmark, or the parts of data.mix) with the training
data's options; a run that trained on a benchmark with no other split to test on has no
default, and eval asks for --benchmarks. The k of pass@k follow --n (metrics.doubling_ks: 1, 2,
4, ... up to n, as the held-out evaluation reports them). A flag given on the command line
wins, and when it changes the prompt or the checking mode the model was trained with, one
warning says so and how to match it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from groupwise.data import benchmark_splits
from groupwise.metrics import doubling_ks

__all__ = ["RUN_DEFAULTS", "TrainedModel", "apply_run", "trained_model"]

RUN_CONFIG = "config.yaml"
_ADAPTER_CONFIG = "adapter_config.json"
_WEIGHTS = ("merged", "model", "adapter")  # in final/, the first present is evaluated

# eval flag (argparse dest) <- (section, key) of the run's config.yaml
RUN_DEFAULTS: dict[str, tuple[str, str]] = {
    "prompt": ("data", "prompt"),
    "checking": ("reward", "checking"),
    "temperature": ("rollout", "temperature"),
    "top_p": ("rollout", "top_p"),
    "max_new_tokens": ("rollout", "max_new_tokens"),
}
# the flags whose change from training is warned about
_TRAINED_WITH = ("prompt", "checking")


@dataclass(frozen=True)
class TrainedModel:
    """A training run's weights as `groupwise eval` loads them.

    run: the run folder. weights: the folder of the weights chosen. model: what load_model
    loads (the weights folder, or the run's base model when the weights are an adapter).
    adapter: the adapter folder, or None. defaults: eval flag -> the run's value (RUN_DEFAULTS,
    and "benchmarks": data.heldout, else the test splits of the training data).
    benchmarks_from: where defaults["benchmarks"] comes from, as printed ("data.heldout", ...);
    without a default it is the reason, which eval prints when --benchmarks is not given.
    """

    run: Path
    weights: Path
    model: str
    adapter: str | None
    defaults: dict[str, Any]
    benchmarks_from: str = ""


def _run_folder(path: Path) -> Path | None:
    """The training run folder `path` is, or is inside (at most 3 levels up), else None."""
    for folder in [path, *list(path.parents)[:3]]:
        config = folder / RUN_CONFIG
        if config.is_file() and (folder / "metrics.jsonl").exists():
            return folder
    return None


def _weights(path: Path, run: Path) -> Path:
    """The weights folder meant by `path` inside `run` (module docstring)."""
    if (path / "config.json").is_file() or (path / _ADAPTER_CONFIG).is_file():
        return path  # a weights folder itself
    for name in _WEIGHTS:  # final/ (or a checkpoint folder, which holds model/ or adapter/)
        if (path / name).is_dir():
            return path / name
    if path == run:
        for name in _WEIGHTS:
            if (run / "final" / name).is_dir():
                return run / "final" / name
        steps = sorted(
            (int(p.name.split("-", 1)[1]), p)
            for p in (run / "checkpoints").glob("step-*")
            if p.name.split("-", 1)[1].isdigit()
        )
        for _, checkpoint in reversed(steps):
            for name in ("model", "adapter"):
                if (checkpoint / name).is_dir():
                    return checkpoint / name
    raise FileNotFoundError(
        f"{path} is in the training run {run} but holds no weights (looked for final/merged, "
        "final/model, final/adapter and checkpoints/step-N/model or adapter): has the run "
        "written a checkpoint yet?"
    )


def trained_model(name: str) -> TrainedModel | None:
    """The run and weights `--model name` names, or None when it is no training run's folder
    (an alias, a hub id, a plain model folder). Raises FileNotFoundError when it is in a run
    that holds no weights yet, ValueError when the run's config.yaml cannot be read."""
    path = Path(name).expanduser()
    if not path.is_dir():
        return None
    run = _run_folder(path)
    if run is None:
        return None
    try:
        config = yaml.safe_load((run / RUN_CONFIG).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise ValueError(f"{run / RUN_CONFIG} cannot be read: {error}") from None
    if not isinstance(config, dict) or not isinstance(config.get("model"), dict):
        raise ValueError(f"{run / RUN_CONFIG} is not a groupwise training config")
    weights = _weights(path, run)
    adapter = (weights / _ADAPTER_CONFIG).is_file()
    defaults = {
        flag: config[section][key]
        for flag, (section, key) in RUN_DEFAULTS.items()
        if isinstance(config.get(section), dict) and key in config[section]
    }
    specs, benchmarks_from = _benchmarks(config.get("data"), run)
    if specs:
        defaults["benchmarks"] = specs
    return TrainedModel(
        run=run,
        weights=weights,
        model=str(config["model"]["name"]) if adapter else str(weights),
        adapter=str(weights) if adapter else None,
        defaults=defaults,
        benchmarks_from=benchmarks_from,
    )


def _benchmarks(data: Any, run: Path) -> tuple[tuple[str, ...], str]:
    """The --benchmarks a run is evaluated on by default and where they come from, as printed
    (module docstring); no specs, and the reason to print, when nothing is left to test on."""
    data = data if isinstance(data, dict) else {}
    heldout = data.get("heldout")
    if isinstance(heldout, dict) and heldout.get("benchmark"):
        return (_spec(heldout),), "data.heldout"
    mix = data.get("mix")
    mixed = isinstance(mix, list) and bool(mix)
    where, parts = ("data.mix", mix) if mixed else ("data.benchmark", [data])
    parts = [p for p in parts if isinstance(p, dict) and p.get("benchmark")]
    specs = [_spec({**p, "split": "test"}) for p in parts if _test_split_beside(p)]
    if specs:
        return tuple(dict.fromkeys(specs)), f"{where}'s test split; no data.heldout"
    trained = ", ".join(f"{p['benchmark']}:{p.get('split') or 'train'}" for p in parts)
    return (), (
        f"the training run {run} has no data.heldout and trained on {trained or 'nothing named'}, "
        "which leaves no test split to evaluate on: pass --benchmarks NAME[:SPLIT]"
    )


def _test_split_beside(part: dict[str, Any]) -> bool:
    """Whether the benchmark of a training part has a test split the part did not train on."""
    try:
        return "test" in benchmark_splits(str(part["benchmark"])) and part.get("split") != "test"
    except ValueError:  # not registered here (a plugin's benchmark): no default to offer
        return False


def _spec(part: dict[str, Any]) -> str:
    """data.heldout as a --benchmarks spec NAME[:SPLIT][@KEY=VALUE...] (its options kept; its
    random subset, size or fraction, is --limit's business)."""
    spec = str(part["benchmark"]) + (f":{part['split']}" if part.get("split") else "")
    for key, value in (part.get("options") or {}).items():
        spec += f"@{key}={value}"
    return spec


def apply_run(args: argparse.Namespace, trained: TrainedModel, n: Any) -> tuple[str, ...]:
    """Fill args from the run: --model and --adapter with its weights, each flag of
    `trained.defaults` left unset with the run's value, and --k, when not given, with the
    doubling ks up to `n` (the samples per problem: --n, else the preset's). Returns the lines
    to print: what was taken, and one warning when a flag given changes the trained prompt or
    checking mode. Raises ValueError (the reason) when --benchmarks is not given and the run
    offers none."""
    if args.benchmarks is None and "benchmarks" not in trained.defaults:
        raise ValueError(trained.benchmarks_from)
    given = {flag: getattr(args, flag) for flag in trained.defaults}
    args.model, args.adapter = trained.model, trained.adapter
    taken = []
    for flag, value in trained.defaults.items():
        if given[flag] is None:
            setattr(args, flag, value)
            shown = ",".join(value) if isinstance(value, tuple) else value
            where = f" ({trained.benchmarks_from})" if flag == "benchmarks" else ""
            taken.append(f"--{flag.replace('_', '-')} {shown}{where}")
    lines = [
        f"evaluating {trained.weights} of the training run {trained.run}"
        + (f"; from its config.yaml: {' '.join(taken)}" if taken else "")
    ]
    if args.ks is None and isinstance(n, int) and not isinstance(n, bool) and n >= 1:
        args.ks = tuple(doubling_ks(n))
        lines[0] += f"; --k {','.join(map(str, args.ks))} (1, 2, 4, ... up to --n {n})"
    changed = [
        (flag, given[flag], trained.defaults[flag])
        for flag in _TRAINED_WITH
        if given.get(flag) is not None and given[flag] != trained.defaults.get(flag, given[flag])
    ]
    if changed:
        what = "; ".join(f"--{flag} {now} (trained with {then})" for flag, now, then in changed)
        match = " ".join(f"--{flag} {then}" for flag, _, then in changed)
        lines.append(
            f"warning: {what}: the scores are not those of the policy as trained; to match "
            f"training, drop the flag or pass {match}"
        )
    return tuple(lines)
