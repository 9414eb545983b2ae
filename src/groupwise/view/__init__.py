"""`groupwise view`: one self-contained HTML page of a training run, an evaluation folder, or
two folders side by side (docs/guides/view.md)."""
