"""The AMIR-GRPO paper's diagnostics over saved evaluation samples (docs/algorithms.md, "Analyses of
AMIR-GRPO"): conditional perplexity, solvable-set coverage, preference margin, error position.

Modules: runs (evaluation folders as NAME=EVAL_DIR; their records are groupwise.records),
perplexity, coverage, preference_margin, errors (step segmentation and the judge), figures
(shared plotting helpers); command wires them into `groupwise analyze`.
"""
