"""The AMIR-GRPO paper's diagnostics over saved evaluation samples (docs/algorithms.md, "Analyses of
AMIR-GRPO"): conditional perplexity, solvable-set coverage, preference margin, error position.

Modules: runs (evaluation folders as NAME=EVAL_DIR; their records are groupwise.records),
perplexity, coverage, preference_margin, rescoring (log-probs recomputed on any engine), and
the package error_position (`analyze errors`: step segmentation, the judge, its figures, one
module per job); the figure helpers are groupwise.figures; command wires them into
`groupwise analyze`.
"""
