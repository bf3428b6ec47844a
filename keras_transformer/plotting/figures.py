"""Figures without pyplot: a new ``matplotlib.figure.Figure`` and saving it (see the package
docstring)."""

from __future__ import annotations

import os
import pathlib


def _new_figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _save(fig, output, dpi: int = 110) -> None:
    if output is None:
        return
    path = pathlib.Path(os.fspath(output))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, facecolor="white")
