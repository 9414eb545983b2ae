"""Synthetic verifiable arithmetic tasks (the learning testbed); filled in by its own change."""
