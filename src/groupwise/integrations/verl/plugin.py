"""The `verl.plugins` entry point (docs/guides/verl.md)."""
