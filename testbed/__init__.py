"""The learning testbed: methods compared over paired seeds, on the synthetic arith task with a
tiny policy and on SmolLM2-135M-Instruct (testbed/README.md; docs/guides/train.md, "Compare
methods: the learning testbed", "A real model: SmolLM2 on arithmetic"). Run from the repository
root: `python -m testbed.learning`, `python -m testbed.dynamic`, `python -m testbed.smollm2`."""
