"""The evaluation loop: sample n completions for every problem not yet done, check them, and
append their records to the folder's samples.jsonl (docs/algorithms.md §4 for what the results
then report).

The samples come from any `Sampler` (groupwise.rollout: the vLLM and server engines), or from
a `Generator` (the transformers engine) with a `logp_fn` (`RolloutSampler`). `mean_logp` of each
sample is the mean token log-probability of the completion under the model that generated it
at temperature 1, i.e. the raw model distribution (not the tempered one it was sampled from):
for the transformers engine from a separate forward pass over prompt + completion, for vLLM
and servers their log-probs of the sampled tokens (evaluation.config.MEAN_LOGP_NOTES).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from groupwise.evaluation.config import EvalConfig
from groupwise.evaluation.engines import RolloutSampler
from groupwise.evaluation.folder import load_done, prepare_folder
from groupwise.evaluation.provenance import read_sessions, record_session
from groupwise.evaluation.results import results_table, write_results
from groupwise.records import SAMPLES_FILE, Sample, group_by_problem

if TYPE_CHECKING:
    import torch

    from groupwise.data import Problem
    from groupwise.rewards import Verdict
    from groupwise.rollout import Completions, Generator, Prompt, Rollouts, Sampler

CheckFn = Callable[[list[str], list[str]], "list[Verdict]"]


def problem_seed(seed: int, benchmark: str, problem_id: str) -> int:
    """The seed of one problem's random stream, in [0, 2**63): fixed by (seed, benchmark,
    problem id) alone. The engine draws each prompt's samples from its own stream
    (Generator.generate's prompt_seeds), so a problem gets the same samples whichever problems
    share its generate call: a resumed run, or one with another batch_size or limit, samples
    exactly what an uninterrupted one does."""
    digest = hashlib.sha256(f"{seed}\0{benchmark}\0{problem_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def sample_records(
    bench: str, chunk: Sequence[Problem], completions: Completions, verdicts: Sequence[Verdict]
) -> list[Sample]:
    """The Sample records of one sampling call (group-major: n rows per problem)."""
    from groupwise.rewards import parse_confidence

    n = completions.group_size
    out = []
    for row, text in enumerate(completions.texts):
        problem = chunk[row // n]
        logp, tokens = completions.mean_logp[row], completions.tokens[row]
        out.append(
            Sample(
                benchmark=bench,
                problem_id=problem.id,
                sample=row % n,
                completion=text,
                extracted=verdicts[row].extracted,
                verdict=verdicts[row].status,
                tokens=int(tokens),
                truncated=bool(completions.truncated[row]),
                mean_logp=None if logp is None or math.isnan(logp) or tokens == 0 else float(logp),
                confidence=parse_confidence(text),
                gold=problem.answer,
            )
        )
    return out


class _Progress:
    """A progress bar over one benchmark's problems, showing the running pass@1."""

    def __init__(
        self, bench: str, total: int, finished: Sequence[Sequence[Sample]], enabled: bool
    ) -> None:
        from tqdm import tqdm

        self.correct = sum(s.correct for g in finished for s in g)
        self.sampled = sum(len(g) for g in finished)
        self.bar = tqdm(
            total=total, initial=len(finished), desc=bench, unit="problem", disable=not enabled
        )
        self._show()

    def _show(self) -> None:
        if self.sampled:
            self.bar.set_postfix({"pass@1": f"{self.correct / self.sampled:.3f}"})

    def update(self, problems: int, records: Sequence[Sample]) -> None:
        self.correct += sum(r.correct for r in records)
        self.sampled += len(records)
        self.bar.update(problems)
        self._show()

    def close(self) -> None:
        self.bar.close()


def _sample_chunk(
    config: EvalConfig,
    bench: str,
    chunk: Sequence[Problem],
    sampler: Sampler,
    prompt_fn: Callable[[Problem], Prompt],
    check_fn: CheckFn,
) -> list[Sample]:
    """One sampling call: n samples of each problem of `chunk`, checked."""
    from groupwise.rollout import SamplingParams

    sampling = SamplingParams(
        temperature=config.temperature,
        top_p=config.top_p,
        max_new_tokens=config.max_new_tokens,
        stop=config.stop,
    )
    seeds = [problem_seed(config.seed, bench, p.id) for p in chunk]
    completions = sampler.sample([prompt_fn(p) for p in chunk], config.n, sampling, seeds)
    verdicts = check_fn(list(completions.texts), [p.answer for p in chunk for _ in range(config.n)])
    return sample_records(bench, chunk, completions, verdicts)


def evaluate(
    config: EvalConfig,
    problems: Mapping[str, Sequence[Problem]],
    generator: Sampler | Generator | None,
    output_dir: str | Path,
    *,
    prompt_fn: Callable[[Problem], Prompt] | None,
    logp_fn: Callable[[Rollouts], torch.Tensor] | None = None,
    check_fn: CheckFn | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Sample, check and save n completions for every problem not yet done; return results.

    problems: {benchmark: problems}, the keys as they appear in samples and results.
    generator: a Sampler (the vLLM and server engines), or a Generator (the transformers
        engine; the tests inject fakes) with logp_fn giving mean_logp [N*n] of its Rollouts
        (None: not computed). prompt_fn renders a problem's prompt as the engine takes it
        (text, or chat messages for a server's chat endpoint); check_fn turns (completions,
        golds) into Verdicts (default: groupwise.rewards.check_answers).
    generator and prompt_fn may be None when nothing is left to sample (a rerun that only
    rewrites the results).
    Returns the results dict written to results.json (see `results_table`).
    """
    from groupwise.rollout import Sampler

    if isinstance(generator, Sampler):
        if logp_fn is not None:
            raise ValueError("logp_fn goes with a Generator; a Sampler gives its own mean_logp")
        sampler: Sampler | None = generator
    else:
        sampler = None if generator is None else RolloutSampler(generator, logp_fn)
    if check_fn is None:
        from groupwise.rewards import check_answers

        check_fn = check_answers
    output_dir = Path(output_dir)
    prepare_folder(config, output_dir, problems)
    done = load_done(output_dir, config.n)
    per_call = config.problems_per_call
    pending = sum((b, p.id) not in done for b, items in problems.items() for p in items)
    # what samples now, recorded before it samples (a resumed folder keeps every session)
    session = record_session(config, output_dir, pending) if pending else None
    with open(output_dir / SAMPLES_FILE, "a", encoding="utf-8") as sink:
        for bench, items in problems.items():
            todo = [p for p in items if (bench, p.id) not in done]
            if todo and (sampler is None or prompt_fn is None):
                raise ValueError(
                    f"{len(todo)} problem(s) of {bench} need sampling but no "
                    "generator or prompt_fn was given"
                )
            bar = _Progress(
                bench,
                len(items),
                [done[(bench, p.id)] for p in items if (bench, p.id) in done],
                progress,
            )
            for start in range(0, len(todo), per_call):
                chunk = todo[start : start + per_call]
                records = _sample_chunk(config, bench, chunk, sampler, prompt_fn, check_fn)
                sink.write("".join(r.to_json() + "\n" for r in records))
                sink.flush()
                done.update(group_by_problem(records))
                bar.update(len(chunk), records)
            bar.close()
    from groupwise.data import difficulty_level

    results = results_table(
        config,
        {b: [done[(b, p.id)] for p in items] for b, items in problems.items()},
        {b: [difficulty_level(p) for p in items] for b, items in problems.items()},
        provenance_record=session,
    )
    results["config"]["sessions"] = read_sessions(output_dir)
    write_results(results, output_dir)
    return results
