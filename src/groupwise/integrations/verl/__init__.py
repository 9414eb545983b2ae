"""groupwise inside verl (docs/guides/verl.md)."""
