"""The trainer's gradient on a fixed batch equals the gradient of the docs/algorithms.md formulas,
computed directly, for every algorithm path.

A fixed batch of 2 questions x 2 completions goes through `Trainer.learn` with a stand-in
optimizer that records each update's gradient (and the weights it was taken at) and then takes
a plain SGD step, so that later updates (mini-batches 2+, epochs 2+) see a moved policy. Each
recorded gradient is compared with the gradient of a direct, loop-by-loop implementation of
docs/algorithms.md §1-3 below: every completion scored by its own unpadded forward pass, advantages,
LENS rewards, pairs, the clipped surrogate, KL, L_pref and the adaptive lambda written out by
hand. Nothing here calls groupwise.algorithms.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from groupwise.rewards import Scores, Verdict
from groupwise.rollout import Rollouts
from groupwise.train.batch import ScoredBatch
from groupwise.train.preflight import load_run_config
from groupwise.train.step_metrics import step_metrics
from groupwise.train.trainer import Trainer

G = 2
# Two prompts (the first left padded), two completions each, right padded to 4 tokens.
PROMPT_IDS = torch.tensor([[0, 0, 11, 12, 13], [21, 22, 23, 24, 25]])
PROMPT_MASK = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
COMPLETION_IDS = torch.tensor([[31, 32, 33, 0], [41, 42, 43, 44], [51, 0, 0, 0], [61, 62, 0, 0]])
COMPLETION_MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]])
REWARDS = [3.0, 0.0, 1.0, 4.0]  # AMIR pairs at margin 2: (0, 1) and (3, 2)
# LENS: question 0 is a mixed group (row 0 right), question 1 a negative group
CORRECT = [True, False, False, False]
SGD_LR = 0.5


class SGDRecorder:
    """Stands in for AdamW: records the gradient of each update and the weights it was taken
    at, then takes a plain SGD step (so the next update sees a moved policy)."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params = params
        self.grads: list[list[torch.Tensor]] = []
        self.weights: list[list[torch.Tensor]] = []

    def step(self) -> None:
        self.grads.append([p.grad.clone() for p in self.params])
        self.weights.append([p.detach().clone() for p in self.params])
        with torch.no_grad():
            for p in self.params:
                p -= SGD_LR * p.grad

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None


# ---------------------------------------------------------------------------------------------
# docs/algorithms.md, written out


def row_logps(model: torch.nn.Module, temperature: float = 1.0) -> list[torch.Tensor]:
    """log pi(o_t | q, o_<t) of each completion, from its own unpadded pass (with gradient)."""
    out = []
    for row in range(4):
        prompt = PROMPT_IDS[row // G][PROMPT_MASK[row // G].bool()]
        completion = COMPLETION_IDS[row][COMPLETION_MASK[row].bool()]
        ids = torch.cat([prompt, completion])[None]
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
        out.append(torch.log_softmax(logits, -1).gather(1, completion[:, None]).squeeze(1))
    return out


def std(values: list[float], unbiased: bool = True) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - unbiased))


def normalised(values: list[float]) -> list[float]:
    """GRPO within one group: (r - mean) / (unbiased std + 1e-4)."""
    mean = sum(values) / len(values)
    return [(v - mean) / (std(values) + 1e-4) for v in values]


def grpo_advantages(rewards: list[float]) -> list[float]:
    return [a for g in range(0, 4, G) for a in normalised(rewards[g : g + G])]


def lens_rt(correct: list[bool], pbar: list[float]) -> list[float]:
    """docs/algorithms.md §3: rt_i = r_i - (1 - r_i)(1/G) pbar_i / (D - pbar_i)."""
    out = []
    for g in range(0, 4, G):
        r, p = correct[g : g + G], pbar[g : g + G]
        floor = 2 * max(p)
        if any(r):
            d_imp = 1 / (sum(ri / pi for ri, pi in zip(r, p, strict=True)) / G)
            d = max(d_imp, floor)
        else:
            d = floor
        out += [1.0 if ri else -(1 / G) * pi / (d - pi) for ri, pi in zip(r, p, strict=True)]
    return out


def lens_advantages(
    totals: list[float], plain: list[float], correct: list[bool], mode: str, alpha: float = 0.25
) -> list[float]:
    out = []
    for g in range(0, 4, G):
        r, t = correct[g : g + G], totals[g : g + G]
        if all(r):
            out += [0.0] * G
        elif any(r):
            out += normalised(plain[g : g + G] if mode == "negative_only" else t)
        elif mode == "mixed_only":
            out += [0.0] * G
        else:
            mean = sum(t) / G
            out += [alpha * (v - mean) for v in t]
    return out


def surrogate(
    logps: list[torch.Tensor],
    olds: list[torch.Tensor],
    advantages: list[float],
    rows: list[int],
    eps: tuple[float, float] = (0.2, 0.2),
    sequence: bool = False,
) -> torch.Tensor:
    """Mean over the rows of the per-completion token mean of -min(rho A, clip(rho) A)."""
    per_row = []
    for i in rows:
        log_ratio = logps[i] - olds[i]
        if sequence:
            log_ratio = log_ratio.mean().expand_as(log_ratio)
        rho = torch.exp(log_ratio)
        a = advantages[i]
        per_token = -torch.minimum(rho * a, rho.clamp(1 - eps[0], 1 + eps[1]) * a)
        per_row.append(per_token.mean())
    return torch.stack(per_row).mean()


def kl(logps: list[torch.Tensor], refs: list[torch.Tensor], rows: list[int]) -> torch.Tensor:
    per_row = []
    for i in rows:
        delta = refs[i] - logps[i]
        per_row.append((torch.exp(delta) - delta - 1).mean())
    return torch.stack(per_row).mean()


def pairs_of(totals: list[float], margin: float) -> list[tuple[int, int]]:
    return [
        (g + i, g + j)
        for g in range(0, 4, G)
        for i in range(G)
        for j in range(G)
        if totals[g + i] - totals[g + j] > margin
    ]


def preference(
    means: list[torch.Tensor], pairs: list[tuple[int, int]], beta: float, count: int
) -> torch.Tensor:
    """sum over `pairs` of -log sigmoid(beta (l_i - l_j)), divided by the batch's pair count."""
    terms = [-F.logsigmoid(beta * (means[i] - means[j])) for i, j in pairs]
    return torch.stack(terms).sum() / count if terms else torch.zeros(())


def lambda_rule(value: float, ratio: float) -> float:
    """docs/algorithms.md §2: the band rule with the official constants."""
    if ratio < 0.30:
        return min(0.05, 1.25 * value)
    if ratio > 0.70:
        return max(0.005, 0.8 * value)
    return value


def flat_grad(loss: torch.Tensor, params: list[torch.Tensor]) -> list[torch.Tensor]:
    grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params, strict=True)]


def norm(grads: list[torch.Tensor]) -> float:
    return math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))


# ---------------------------------------------------------------------------------------------
# The cases


@dataclass
class Context:
    """What a direct loss sees at one update: the current policy's log-probs (with gradient),
    the rollout policy's (constants), the reference's, and the trainable parameters."""

    logps: list[torch.Tensor]
    olds: list[torch.Tensor]
    refs: list[torch.Tensor]
    params: list[torch.Tensor]

    @property
    def means(self) -> list[torch.Tensor]:
        return [lp.mean() for lp in self.logps]

    @property
    def pbar(self) -> list[float]:
        return [math.exp(float(o.mean())) for o in self.olds]


@dataclass
class Case:
    overrides: list[str]
    # update index -> the update's gradient, from the Context of that update
    direct: Callable[[Context, int], list[torch.Tensor]]
    columns: dict[str, list[float]] = field(default_factory=lambda: {"text_hash": REWARDS})
    updates: int = 1


def _scores(columns: dict[str, list[float]], correct: list[bool] = CORRECT) -> Scores:
    total = torch.stack([torch.tensor(v) for v in columns.values()]).sum(0)
    return Scores(
        columns={k: torch.tensor(v) for k, v in columns.items()},
        weights=dict.fromkeys(columns, 1.0),
        total=total,
        correct=torch.tensor(correct),
        verdicts=[Verdict("correct" if c else "wrong", "x") for c in correct],
    )


ALL = [0, 1, 2, 3]


def grpo_case(ctx: Context, update: int, **kw) -> list[torch.Tensor]:
    loss = surrogate(ctx.logps, ctx.olds, grpo_advantages(REWARDS), ALL, **kw)
    return flat_grad(loss, ctx.params)


def dapo_case(ctx: Context, update: int) -> list[torch.Tensor]:
    a = grpo_advantages(REWARDS)
    tokens = [-a[i] * torch.exp(ctx.logps[i] - ctx.olds[i]) for i in ALL]
    return flat_grad(torch.cat(tokens).sum() / sum(len(t) for t in tokens), ctx.params)


def kl_case(ctx: Context, update: int) -> list[torch.Tensor]:
    loss = surrogate(ctx.logps, ctx.olds, grpo_advantages(REWARDS), ALL)
    return flat_grad(loss + 0.1 * kl(ctx.logps, ctx.refs, ALL), ctx.params)


def lens_case(mode: str) -> Callable[[Context, int], list[torch.Tensor]]:
    def direct(ctx: Context, update: int) -> list[torch.Tensor]:
        rt = lens_rt(CORRECT, ctx.pbar)
        plain = [float(c) for c in CORRECT]
        a = lens_advantages(rt, plain, CORRECT, mode)
        return flat_grad(surrogate(ctx.logps, ctx.olds, a, ALL), ctx.params)

    return direct


def amir_fixed_case(ctx: Context, update: int) -> list[torch.Tensor]:
    pairs = pairs_of(REWARDS, 2.0)
    assert pairs == [(0, 1), (3, 2)]
    loss = surrogate(ctx.logps, ctx.olds, grpo_advantages(REWARDS), ALL)
    return flat_grad(loss + 0.01 * preference(ctx.means, pairs, 0.5, len(pairs)), ctx.params)


def amir_loss_lambda_case(ctx: Context, update: int) -> list[torch.Tensor]:
    # two micro-batches (one question each): lambda is updated on each loss computation, from
    # that micro-batch's L_GRPO and mean pair loss (at l_old = l_theta on-policy), then used
    # for that micro-batch's term; each pair term is normalised by the batch's 2 pairs.
    a, pairs, value, grads = grpo_advantages(REWARDS), pairs_of(REWARDS, 2.0), 0.01, None
    for rows in ([0, 1], [2, 3]):
        mine = [(i, j) for i, j in pairs if i in rows]
        pg = surrogate(ctx.logps, ctx.olds, a, rows)
        pref_mean = float(preference(ctx.means, mine, 0.5, len(mine)))
        value = lambda_rule(value, value * pref_mean / max(1e-9, float(pg)))
        share = len(rows) / 4
        part = flat_grad(share * pg + value * preference(ctx.means, mine, 0.5, 2), ctx.params)
        grads = part if grads is None else [g + p for g, p in zip(grads, part, strict=True)]
    LAMBDAS.append(value)
    return grads


def amir_grad_lambda_case(ctx: Context, update: int) -> list[torch.Tensor]:
    pairs = pairs_of(REWARDS, 2.0)
    pg = flat_grad(surrogate(ctx.logps, ctx.olds, grpo_advantages(REWARDS), ALL), ctx.params)
    pref = flat_grad(preference(ctx.means, pairs, 0.5, len(pairs)), ctx.params)
    value = lambda_rule(0.01, 0.01 * norm(pref) / norm(pg))
    LAMBDAS.append(value)
    return [g + value * p for g, p in zip(pg, pref, strict=True)]


def amir_lens_case(ctx: Context, update: int) -> list[torch.Tensor]:
    # docs/algorithms.md §3, "AMIR-GRPO + LENS together": rt replaces the binary component inside
    # the sum; LENS's rules on that total; pairs on that total (margin 0.5 here, so the calibration
    # matters).
    binary = [float(c) for c in CORRECT]
    rt = lens_rt(CORRECT, ctx.pbar)
    totals = [h + (b if c else r) for h, b, r, c in zip(REWARDS, binary, rt, CORRECT, strict=True)]
    plain = [h + b for h, b in zip(REWARDS, binary, strict=True)]
    a = lens_advantages(totals, plain, CORRECT, "full")
    pairs = pairs_of(totals, 0.5)
    loss = surrogate(ctx.logps, ctx.olds, a, ALL)
    return flat_grad(loss + 0.01 * preference(ctx.means, pairs, 0.5, len(pairs)), ctx.params)


def minibatch_case(ctx: Context, update: int) -> list[torch.Tensor]:
    # M = 2: update 0 takes question 0 at the rollout policy, update 1 question 1 with the
    # rollout policy's logp_old (the policy has moved: ratio != 1). Advantages are those of the
    # whole batch (scale=batch: centred per group, divided by the std of all 4 rewards).
    means = [sum(REWARDS[g : g + G]) / G for g in range(0, 4, G) for _ in range(G)]
    a = [(r - m) / (std(REWARDS) + 1e-4) for r, m in zip(REWARDS, means, strict=True)]
    rows = [[0, 1], [2, 3]][update]
    return flat_grad(surrogate(ctx.logps, ctx.olds, a, rows), ctx.params)


LAMBDAS: list[float] = []

CASES = {
    "grpo_two_micro_batches": Case(["train.micro_batch_size=2"], grpo_case),
    "dapo": Case(["algorithm.aggregation=dapo"], dapo_case),
    "kl": Case(["algorithm.kl_coef=0.1"], kl_case),
    "lens_full": Case(
        ["algorithm.advantage=lens", "train.micro_batch_size=2"],
        lens_case("full"),
        columns={"binary": [float(c) for c in CORRECT]},
    ),
    "lens_mixed_only": Case(
        ["algorithm.advantage=lens", "algorithm.lens_mode=mixed_only"],
        lens_case("mixed_only"),
        columns={"binary": [float(c) for c in CORRECT]},
    ),
    "lens_negative_only": Case(
        ["algorithm.advantage=lens", "algorithm.lens_mode=negative_only"],
        lens_case("negative_only"),
        columns={"binary": [float(c) for c in CORRECT]},
    ),
    "amir_fixed_lambda": Case(
        ["algorithm.amir=true", "algorithm.lambda_measure=fixed", "train.micro_batch_size=2"],
        amir_fixed_case,
    ),
    "amir_loss_lambda": Case(
        ["algorithm.amir=true", "train.micro_batch_size=2"], amir_loss_lambda_case
    ),
    "amir_grad_lambda": Case(
        ["algorithm.amir=true", "algorithm.lambda_measure=grad"], amir_grad_lambda_case
    ),
    "amir_plus_lens": Case(
        [
            "algorithm.advantage=lens",
            "algorithm.amir=true",
            "algorithm.margin=0.5",
            "algorithm.lambda_measure=fixed",
        ],
        amir_lens_case,
        columns={"text_hash": REWARDS, "binary": [float(c) for c in CORRECT]},
    ),
    # one micro-batch above: its training pass gives logp_old; two here: a no-grad pass does
    "amir_plus_lens_two_micro_batches": Case(
        [
            "algorithm.advantage=lens",
            "algorithm.amir=true",
            "algorithm.margin=0.5",
            "algorithm.lambda_measure=fixed",
            "train.micro_batch_size=2",
        ],
        amir_lens_case,
        columns={"text_hash": REWARDS, "binary": [float(c) for c in CORRECT]},
    ),
    # (GSPO's own 3e-4 / 4e-4 would clip every sequence after one SGD step here: a wider
    # range keeps the second update's gradient non-zero, with some ratios clipped.)
    "gspo_two_iterations": Case(
        [
            "algorithm.loss_level=sequence",
            "algorithm.num_iterations=2",
            "algorithm.eps_low=0.02",
            "algorithm.eps_high=0.03",
        ],
        lambda ctx, update: grpo_case(ctx, update, eps=(0.02, 0.03), sequence=True),
        updates=2,
    ),
    "token_two_iterations": Case(["algorithm.num_iterations=2"], grpo_case, updates=2),
    "two_minibatches": Case(
        ["algorithm.minibatches=2", "algorithm.scale_rewards=batch"], minibatch_case, updates=2
    ),
}


def fixed_batch_trainer(
    tmp_path: Path, case: Case, correct: list[bool] = CORRECT
) -> tuple[Trainer, ScoredBatch, list[torch.Tensor], list[torch.Tensor]]:
    """A tiny-random LoRA trainer with `case`'s options and a recording SGD optimizer, the fixed
    batch with `case`'s reward columns and `correct`, and the rollout and reference policies'
    log-probs of its rows."""
    weights = "{" + ", ".join(f"{k}: 1.0" for k in case.columns) + "}"
    overrides = [
        "model.name=tiny-random",
        "model.seed=3",
        "model.lora_r=4",
        "model.lora_alpha=8",
        f"rollout.group_size={G}",
        "rollout.questions_per_step=2",
        "train.micro_batch_size=4",
        "optim.max_grad_norm=1e9",  # no clipping: the raw gradient is compared
        "train.progress=false",
        "reward.plugins=[reward_plugin]",
        f"reward.weights={weights}",
        "reward.correctness_component=binary" if "binary" in case.columns else "",
        f"train.output_dir={tmp_path}",
        *case.overrides,
    ]
    trainer = Trainer(load_run_config(None, [o for o in overrides if o]))
    model = trainer.model
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if "lora_B" in param_name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
    recorder = SGDRecorder(trainer.params)
    trainer.updater.optimizer = recorder
    rollouts = Rollouts(
        PROMPT_IDS,
        PROMPT_MASK,
        COMPLETION_IDS,
        COMPLETION_MASK,
        ["a", "b", "c", "d"],
        torch.zeros(4, dtype=torch.bool),
        G,
    )
    batch = ScoredBatch(
        rollouts,
        torch.arange(4),
        _scores(case.columns, correct),
        rollouts.texts,
        rollouts.truncated,
    )
    with torch.no_grad():
        olds = [lp.detach() for lp in row_logps(model)]
        with model.disable_adapter():
            refs = [lp.detach() for lp in row_logps(model)]
    return trainer, batch, olds, refs


@pytest.mark.parametrize("name", list(CASES))
def test_trainer_gradient_equals_the_direct_formula(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    trainer, batch, olds, refs = fixed_batch_trainer(tmp_path, case)
    model, recorder = trainer.model, trainer.updater.optimizer
    LAMBDAS.clear()
    metrics = trainer.learn(batch).updates

    assert len(metrics) == len(recorder.grads) == case.updates
    for update in range(case.updates):
        with torch.no_grad():
            for p, w in zip(trainer.params, recorder.weights[update], strict=True):
                p.copy_(w)
        ctx = Context(row_logps(model), olds, refs, trainer.params)
        expected = case.direct(ctx, update)
        assert any(float(g.abs().max()) > 1e-5 for g in expected), "a vacuous comparison"
        for got, want in zip(recorder.grads[update], expected, strict=True):
            torch.testing.assert_close(got, want, atol=5e-6, rtol=1e-4)
    if LAMBDAS:
        assert trainer.lambda_reg.value == pytest.approx(LAMBDAS[-1], rel=1e-6)
    if case.updates > 1:
        # the later update saw a moved policy: the ratio to the rollout policy is not 1
        assert metrics[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
        assert abs(metrics[1]["ratio_mean"] - 1.0) > 1e-4
    if name == "gspo_two_iterations":
        assert 0 < metrics[1]["clip_fraction"] < 1  # the clip acts on some sequences only


@pytest.mark.parametrize(
    ("name", "decoder_calls", "old_policy_pass"),
    # shared-prompt passes call the decoder twice (prompt, completions); two micro-batches
    # add a no-grad pass over both before their two training passes
    [("amir_plus_lens", 2, False), ("amir_plus_lens_two_micro_batches", 8, True)],
)
def test_one_micro_batch_takes_logp_old_from_its_training_pass(
    tmp_path: Path, name: str, decoder_calls: int, old_policy_pass: bool
) -> None:
    trainer, batch, _, _ = fixed_batch_trainer(tmp_path, CASES[name])
    calls = []
    trainer.model.get_decoder().register_forward_pre_hook(lambda *_: calls.append(1))
    learned = trainer.learn(batch)
    assert len(calls) == decoder_calls
    assert (learned.seconds_old_policy > 0) is old_policy_pass


@pytest.mark.parametrize(
    ("advantage", "correct", "share", "active"),
    [
        ("grpo", CORRECT, 0.0, 0.0),  # the all-wrong group's advantages are 0: no gradient
        ("lens", [False] * 4, 1.0, 1.0),  # every group all-wrong: the whole gradient is theirs
        ("lens", CORRECT, None, 0.5),  # a mixed and an all-wrong group: strictly between
    ],
)
def test_all_wrong_gradient_share(
    tmp_path: Path, advantage: str, correct: list[bool], share: float | None, active: float
) -> None:
    # train.log_all_wrong_gradient with one group per micro-batch (the all-wrong part is summed
    # over micro-batches like the rest), against the gradient of the direct formula restricted
    # to the all-wrong rows, weighted by their share of the batch.
    binary = [float(c) for c in correct]
    case = Case(
        [
            f"algorithm.advantage={advantage}",
            "train.micro_batch_size=2",
            "train.log_all_wrong_gradient=true",
        ],
        grpo_case,
        columns={"binary": binary},
    )
    trainer, batch, olds, _ = fixed_batch_trainer(tmp_path, case, correct)
    learned = trainer.learn(batch)
    (metrics,) = learned.updates

    with torch.no_grad():
        for p, w in zip(trainer.params, trainer.updater.optimizer.weights[0], strict=True):
            p.copy_(w)
    logps = row_logps(trainer.model)
    pbar = [math.exp(float(o.mean())) for o in olds]
    a = (
        grpo_advantages(binary)
        if advantage == "grpo"
        else lens_advantages(lens_rt(correct, pbar), binary, correct, "full")
    )
    wrong = [i for i in ALL if not any(correct[i - i % G : i - i % G + G])]
    total = norm(flat_grad(surrogate(logps, olds, a, ALL), trainer.params))
    part = norm(flat_grad(surrogate(logps, olds, a, wrong) * len(wrong) / 4, trainer.params))
    assert total > 1e-6, "a vacuous comparison"
    assert metrics["grad_norm"] == pytest.approx(total, rel=1e-4)
    assert metrics["all_wrong_grad_norm"] == pytest.approx(part, rel=1e-4, abs=1e-9)
    assert metrics["all_wrong_grad_share"] == pytest.approx(part / total, rel=1e-4, abs=1e-9)
    if share is None:
        assert 0.05 < metrics["all_wrong_grad_share"] < 0.95
    else:
        assert metrics["all_wrong_grad_share"] == pytest.approx(share, abs=1e-5)
    problems = [SimpleNamespace(id=f"q{q}", answer="1") for q in range(2)]
    record = step_metrics(1, 1, len(problems), batch, learned, 10, (0.0, 0.0, 0.0, 1.0))
    assert record["group_all_wrong_active"] == active
    assert record["all_wrong_grad_share"] == metrics["all_wrong_grad_share"]


@pytest.mark.parametrize(
    ("overrides", "passes"),
    [
        # LENS alone, one mini-batch: each micro-batch's advantages from its own training pass
        ([], 2),
        # with AMIR the update's pair count needs every row's LENS rewards first: a no-grad pass
        (["algorithm.amir=true", "algorithm.margin=0.1"], 4),
        # with 2 mini-batches the second one's rows need logp_old before it: the same pass
        (["algorithm.minibatches=2"], 4),
    ],
)
def test_lens_rollout_logprobs_cost_no_pass_of_their_own_when_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overrides: list[str], passes: int
) -> None:
    case = Case(
        ["algorithm.advantage=lens", "train.micro_batch_size=2", *overrides],
        grpo_case,
        columns={"binary": [float(c) for c in CORRECT]},
    )
    trainer, batch, olds, _ = fixed_batch_trainer(tmp_path, case)
    calls = []
    forward = trainer.passes.logprobs
    monkeypatch.setattr(trainer.passes, "logprobs", lambda *a: calls.append(1) or forward(*a))
    learned = trainer.learn(batch)

    # 2 micro-batches of one group each (2 training passes), plus the no-grad pass where needed
    assert len(calls) == passes
    pbar = [math.exp(float(o.mean())) for o in olds]
    binary = [float(c) for c in CORRECT]
    expected = lens_advantages(lens_rt(CORRECT, pbar), binary, CORRECT, "full")
    torch.testing.assert_close(
        learned.targets.advantages, torch.tensor(expected), atol=1e-6, rtol=1e-5
    )
