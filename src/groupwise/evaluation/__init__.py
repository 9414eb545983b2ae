"""`groupwise eval`: sample n completions per problem, check them, report unbiased pass@k.

One room per job:

- config: `EvalConfig` (the settings of one evaluation), the protocol presets, validation.
- folder: the output folder: which settings it was made with, what is done, resume.
- sampling: the loop that samples, checks and records every problem not yet done (`evaluate`).
- results: pass@k per benchmark as results.json, results.md and results.png.
- command: the command line (`groupwise eval`), beside groupwise.train.command.

The records the folder holds (Sample, SavedProblem) live in groupwise.records; the model
loading in groupwise.models; the completion log-probs in groupwise.completion_logprobs.
"""

from groupwise.evaluation.config import PRESETS, EvalConfig
from groupwise.evaluation.folder import ResumeMismatch
from groupwise.evaluation.sampling import evaluate

__all__ = ["PRESETS", "EvalConfig", "ResumeMismatch", "evaluate"]
