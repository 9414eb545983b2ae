"""TRL's own GRPO test suite against GroupwiseGRPOTrainer, in three modes.

- `trl`: TRL's GRPOTrainer / GRPOConfig, the baseline (which tests pass on this machine at all);
- `swap`: GroupwiseGRPOTrainer / GroupwiseGRPOConfig with their defaults (AMIR and LENS off:
  must behave exactly as TRL);
- `amir_lens`: AMIR-GRPO + LENS on (trl_suite_plugin.AMIR_LENS_OPTIONS), with a binary
  correctness reward (trl_suite_plugin.groupwise_correct) appended to every trainer's rewards.

TRL's tests are not in its PyPI distributions: point --tests at the tests folder of a TRL
checkout that has scripts/ beside it (its dataset scripts build the datasets offline):

    git -C TRL_MIRROR archive <commit> tests scripts | tar -x -C /work/trl-src
    python tests/peer/trl_grpo_suite.py --tests /work/trl-src/tests --mode swap
    python tests/peer/trl_grpo_suite.py --tests /work/trl-src/tests --mode swap --rerun-failed
    python tests/peer/trl_grpo_suite.py --report-only   # rewrite the report from the JSON

Hub models and datasets are replaced by local stand-ins built once (trl_suite_standins.py) under
--standins; pytest runs with one worker, offline, with trl_suite_plugin loaded. Each run's
per-test outcomes merge into bench/results/trl_grpo_suite.json (per environment and mode; a
selective rerun updates only the tests it ran), from which bench/results/trl_grpo_suite.md is
written: counts, runs (command, wall time, load average, date), TRL's own skips, and every
failure of `swap` and `amir_lens` classified against the baseline. It is a compatibility suite,
not a benchmark: its outcomes are a result, so they live with the others in bench/results/.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

# the machine line and load average of every result are bench/common.py's
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from common import REPO, RESULTS_DIR, load_average, machine
from trl_suite_standins import build

PEER = Path(__file__).resolve().parent
MODES = ("trl", "swap", "amir_lens")
TEST_FILE = "test_grpo_trainer.py"
JSON_PATH = RESULTS_DIR / "trl_grpo_suite.json"
MD_PATH = RESULTS_DIR / "trl_grpo_suite.md"
DEFAULT_STANDINS = Path(tempfile.gettempdir()) / "groupwise-trl-suite-standins"

REFUSALS = {
    r"needs scale_rewards='group'": "LENS normalises mixed groups by their own std: "
    "scale_rewards='group' only",
    r"need multi_objective_aggregation='sum_then_normalize'": "AMIR / LENS read the weighted "
    "sum of the rewards: multi_objective_aggregation='sum_then_normalize' only",
    r"mask_truncated_completions=True": "mask_truncated_completions=True removes the tokens "
    "AMIR's l(q, o) and LENS's confidence are measured on",
    r"amir_lambda_measure='grad'": "amir_lambda_measure='grad' needs a second backward pass",
    r"is not below .*, the largest gap": "an AMIR margin no two rewards can exceed",
    r"LENS needs a binary correctness reward": "LENS with a correctness reward that is not 0/1",
    r"needs args=GroupwiseGRPOConfig": "GroupwiseGRPOTrainer needs a GroupwiseGRPOConfig",
}
"""Message pattern of an error the adapter raises on purpose -> what it refuses (README)."""

NOTES: dict[tuple[str, str], str] = {
    ("amir_lens", "test_correct_reward_processing_classes_list"): "harness: the test asserts "
    "len(trainer.reward_processing_classes) == 2, and mode amir_lens appends a reward function "
    "(and its processing class)",
    ("amir_lens", "test_single_reward_model_with_single_processing_class"): "harness: the test "
    "passes one processing class for its one reward model and asserts there is one; mode "
    "amir_lens appends a reward function (and a processing class for it)",
    ("amir_lens", "test_warning_raised_all_rewards_none"): "harness: the appended correctness "
    "reward never returns None, so no row has all rewards None and TRL's warning the test "
    "expects is not raised (modes trl and swap run the all-None case itself)",
    ("amir_lens", "test_reward_metric_reflects_reward_weights"): "harness: the test checks the "
    "logged reward equals 0.7 x 1 + 0.3 x 0, and the appended correctness reward (weight 1) "
    "adds its mean to that total",
}
"""(mode, test name without parameters) -> the explanation of a failure neither shared with
`trl` nor a refusal, found by reading the test: `harness: ...` where the failure comes from
what mode amir_lens adds (a reward function, AMIR_LENS_OPTIONS), `adapter bug: ...` otherwise."""


SHARED_CAUSES = {
    r"couldn't connect to 'https://huggingface.co'": "a vision-language model with no offline "
    "stand-in",
    r"index out of range in self": "the test mocks generate() with Qwen's own token ids "
    "(151643, 151645), beyond the stand-in tokenizer's vocabulary",
    r"has no attribute 'eos_token_ids'": "the checkout's tests build a bare trainer with the "
    "attributes of another TRL version than the installed one",
    r"DID NOT RAISE": "without liger-kernel installed, the checkout's test expects an error "
    "from use_liger_kernel=True that the installed TRL does not raise when the trainer is built",
    r"assert 'ref' not in": "the checkout's test expects no 'ref' adapter for a LoRA on MoE "
    "expert parameters (peft#3340); the installed TRL and peft 0.21 make one",
    r"test_entropy_bonus_flows_gradients": "the installed TRL returns entropies with gradient "
    "after the test turns the entropy bonus off (the checkout's test expects them detached)",
}
"""Pattern of a failure every mode shares (searched in "node id: message") -> its cause on this
machine (summarised in the report; the shared failures are listed with the others)."""


def environment_key() -> str:
    """Which environment ran: the virtual environment's folder and transformers' version."""
    import transformers

    return f"{Path(sys.prefix).name} (transformers {transformers.__version__})"


def trl_version() -> str:
    from importlib.metadata import version

    return version("trl")


def pytest_command(tests: Path, mode: str, standins: Path, *options: str) -> tuple[list, dict]:
    """(argv, environment) of pytest on TRL's GRPO test file in `mode`, offline, one worker."""
    env = {
        **os.environ,
        "HF_HOME": str(standins / "hf"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRL_SUITE_MODE": mode,
        "TRL_SUITE_STANDINS": str(standins),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PEER), os.environ.get("PYTHONPATH")])),
        # one thread: on a shared 2-core machine more threads per process only contend
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    plugins = ["-p", "trl_suite_plugin", "-p", "no:cacheprovider"]
    return [sys.executable, "-m", "pytest", *plugins, "-W", "ignore::FutureWarning", *options], env


def collect(tests: Path, standins: Path) -> list[str]:
    """Node ids of TRL's GRPO test file, in file order."""
    command, env = pytest_command(
        tests, "trl", standins, f"{tests.name}/{TEST_FILE}", "--collect-only", "-q"
    )
    done = subprocess.run(command, cwd=tests.parent, env=env, capture_output=True, text=True)
    nodes = [line for line in done.stdout.splitlines() if f"{TEST_FILE}::" in line]
    if not nodes:
        raise SystemExit(f"pytest collected no test:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return nodes


def run_nodes(
    tests: Path, mode: str, standins: Path, nodes: list[str]
) -> tuple[dict[str, dict[str, Any]], float]:
    """Run the node ids in `mode`; returns (their outcomes, wall seconds)."""
    with tempfile.TemporaryDirectory() as scratch:
        junit = Path(scratch) / "junit.xml"
        options = ("-q", "-rs", "--tb=line", f"--junitxml={junit}")
        command, env = pytest_command(tests, mode, standins, *nodes, *options)
        start = time.monotonic()
        subprocess.run(command, cwd=tests.parent, env=env, check=False)
        wall = time.monotonic() - start
        ran = read_junit(junit) if junit.is_file() else {}
    missing = [node for node in nodes if node not in ran]
    if missing:
        raise SystemExit(f"{mode}: pytest reported nothing for {missing[:3]} (see its output)")
    return ran, wall


def read_junit(junit: Path) -> dict[str, dict[str, Any]]:
    """node id -> {"outcome": passed|failed|error|skipped|xfailed, "message", "time"}."""
    results = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        parts = module.split("/")
        if parts[-1].startswith("Test"):  # a test class's method
            node = f"{'/'.join(parts[:-1])}.py::{parts[-1]}::{case.get('name')}"
        else:
            node = f"{module}.py::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                message = (child.get("message") or "").strip()
                if child.tag == "skipped":
                    outcome = "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
                else:
                    outcome = "failed" if child.tag == "failure" else "error"
        results[node] = {
            "outcome": outcome,
            "message": one_line(message),
            "time": float(case.get("time") or 0),
        }
    return results


def one_line(message: str) -> str:
    """The first informative line of a pytest message, at most 300 characters."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def load_results() -> dict[str, Any]:
    return json.loads(JSON_PATH.read_text()) if JSON_PATH.is_file() else {}


def failed_nodes(results: dict[str, Any], env: str, modes: list[str]) -> list[str]:
    """Node ids that failed or errored in any of `modes` (stored results of `env`)."""
    nodes = set()
    for mode in modes:
        tests = results.get(env, {}).get(mode, {}).get("tests", {})
        nodes |= {node for node, r in tests.items() if r["outcome"] in ("failed", "error")}
    return sorted(nodes)


def test_name(node: str) -> str:
    """`path::Class::test_x[param]` -> `test_x`."""
    return node.split("::")[-1].split("[")[0]


def classify(mode: str, node: str, result: dict[str, Any], baseline: dict[str, Any] | None) -> str:
    """Why a `swap` / `amir_lens` failure is not an adapter bug, or that it may be one."""
    for pattern, refusal in REFUSALS.items():
        if re.search(pattern, result["message"]):
            return f"refusal by design: {refusal}"
    if baseline is not None and baseline["outcome"] in ("failed", "error"):
        return "shared with `trl`"
    if (mode, test_name(node)) in NOTES:
        return NOTES[(mode, test_name(node))]
    if baseline is None:
        return "not run in `trl` yet"
    return "NOT shared, no refusal: investigate"


def counts(tests: dict[str, Any]) -> Counter:
    return Counter(r["outcome"] for r in tests.values())


def render(results: dict[str, Any]) -> str:
    """bench/results/trl_grpo_suite.md from the stored results."""
    out = [
        "# TRL's GRPO test suite against GroupwiseGRPOTrainer",
        "",
        "Written by `tests/peer/trl_grpo_suite.py` (how it works, and how to run it: its "
        "docstring).",
        "Modes: `trl` = TRL's own GRPOTrainer/GRPOConfig (baseline); `swap` = "
        "GroupwiseGRPOTrainer/GroupwiseGRPOConfig with defaults (AMIR, LENS off); `amir_lens` = "
        "AMIR-GRPO + LENS on, a binary correctness reward appended "
        "(`tests/peer/trl_suite_plugin.py`).",
        "",
        "Offline: the hub models are stand-ins of the same architecture classes and sizes as "
        "TRL's tiny models, random weights, SmolLM2's tokenizer with each family's special "
        "tokens and TRL's own chat template for it; the datasets are made by TRL's own "
        "scripts/generate_zen*_dataset.py (`tests/peer/trl_suite_standins.py`). The "
        "vision-language models have no stand-in: their tests fail in every mode (shared). "
        "Mode `amir_lens` "
        "appends `groupwise_correct` (1 if the completion's text has an even length, else 0: "
        "binary, about half correct on a random policy) to each trainer's reward functions and "
        "names it the correctness reward, with an AMIR margin of 0.5, so that TRL's layouts "
        "get mixed groups, pairs and LENS advantages; a test that builds no reward function "
        "keeps none.",
        "",
    ]
    order = ("passed", "failed", "error", "skipped", "xfailed")
    for env, modes in results.items():
        collected = modes.get("collected")
        out += [f"## {env}", ""]
        if collected:
            out += [f"{collected} tests collected from {TEST_FILE}.", ""]
        header = "| mode | tests | " + " | ".join(order) + " | test time (s) |"
        out += [header, "|" + " --- |" * (len(order) + 3)]
        for mode in MODES:
            if mode not in modes:
                continue
            tests = modes[mode]["tests"]
            c = counts(tests)
            seconds = sum(r["time"] for r in tests.values())
            cells = " | ".join(str(c.get(key, 0)) for key in order)
            out.append(f"| `{mode}` | {len(tests)} | {cells} | {seconds:.0f} |")
        out += [
            "",
            "Runs (one pytest process per chunk of tests; a rerun updates the tests it ran):",
            "",
        ]
        for mode in MODES:
            runs = modes.get(mode, {}).get("runs", [])
            if not runs:
                continue
            loads = [
                float(run[key].split()[0]) for run in runs for key in ("load_before", "load_after")
            ]
            wall = sum(run["wall_s"] for run in runs)
            out.append(
                f"- `{mode}`: {len(runs)} pytest runs, {sum(r['tests'] for r in runs)} test runs, "
                f"{runs[0]['date']} to {runs[-1]['date']}, wall {wall / 60:.0f} min in all; 1-min "
                f"load average {min(loads):.1f} to {max(loads):.1f} (2 cores shared with 4 other "
                f"engineers); {runs[-1]['machine']}; TRL tests from {runs[-1]['tests_from']}"
            )
            # --only lists (priority passes of this session) shortened, so that commands repeat;
            # the script named where it is now, so that a command reruns as written (runs
            # before its move from bench/ stored the old path)
            shortened = (
                re.sub(r"(--only \S+ ?)+", "--only NAME... ", run["command"].partition(" ")[2])
                for run in runs
            )
            script = Path(__file__).resolve().relative_to(REPO).as_posix()
            for command in dict.fromkeys(shortened):
                out.append(f"  - `python {script} {command.strip()}`")
        out += skipped_section(modes)
        for mode in ("swap", "amir_lens"):
            out += failure_section(modes, mode)
    return "\n".join(out) + "\n"


def skipped_section(modes: dict[str, Any]) -> list[str]:
    """TRL's own skips (GPU, vLLM, liger, ...) and xfails, by reason, from the mode that ran
    the most tests."""
    ran = [modes[mode]["tests"] for mode in MODES if mode in modes]
    tests = max(ran, key=len, default={})  # skips are the same in every mode
    reasons = Counter(
        (r["outcome"], re.sub(r"^.*?: ", "", r["message"]) if r["outcome"] == "skipped" else "")
        for r in tests.values()
        if r["outcome"] in ("skipped", "xfailed")
    )
    if not reasons:
        return []
    out = ["", "Skipped or expected to fail in every mode, for TRL's own reasons:", ""]
    for (outcome, reason), n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        out.append(f"- {n} {outcome}{': ' + reason if reason else ' (marked xfail by TRL)'}")
    return out


def failure_section(modes: dict[str, Any], mode: str) -> list[str]:
    tests = modes.get(mode, {}).get("tests", {})
    baseline = modes.get("trl", {}).get("tests", {})
    failures = {n: r for n, r in tests.items() if r["outcome"] in ("failed", "error")}
    if mode not in modes:
        return []
    out = ["", f"### Failures in `{mode}` ({len(failures)})", ""]
    if not failures:
        return [*out, "None."]
    causes = Counter(
        next((c for p, c in SHARED_CAUSES.items() if re.search(p, f"{n}: {r['message']}")), "other")
        for n, r in failures.items()
        if classify(mode, n, r, baseline.get(n)) == "shared with `trl`"
    )
    if causes:
        out.append(
            "Shared with `trl`, by cause: "
            + "; ".join(f"{n} {cause}" for cause, n in causes.most_common())
            + "."
        )
        out.append("")
    out += ["| test | cause (first line) | classification |", "| --- | --- | --- |"]
    for node, result in sorted(failures.items()):
        cause = result["message"].replace("|", "\\|")
        label = classify(mode, node, result, baseline.get(node))
        out.append(f"| `{node.split('::', 1)[1]}` | {cause} | {label} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=Path, help="the tests folder of a TRL checkout")
    parser.add_argument("--mode", choices=MODES, action="append", help="repeatable; default all")
    parser.add_argument("--standins", type=Path, default=DEFAULT_STANDINS)
    parser.add_argument(
        "--chunk",
        type=int,
        default=12,
        help="tests per pytest run; every mode runs a chunk "
        "before the next chunk starts, and results are saved after each run (resumable)",
    )
    parser.add_argument(
        "--rerun-failed", action="store_true", help="only the tests that failed in that mode"
    )
    parser.add_argument(
        "--failures-of",
        choices=MODES,
        action="append",
        help="only the tests that failed in these modes (e.g. a baseline of the swap failures)",
    )
    parser.add_argument(
        "--fresh", action="store_true", help="rerun tests that already have a stored result"
    )
    parser.add_argument(
        "--only",
        action="append",
        help="repeatable: only the tests of this name (a test function, all its parameters)",
    )
    parser.add_argument("nodes", nargs="*", help="node ids to run (default: the whole file)")
    parser.add_argument(
        "--source", help="what the TRL checkout is, for the report (e.g. 'main at f2cd577')"
    )
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    results = load_results()
    env = environment_key()
    if not args.report_only:
        if args.tests is None or not (args.tests / TEST_FILE).is_file():
            raise SystemExit(f"--tests {args.tests}: no {TEST_FILE} there (TRL's tests folder)")
        tests = args.tests.resolve()
        build(args.standins, tests.parent)
        prefix = f"{tests.name}/"
        nodes = [n if n.startswith(prefix) else prefix + n for n in args.nodes]
        if not nodes:
            nodes = collect(tests, args.standins)
            results.setdefault(env, {})["collected"] = len(nodes)
        if args.only:
            nodes = [node for node in nodes if test_name(node) in args.only]
        modes = args.mode or list(MODES)
        todo = {}
        for mode in modes:
            stored = results.get(env, {}).get(mode, {}).get("tests", {})
            chosen = nodes
            if args.rerun_failed or args.failures_of:
                wanted = set(failed_nodes(results, env, [mode] if args.rerun_failed else []))
                wanted |= set(failed_nodes(results, env, args.failures_of or []))
                chosen = [node for node in nodes if node in wanted]
            elif not args.fresh and not args.nodes:
                chosen = [node for node in nodes if node not in stored]  # resume
            todo[mode] = chosen
        for start in range(0, len(nodes), args.chunk):
            chunk = set(nodes[start : start + args.chunk])
            for mode in modes:
                selection = [node for node in todo[mode] if node in chunk]
                if not selection:
                    continue
                load_before = load_average()
                ran, wall = run_nodes(tests, mode, args.standins, selection)
                stored = results.setdefault(env, {}).setdefault(mode, {"tests": {}, "runs": []})
                stored["tests"].update(ran)
                stored["runs"].append(
                    {
                        "date": datetime.datetime.now().isoformat(timespec="minutes"),
                        "tests": len(selection),
                        "counts": dict(counts(ran)),
                        "wall_s": round(wall, 1),
                        "load_before": load_before,
                        "load_after": load_average(),
                        "machine": f"{machine()}, trl {trl_version()}; pytest with "
                        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')}",
                        "tests_from": f"{tests} ({args.source})" if args.source else str(tests),
                        "command": " ".join(shlex.quote(part) for part in sys.argv),
                    }
                )
                JSON_PATH.write_text(json.dumps(results, indent=1, sort_keys=True))
                MD_PATH.write_text(render(results))
                done = sum(len(todo[m]) for m in modes)
                print(
                    f"{mode}: {dict(counts(ran))} in {wall:.0f} s ({start + len(chunk)} of "
                    f"{len(nodes)} tests; {done} test runs planned)",
                    flush=True,
                )
    MD_PATH.write_text(render(results))
    print(f"wrote {MD_PATH.relative_to(REPO)}")


if __name__ == "__main__":
    main()
