"""GroupwiseGRPOTrainer inside real TRL (1.16) on a tiny model, on the CPU.

- train() steps of GRPO, AMIR-GRPO, LENS and both, with TRL's own sampling;
- on the fixed batch of trl_support (3 prompts x 4 completions: a mixed, an all-wrong and an
  all-correct group): the advantages and AMIR coefficients each row carries into the loss, after
  TRL's shuffle and split into micro-batches, equal groupwise.algorithms on the same rewards and
  log-probs; the gradient of an optimizer step equals the gradient of docs/algorithms.md §1-3
  written out below (TRL's on-policy clipped surrogate + lambda x L_pref), and, for AMIR with TRL's
  default "dapo" loss, TRL's own GRPO gradient + lambda x grad L_pref;
- an all-wrong group: zero gradient under GRPO, not under LENS;
- two processes (torchrun, gloo) take the same step as one, a group straddling them;
- lambda_reg travels with checkpoints; reward_functions equal groupwise's RewardSuite.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import trl_support as fx  # imports TRL: a CI dependency, so these tests never skip
from trl import GRPOTrainer

from groupwise.algorithms import (
    AdvantageSettings,
    GroupRewards,
    get_advantage_estimator,
    group_advantages,
    mine_pairs,
    preference_coefficients,
)
from groupwise.integrations.trl import GroupwiseGRPOConfig, GroupwiseGRPOTrainer
from groupwise.integrations.trl.trainer import STATE_FILE

TESTS = Path(__file__).resolve().parent
B = len(fx.COMPLETIONS)
ALGORITHMS = {
    "grpo": {},
    "amir": {"amir": True},
    "lens": {"advantage_estimator": "lens"},
    "amir+lens": {"amir": True, "advantage_estimator": "lens"},
}


# ---------------------------------------------------------------------------------------------
# docs/algorithms.md §1-3, written out for this batch (nothing here calls groupwise.algorithms)


def std(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def normalised(values: list[float]) -> list[float]:
    mean = sum(values) / len(values)
    return [(v - mean) / (std(values) + 1e-4) for v in values]


def groups(values: list) -> list[list]:
    return [values[g : g + fx.G] for g in range(0, len(values), fx.G)]


def lens_totals(pbar: list[float]) -> list[float]:
    """bonus + calibrated correctness rt (docs/algorithms.md §3 and "AMIR-GRPO + LENS together";
    weights 1)."""
    out = []
    for g, (r, p) in enumerate(zip(groups(fx.CORRECT), groups(pbar), strict=True)):
        d = 2 * max(p)
        if any(r):
            d = max(d, 1 / (sum(ri / pi for ri, pi in zip(r, p, strict=True)) / fx.G))
        for i in range(fx.G):
            rt = 1.0 if r[i] else -(1 / fx.G) * p[i] / (d - p[i])
            out.append(fx.BONUS[g * fx.G + i] + rt)
    return out


def lens_advantages(totals: list[float], alpha: float = 0.25) -> list[float]:
    out = []
    for r, t in zip(groups(fx.CORRECT), groups(totals), strict=True):
        if all(r):
            out += [0.0] * fx.G
        elif any(r):
            out += normalised(t)
        else:
            out += [alpha * (v - sum(t) / fx.G) for v in t]
    return out


def pairs_of(totals: list[float], margin: float = 0.5) -> list[tuple[int, int]]:
    return [
        (g + i, g + j)
        for g in range(0, B, fx.G)
        for i in range(fx.G)
        for j in range(fx.G)
        if totals[g + i] - totals[g + j] > margin
    ]


def preference(means: list[torch.Tensor], pairs: list[tuple[int, int]], beta: float = 0.5):
    return torch.stack([-F.logsigmoid(beta * (means[i] - means[j])) for i, j in pairs]).mean()


def flat_grad(loss: torch.Tensor, model: torch.nn.Module) -> list[torch.Tensor]:
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params, strict=True)]


def relative_error(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    diff = sum(float(((a - b).double() ** 2).sum()) for a, b in zip(got, want, strict=True))
    return math.sqrt(diff) / math.sqrt(sum(float((b.double() ** 2).sum()) for b in want))


def direct_logps(initial: torch.nn.Module, tokenizer) -> list[torch.Tensor]:
    return [fx.row_logps(initial, fx.prompt_ids(tokenizer, r), fx.COMPLETIONS[r]) for r in range(B)]


# ---------------------------------------------------------------------------------------------
# train() with TRL's own sampling


def sum_reward(prompts, completions, completion_ids, **_):
    return [float(sum(ids) % 2) for ids in completion_ids]


def spread_reward(prompts, completions, completion_ids, **_):
    return [len(set(ids)) / 4 for ids in completion_ids]


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_train_steps_of_every_algorithm(tmp_path: Path, name: str) -> None:
    options = {**ALGORITHMS[name], "correctness_reward": "sum_reward", "amir_margin": 0.1}
    model, tokenizer = fx.tiny_model()
    before = [p.detach().clone() for p in model.parameters()]
    args = fx.config(tmp_path, max_steps=2, optim="adamw_torch", learning_rate=1e-3, **options)
    trainer = GroupwiseGRPOTrainer(
        model=model,
        reward_funcs=[sum_reward, spread_reward],
        args=args,
        train_dataset=fx.dataset(),
        processing_class=tokenizer,
    )
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 2
    assert all(math.isfinite(entry["loss"]) and entry["grad_norm"] > 0 for entry in logs)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    if name == "grpo":  # AMIR and LENS off: TRL's own logs, nothing of groupwise's
        assert not [key for key in logs[-1] if key.startswith(("groups/", "amir/"))]
        return
    fractions = [logs[-1][f"groups/{k}"] for k in ("all_correct", "all_wrong", "mixed")]
    assert all(0 <= f <= 1 for f in fractions) and sum(fractions) == pytest.approx(1)
    if "amir" in name:
        assert 0.005 <= logs[-1]["amir/lambda"] <= 0.05
        assert logs[-1]["amir/pairs"] >= 0 and math.isfinite(logs[-1]["amir/preference_loss"])
    else:
        assert "amir/lambda" not in logs[-1]


# ---------------------------------------------------------------------------------------------
# What each row carries into the loss


ROLLOUT_LOGPS = {
    # where the rollout l(q, o) come from: (layout, no-grad passes made, loss computations)
    # one generation batch per optimizer step in 2 micro-batches (TRL keeps no old log-probs)
    "no-grad pass": ({"per_device_train_batch_size": 6, "gradient_accumulation_steps": 2}, 1, 2),
    # the same in one micro-batch: from the loss's own forward pass
    "loss forward": ({"per_device_train_batch_size": 12, "gradient_accumulation_steps": 1}, 0, 1),
    # a generation batch over 2 optimizer steps: TRL computes old_per_token_logps
    "TRL": ({"per_device_train_batch_size": 3, "steps_per_generation": 4, "max_steps": 2}, 0, 4),
}


@pytest.mark.parametrize("name", list(ALGORITHMS))
@pytest.mark.parametrize("rollout_logps", list(ROLLOUT_LOGPS))
def test_rows_carry_the_core_values_through_trls_shuffle(
    tmp_path: Path, name: str, rollout_logps: str
) -> None:
    layout, passes, seen = ROLLOUT_LOGPS[rollout_logps]
    trainer, initial, _ = fx.trainer(tmp_path, **ALGORITHMS[name], **layout)
    trainer.train()
    tokenizer = trainer.processing_class
    with torch.no_grad():
        mean_old = torch.stack([lp.mean() for lp in direct_logps(initial, tokenizer)])
    rewards = torch.tensor([fx.CORRECT, fx.BONUS], dtype=torch.float32).T
    totals = rewards.sum(dim=1)
    if "lens" in name:
        result = get_advantage_estimator("lens").fn(
            GroupRewards(
                rewards=totals,
                correct=torch.tensor(fx.CORRECT).bool(),
                group_size=fx.G,
                correctness=rewards[:, 0],
                correct_reward=1.0,
                mean_logp_old=mean_old,
            ),
            AdvantageSettings(),
        )
        advantages, pair_rewards = result.advantages, result.rewards
    else:
        advantages, pair_rewards = group_advantages(totals, fx.G), totals
    chosen, rejected = mine_pairs(pair_rewards, fx.G, 0.5)
    coefficients = preference_coefficients(mean_old, None, chosen, rejected, 0.5).coefficients

    assert len(trainer.seen) == seen
    assert trainer.no_grad_passes == (0 if name == "grpo" else passes)  # GRPO needs none
    seen = trainer.seen
    assert all(s["has_old"] == (rollout_logps == "TRL") for s in seen)
    rows = [r for s in seen for r in s["rows"]]
    assert sorted(rows) == list(range(B)), "every row reaches the loss once"
    assert any(len({r // fx.G for r in s["rows"]}) > 1 for s in seen), "TRL mixed the groups"
    assert rows != list(range(B)), "TRL shuffled the rows"
    for s in seen:
        assert s["prompts"] == [fx.prompt_ids(tokenizer, r) for r in s["rows"]]
        torch.testing.assert_close(s["advantages"], advantages[s["rows"]], atol=2e-5, rtol=1e-5)
        if "amir" in name:
            torch.testing.assert_close(
                s["coefficients"], coefficients[s["rows"]], atol=1e-7, rtol=1e-4
            )
        else:
            assert s["coefficients"] is None
    if "amir" in name:
        assert chosen.numel() > 0 and bool((coefficients != 0).all())


# ---------------------------------------------------------------------------------------------
# Gradients


def direct_gradient(
    initial: torch.nn.Module,
    tokenizer,
    lens: bool,
    step_rows: list[int],
    lam: float = 0.0,
    scale: float = 1.0,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(total, preference part) of an optimizer step's gradient, from docs/algorithms.md: the mean
    over the step's rows of -A_i * (token mean of log pi), the on-policy gradient of TRL's
    "grpo" loss, plus lam * scale * grad L_pref with only the step's rows' l differentiated."""
    logps = direct_logps(initial, tokenizer)
    means = [lp.mean() for lp in logps]
    totals = [c + b for c, b in zip(fx.CORRECT, fx.BONUS, strict=True)]
    if lens:
        totals = lens_totals([math.exp(float(m.detach())) for m in means])
        advantages = lens_advantages(totals)
    else:
        advantages = [a for group in groups(totals) for a in normalised(group)]
    policy = torch.stack([-advantages[r] * logps[r].mean() for r in step_rows]).mean()
    if not lam:
        return flat_grad(policy, initial), []
    stepped = [m if r in step_rows else m.detach() for r, m in enumerate(means)]
    pref = lam * scale * preference(stepped, pairs_of(totals))
    return flat_grad(policy + pref, initial), flat_grad(pref, initial)


def first_micro_batch_lambda(initial, tokenizer, rows: list[int]) -> float:
    """The official rule once, from lambda_init 0.01 (docs/algorithms.md §2): ratio = lambda L_pref
    / L_GRPO of the first micro-batch, which on-policy is the mean of -A over its rows (LENS)."""
    with torch.no_grad():
        means = [lp.mean() for lp in direct_logps(initial, tokenizer)]
    totals = lens_totals([math.exp(float(m)) for m in means])
    advantages = lens_advantages(totals)
    first = -sum(advantages[r] for r in rows) / len(rows)
    ratio = 0.01 * float(preference(means, pairs_of(totals))) / max(1e-9, first)
    if ratio < 0.3:
        return 0.0125
    return 0.008 if ratio > 0.7 else 0.01


GRADIENT_CASES = {
    # name: (options, scale of the AMIR term per optimizer step)
    "amir, fixed lambda": (
        {"amir": True, "amir_lambda_measure": "fixed", "amir_lambda_init": 0.05},
        1.0,
    ),
    "lens": (
        {
            "advantage_estimator": "lens",
            "per_device_train_batch_size": 12,
            "gradient_accumulation_steps": 1,
        },
        1.0,
    ),
    # a generation batch over 2 optimizer steps (TRL's old log-probs; the first step sees half
    # the rows, so its AMIR term counts twice); lambda from the first micro-batch's loss
    "amir+lens, 2 steps per generation": (
        {
            "amir": True,
            "advantage_estimator": "lens",
            "per_device_train_batch_size": 3,
            "steps_per_generation": 4,
        },
        2.0,
    ),
}


@pytest.mark.parametrize("case", list(GRADIENT_CASES))
def test_gradient_equals_the_written_out_objective(tmp_path: Path, case: str) -> None:
    options, scale = GRADIENT_CASES[case]
    amir, lens = options.get("amir", False), options.get("advantage_estimator") == "lens"
    trainer, initial, grads = fx.trainer(tmp_path, **options)
    trainer.train()
    step = trainer.seen[: trainer.args.gradient_accumulation_steps]
    step_rows = [r for s in step for r in s["rows"]]
    tokenizer = trainer.processing_class
    lam = trainer.seen[0]["lambda"] if amir else 0.0
    if amir and options.get("amir_lambda_measure") == "fixed":
        assert lam == 0.05
    elif amir:
        assert lam == pytest.approx(first_micro_batch_lambda(initial, tokenizer, step[0]["rows"]))
    if amir:
        assert all(s["lambda"] == lam for s in step)
    total, pref = direct_gradient(initial, tokenizer, lens, step_rows, lam, scale)
    assert relative_error(grads.steps[0], total) < 1e-5
    if amir:
        without = direct_gradient(initial, tokenizer, lens, step_rows)[0]
        got_pref = [g - w for g, w in zip(grads.steps[0], without, strict=True)]
        assert relative_error(got_pref, pref) < 2e-3, "the AMIR part on its own is exact"


class PlainTRL(fx.FixedCompletions, GRPOTrainer):
    """TRL's own GRPOTrainer on the same fixed batch."""


def test_amir_gradient_is_trls_grpo_gradient_plus_lambda_preference(tmp_path: Path) -> None:
    # TRL's default loss ("dapo"), one optimizer step over 2 micro-batches of 6 rows.
    options = {"loss_type": "dapo", "amir_lambda_measure": "fixed", "amir_lambda_init": 0.05}
    ours, initial, ours_grads = fx.trainer(tmp_path / "groupwise", amir=True, **options)
    ours.train()
    plain_args = fx.trl_config(tmp_path / "trl", loss_type="dapo")
    plain, _, plain_grads = fx.trainer(tmp_path / "trl", cls=PlainTRL, args=plain_args)
    plain.train()
    tokenizer = ours.processing_class
    means = [lp.mean() for lp in direct_logps(initial, tokenizer)]
    totals = [c + b for c, b in zip(fx.CORRECT, fx.BONUS, strict=True)]
    pref = flat_grad(0.05 * preference(means, pairs_of(totals)), initial)
    difference = [a - b for a, b in zip(ours_grads.steps[0], plain_grads.steps[0], strict=True)]
    assert relative_error(difference, pref) < 2e-3
    assert relative_error(ours_grads.steps[0], plain_grads.steps[0]) > 1e-3  # AMIR mattered


@pytest.mark.parametrize("name", ["grpo", "lens"])
def test_an_all_wrong_group_moves_the_policy_under_lens_only(tmp_path: Path, name: str) -> None:
    cls = type("AllWrong", (fx.Recording,), {"first_row": fx.G})  # group 1: none correct
    trainer, _, grads = fx.trainer(
        tmp_path,
        cls=cls,
        reward_funcs=[fx.correct],
        prompts=[fx.PROMPTS[1]],
        per_device_train_batch_size=fx.G,
        gradient_accumulation_steps=1,
        **ALGORITHMS[name],
    )
    trainer.train()
    assert trainer.seen[0]["rows"] and all(fx.CORRECT[r] == 0 for r in trainer.seen[0]["rows"])
    norm = math.sqrt(sum(float((g**2).sum()) for g in grads.steps[0]))
    if name == "grpo":
        assert norm == 0.0
    else:
        assert norm > 1e-6
        assert float(trainer.seen[0]["advantages"].abs().min()) > 0
        logged = next(e for e in trainer.state.log_history if "groups/all_wrong" in e)
        assert logged["groups/all_wrong"] == 1.0
        assert logged["groups/all_wrong_with_gradient"] == 1.0  # the one group, all wrong


# ---------------------------------------------------------------------------------------------
# Processes, checkpoints, rewards


def test_two_processes_take_the_same_step_as_one(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "OMP_NUM_THREADS": "1",
    }
    script = str(TESTS / "trl_support.py")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    runs = {}
    for n, command in ((1, [sys.executable, script]), (2, [*torchrun, script])):
        (tmp_path / str(n)).mkdir()
        runs[n] = subprocess.Popen(
            [*command, str(tmp_path / str(n))],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    for n, process in runs.items():
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, f"{n} process(es) failed:\n{output.decode()[-3000:]}"
    one, two = (torch.load(tmp_path / str(n) / "step.pt") for n in (1, 2))
    for layout, passes in (("one micro-batch", 0), ("two micro-batches", 1)):
        a, b = one[layout], two[layout]
        assert (a["processes"], b["processes"]) == (1, 2)
        assert b["rows_per_process"] == 6  # process 0: rows 0-5, so group 1 (rows 4-7) straddles
        assert a["no_grad_passes"] == b["no_grad_passes"] == passes
        assert a["lambda"] == b["lambda"] != 0.01
        assert relative_error(b["grads"], a["grads"]) < 1e-5, layout


def test_lambda_travels_with_checkpoints(tmp_path: Path) -> None:
    trainer, _, _ = fx.trainer(
        tmp_path, amir=True, save_strategy="steps", save_steps=1, max_steps=1
    )
    trainer.train()
    value = trainer.lambda_reg.value
    assert value != 0.01
    checkpoint = tmp_path / "checkpoint-1"
    assert (checkpoint / STATE_FILE).is_file()
    resumed, _, _ = fx.trainer(tmp_path / "again", amir=True)
    resumed.create_optimizer_and_scheduler(num_training_steps=1)
    resumed._load_optimizer_and_scheduler(str(checkpoint))
    assert resumed.lambda_reg.value == value
    (checkpoint / STATE_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=STATE_FILE):
        resumed._load_optimizer_and_scheduler(str(checkpoint))


@pytest.mark.parametrize("checking", ["groupwise", "amir_official"])
def test_reward_functions_are_groupwises_components(checking: str) -> None:
    from groupwise.integrations.trl import reward_functions
    from groupwise.rewards import AMIR_GRPO_WEIGHTS, RewardSuite

    texts = [
        "<think> 2+3 </think> <answer> \\boxed{5} </answer> <analysis> ok </analysis> "
        "<confidence> 0.9 </confidence>",
        "The answer is 6.",
        "<answer> 5 </answer>",
        "<answer> 5 </answer> (checked with 6 apples)",  # the official reading takes the 6
    ]
    golds = ["5"] * len(texts)
    functions, weights = reward_functions(AMIR_GRPO_WEIGHTS, workers=1, checking=checking)
    assert [f.__name__ for f in functions] == list(AMIR_GRPO_WEIGHTS)
    assert weights == list(AMIR_GRPO_WEIGHTS.values())
    suite = RewardSuite(AMIR_GRPO_WEIGHTS, workers=1, checking=checking)
    expected = suite.score(texts, golds).columns
    conversational = [[{"role": "assistant", "content": t}] for t in texts]
    for function in functions:
        got = function(prompts=["q"] * len(texts), completions=conversational, answer=golds)
        assert got == pytest.approx(expected[function.__name__].tolist())
    last = 2.0 if checking == "groupwise" else 0.0
    assert expected["correctness"].tolist() == [2.0, 0.0, 2.0, last]
    with pytest.raises(KeyError, match="gold answers"):
        functions[0](prompts=["q"], completions=["x"], solution=["5"])
    with pytest.raises(ValueError, match="amir_official"):
        reward_functions(AMIR_GRPO_WEIGHTS, checking="nope")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"advantage_estimator": "nope"}, "registered: grpo, lens"),
        ({"amir_lambda_measure": "grad"}, "second backward pass"),
        ({"advantage_estimator": "lens", "scale_rewards": "batch"}, "scale_rewards='group'"),
        ({"amir": True, "mask_truncated_completions": True}, "mask_truncated_completions"),
        ({"dynamic_sampling": True}, "one fixed batch of prompts per step and cannot draw"),
        ({"amir": True, "multi_objective_aggregation": "normalize_then_sum"}, "sum_then_normalize"),
        ({"amir_lambda_low": 0.8}, "amir_lambda_low must be < amir_lambda_high"),
        ({"amir_pair_mode": "best"}, "pair_mode='best'"),
    ],
)
def test_config_errors_name_the_option(tmp_path: Path, options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GroupwiseGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], **options)


def test_lens_needs_to_know_the_correctness_reward(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"correctness_reward to one of \['correct', 'bonus'\]"):
        fx.trainer(tmp_path, advantage_estimator="lens", correctness_reward=None)
    with pytest.raises(TypeError, match="GroupwiseGRPOConfig"):
        GroupwiseGRPOTrainer(
            model=fx.tiny_model()[0],
            reward_funcs=[fx.correct],
            args=fx.trl_config(tmp_path),
            train_dataset=fx.dataset(),
        )


# ---------------------------------------------------------------------------------------------
# The example script and the accelerate configs it documents


def _example():
    import importlib.util

    path = TESTS.parent / "examples" / "trl_amir_grpo.py"
    spec = importlib.util.spec_from_file_location("trl_amir_grpo", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_example_script_takes_a_step(tmp_path: Path, data_dir: Path) -> None:
    example = _example()
    _, args = example.parse_args(["--amir", "--advantage_estimator", "lens", "--bf16", "false"])
    assert (args.amir, args.advantage_estimator, args.loss_type, args.max_grad_norm) == (
        True,
        "lens",
        "grpo",
        0.1,
    )
    trainer = example.main(
        [
            *("--model_name_or_path", "tiny-random", "--data_dir", str(data_dir)),
            *("--amir", "--advantage_estimator", "lens", "--amir_margin", "0.1"),
            *("--max_steps", "1"),
            *("--num_generations", "2", "--per_device_train_batch_size", "2"),
            *("--max_completion_length", "4", "--bf16", "false", "--use_cpu", "true"),
            *("--gradient_checkpointing", "false", "--report_to", "none"),
            *("--save_strategy", "no", "--output_dir", str(tmp_path)),
            *("--heldout_problems", "2", "--heldout_n", "2", "--heldout_every", "1"),
        ]
    )
    log = next(entry for entry in trainer.state.log_history if "loss" in entry)
    assert trainer.args.correctness_reward == "correctness"
    assert trainer.args.correctness_value == 2.0
    assert [f.__name__ for f in trainer.reward_funcs] == [
        "correctness",
        "expression_official",
        "format_official",
        "integer_official",
        "tag_count",
        "calibration_official",
    ]
    assert math.isfinite(log["loss"]) and "amir/lambda" in log and "groups/all_wrong" in log
    assert (tmp_path / "adapter_model.safetensors").is_file()
    # held-out pass@k before the step and after it, with calibration (the amir prompt)
    from groupwise.integrations.trl.heldout import read_evaluations

    evaluations = read_evaluations(tmp_path)
    assert [e["step"] for e in evaluations] == [0, 1]
    assert all(len(e["correct"]) == 2 and "calibration" in e for e in evaluations)


def test_accelerate_configs_load() -> None:
    from accelerate.commands.config.config_args import ClusterConfig

    kinds = {
        path.name: ClusterConfig.from_yaml_file(str(path)).distributed_type.value
        for path in sorted((TESTS.parent / "examples" / "accelerate").glob("*.yaml"))
    }
    assert kinds == {
        "deepspeed_zero2.yaml": "DEEPSPEED",
        "deepspeed_zero3.yaml": "DEEPSPEED",
        "fsdp2.yaml": "FSDP",
        "multi_gpu.yaml": "MULTI_GPU",
    }


# ---------------------------------------------------------------------------------------------
# The batch math's errors (terms.py, no TRL run)


def test_trl_reward_columns_map_onto_the_core() -> None:
    from groupwise.algorithms import PairSettings, group_targets
    from groupwise.integrations.trl.terms import (
        Correctness,
        group_rewards,
        resolve_correctness,
        scorable_rows,
    )

    weights = torch.ones(2)
    correctness = resolve_correctness(["correct", "bonus"], weights, "correct", 1.0, True)
    assert correctness == Correctness(0, "correct", 1.0, 1.0)
    assert resolve_correctness(["only"], weights[:1], None, 2.0, True).value == 2.0
    # not needed (no LENS) and not named: not guessed, so a non-binary reward is never checked
    assert resolve_correctness(["only"], weights[:1], None, 2.0, False) is None
    assert resolve_correctness(["a", "b"], weights, None, 1.0, False) is None
    with pytest.raises(ValueError, match=r"'nope' is not one of the reward functions \['a', 'b'\]"):
        resolve_correctness(["a", "b"], weights, "nope", 1.0, False)

    # LENS's binary requirement, in one line naming the function
    partial = torch.tensor([[1.0, 0.0], [0.5, 0.0], [0.0, 1.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match=r"reward function 'correct' returned \[0.0, 0.5, 1.0\]"):
        group_rewards(partial, weights, 2, correctness, required=True)

    # Row 1: every function returned None. No crash: its group (rows 0-1) gets advantage 0 and
    # no pair (without the rule the totals 1 > 0 would pair them); group 1 is what it is alone.
    nan = float("nan")
    rewards = torch.tensor([[1.0, nan], [nan, nan], [0.0, 1.0], [1.0, 0.5]])
    assert scorable_rows(rewards).tolist() == [True, False, True, True]
    logp = torch.tensor([-0.5, -0.9, -1.2, -0.3])
    batch = group_rewards(rewards, weights, 2, correctness, required=True, mean_logp_old=logp)
    assert batch.rewards.tolist() == [1.0, 0.0, 1.0, 1.5]  # a None counts 0 in the total
    lens = get_advantage_estimator("lens")
    pairs = PairSettings(margin=0.4, beta=0.5)
    targets = group_targets(
        batch, lens, AdvantageSettings(), pairs, scorable=scorable_rows(rewards)
    )
    alone = group_targets(
        group_rewards(rewards[2:], weights, 2, correctness, required=True, mean_logp_old=logp[2:]),
        lens,
        AdvantageSettings(),
        pairs,
    )
    assert targets.advantages[:2].tolist() == [0.0, 0.0]
    assert targets.advantages[2:].tolist() == alone.advantages.tolist()
    assert alone.advantages.abs().sum() > 0
    assert (targets.chosen.tolist(), targets.rejected.tolist()) == ([3], [2])
    z = 0.5 * (-0.3 - -1.2)
    weight = 0.5 * torch.sigmoid(torch.tensor(-z)).item()
    torch.testing.assert_close(targets.coefficients, torch.tensor([0.0, 0.0, weight, -weight]))
