"""groupwise: RLVR for math reasoning with GRPO, AMIR-GRPO and LENS.

The formulas live in the project's docs/algorithms.md; each function cites its section.
"""

__version__ = "0.1.0"
