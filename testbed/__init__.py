"""The learning testbed: methods compared at equal samples on the synthetic arith task, over
paired seeds (testbed/README.md; docs/guides/train.md, "Compare methods: the learning
testbed"). Run from the repository root: `python -m testbed.learning`, `python -m
testbed.dynamic`."""
