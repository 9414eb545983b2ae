"""Adapters that run groupwise's algorithms inside other training engines (docs/design.md, "One
algorithm core, several engines").

- `groupwise.integrations.trl`: `GroupwiseGRPOConfig` / `GroupwiseGRPOTrainer`, subclasses of
  TRL's `GRPOConfig` / `GRPOTrainer` (optional dependency: `pip install "groupwise[trl]"`).

An adapter is plumbing: it hands `groupwise.algorithms` what it asks for and adds its terms to
the engine's loss; it never re-implements a formula.
"""
