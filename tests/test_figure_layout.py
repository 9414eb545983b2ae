"""Figures crop nothing and say what they show: results.png (`groupwise eval`) names the adapter's
run it evaluated and n as samples per problem, coverage.png (`groupwise analyze coverage`) labels
its counts as problems, and every figure saved through groupwise.figures.save_figure keeps long
titles and rotated tick labels inside the image."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import imread

from groupwise.analysis.coverage import coverage_partition, plot_coverage, problems_label
from groupwise.evaluation.results import evaluated_name, plot_results
from groupwise.figures import new_figure, save_figure, wrap_text

LONG_BENCH = "arith:test@level=easy@ops=2@form=expression@size=100"
RUN = "/work/somewhere/runs/smollm2_arith"


def _table(p: float, ks: tuple[int, ...] = (1, 2, 4, 8)) -> dict[str, Any]:
    return {
        "problems": 40,
        "n": 8,
        **{f"pass@{k}": p for k in ks},
        **{f"pass@{k}_ci": [p - 0.05, p + 0.05] for k in ks},
    }


def _results(adapter: str | None) -> dict[str, Any]:
    return {
        LONG_BENCH: _table(0.2),
        "config": {"model": "smollm2-135m-instruct", "n": 8, "ks": [1, 2, 4, 8]}
        | {"adapter": adapter},
    }


def _border_is_blank(path: Path, pixels: int = 2) -> bool:
    """True when the outer `pixels` rows and columns of the PNG are all white: nothing drawn
    runs into the image's edge (a cut-off title or tick label would)."""
    image = imread(path)[..., :3]
    ring = np.concatenate(
        [
            image[:pixels].reshape(-1, 3),
            image[-pixels:].reshape(-1, 3),
            image[:, :pixels].reshape(-1, 3),
            image[:, -pixels:].reshape(-1, 3),
        ]
    )
    return bool(np.all(ring > 0.99))


@pytest.fixture
def titles(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The titles of each figure's axes, as saved; each title must lie within the figure's
    width (wrapped to fit, not left for the saved area to grow around)."""
    drawn: list[list[str]] = []
    real = Figure.savefig

    def record(fig: Figure, *args: Any, **kwargs: Any) -> Any:
        drawn.append([ax.get_title() for ax in fig.axes])
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            extent = ax.title.get_window_extent(renderer)
            assert fig.bbox.x0 <= extent.x0 and extent.x1 <= fig.bbox.x1, ax.get_title()
        return real(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    return drawn


def test_wrap_text_breaks_at_spaces_before_at_signs_and_after_slashes() -> None:
    assert wrap_text(LONG_BENCH, 24) == "arith:test@level=easy\n@ops=2@form=expression\n@size=100"
    assert wrap_text("a long title of words", 10) == "a long\ntitle of\nwords"
    assert wrap_text("runs/smollm2_arith/final", 12) == "runs/\nsmollm2_arith/\nfinal"
    assert wrap_text("short", 40) == "short"
    unbreakable = "unbreakable_name_longer_than_width"
    assert wrap_text(unbreakable, 5) == unbreakable


def test_evaluated_name_names_the_adapter_run_on_its_base_model() -> None:
    model = "smollm2-135m-instruct"
    assert evaluated_name({"model": model, "adapter": None}) == model
    assert (
        evaluated_name({"model": model, "adapter": f"{RUN}/final/adapter"})
        == "smollm2_arith (final adapter) on smollm2-135m-instruct"
    )
    assert (
        evaluated_name({"model": "arith-base", "adapter": f"{RUN}/checkpoints/step-3/adapter"})
        == "smollm2_arith (step-3 adapter) on arith-base"
    )
    assert evaluated_name({"model": model, "adapter": "/data/loras/my-lora"}) == (
        "data/loras/my-lora (adapter) on smollm2-135m-instruct"
    )
    # full weights of a run (`--model RUN`): the run's folder, not the whole absolute path
    assert evaluated_name({"model": f"{RUN}/final/model", "adapter": None}) == (
        "smollm2_arith/final/model"
    )
    assert evaluated_name({"model": "HuggingFaceTB/SmolLM2-135M-Instruct"}) == (
        "HuggingFaceTB/SmolLM2-135M-Instruct"
    )


def test_results_figure_names_the_adapter_and_crops_nothing(
    tmp_path: Path, titles: list[list[str]]
) -> None:
    path = plot_results(_results(f"{RUN}/final/adapter"), tmp_path / "results.png")
    (title,) = titles[0]
    assert title == (
        "smollm2_arith (final adapter) on\nsmollm2-135m-instruct: pass@k, n=8\nsamples per problem"
    )
    assert _border_is_blank(path)


def test_results_figure_without_adapter_names_the_model(
    tmp_path: Path, titles: list[list[str]]
) -> None:
    plot_results(_results(None), tmp_path / "results.png")
    assert titles[0] == ["smollm2-135m-instruct: pass@k, n=8\nsamples per problem"]


def test_coverage_figure_counts_problems_and_crops_nothing(
    tmp_path: Path, titles: list[list[str]]
) -> None:
    keys = [("b", str(i)) for i in range(12)]
    solvable = {"smollm2-base": set(keys[:5]), "smollm2-amir": set(keys[3:10])}
    cells = coverage_partition(solvable, keys)
    title = "Solvable-set coverage (12 problems, 10 solvable)"
    texts: list[str] = []
    real_annotate = Axes.annotate

    def record(ax: Any, text: str, *args: Any, **kwargs: Any) -> Any:
        texts.append(text)
        return real_annotate(ax, text, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Axes, "annotate", record)
        path = plot_coverage(cells, list(solvable), tmp_path / "coverage.png", title)
    assert texts == ["20.0%\n2 problems", "30.0%\n3 problems", "50.0%\n5 problems"]
    assert titles[0][0] == "Solvable-set coverage (12\nproblems, 10 solvable)"
    assert _border_is_blank(path)
    assert problems_label(1) == "1 problem" and problems_label(0) == "0 problems"


@pytest.mark.filterwarnings("ignore:Tight layout not applied")
def test_save_figure_keeps_a_title_wider_than_the_figure(tmp_path: Path) -> None:
    fig, axes = new_figure(width=3, height=2)
    axes[0, 0].set_title("a title far wider than this small figure can hold on one line")
    axes[0, 0].set_xticks([0], [LONG_BENCH], rotation=20, ha="right")
    assert _border_is_blank(save_figure(fig, tmp_path / "wide.png"))
