# Paper section 3.5 (positional encoding) and section 5.3 (the learning-rate schedule).
"""The positional encoding as an image, and training curves (loss, learning rate, accuracy)."""

from __future__ import annotations

import csv
import os
import pathlib
from collections.abc import Mapping, Sequence

import numpy as np

from keras_transformer.plotting.figures import _new_figure, _save


# ---------------------------------------------------------------------------- positions
def plot_positional_encoding(
    length: int, d_model: int, output=None, dimensions: Sequence[int] | None = None
):
    """The sinusoidal positional encoding ``PE[pos, i]`` of section 3.5, as an image and curves.

    Left: the ``[length, d_model]`` matrix (position down, dimension across: sines in even and
    cosines in odd dimensions, wavelengths from 2*pi to 10000*2*pi). Right: a few ``dimensions``
    as functions of the position (default: four sines, from the fastest to a slow one).

    Example::

        plot_positional_encoding(100, 512, output="positional_encoding.png")
    """
    from keras import ops

    from keras_transformer.layers.positional import sinusoidal_encoding

    if length < 1 or d_model < 2:
        raise ValueError(
            f"plot_positional_encoding: need length >= 1 and d_model >= 2, got "
            f"{length} and {d_model}"
        )
    table = np.asarray(ops.convert_to_numpy(sinusoidal_encoding(length, d_model)))
    fig = _new_figure(12, 4.5)
    matrix_ax, curve_ax = fig.subplots(1, 2, width_ratios=[1.6, 1])
    image = matrix_ax.imshow(
        table, cmap="RdBu", vmin=-1, vmax=1, aspect="auto", interpolation="nearest"
    )
    matrix_ax.set_xlabel("dimension i")
    matrix_ax.set_ylabel("position")
    matrix_ax.set_title(f"Sinusoidal positional encoding ({length} positions, d_model={d_model})")
    fig.colorbar(image, ax=matrix_ax, shrink=0.9, pad=0.01)
    if dimensions is None:
        dimensions = sorted({2 * (d_model * k // 16) for k in (0, 1, 2, 3)})
    positions = np.arange(length)
    for dim in [d for d in dimensions if 0 <= d < d_model]:
        kind = "sin" if dim % 2 == 0 else "cos"
        curve_ax.plot(positions, table[:, dim], label=f"i={dim} ({kind})")
    curve_ax.set_xlabel("position")
    curve_ax.set_ylabel("PE[position, i]")
    curve_ax.set_title("Some dimensions")
    curve_ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    curve_ax.grid(alpha=0.3)
    _save(fig, output)
    return fig


# ---------------------------------------------------------------------------- training
def _read_history(history) -> dict:
    """A CSV file (``CSVLogger``), a ``keras.callbacks.History`` or a mapping -> dict of arrays."""
    if hasattr(history, "history") and isinstance(history.history, Mapping):
        history = history.history
    if isinstance(history, (str, os.PathLike)):
        path = pathlib.Path(os.fspath(history))
        if not path.is_file():
            raise FileNotFoundError(f"plot_training_history: no file {path}")
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        if not rows:
            raise ValueError(f"plot_training_history: {path} has no rows")
        columns = {key: [row[key] for row in rows] for key in rows[0]}
    elif isinstance(history, Mapping):
        columns = dict(history)
    else:
        raise TypeError(
            "plot_training_history: expected a CSV path, a keras History or a dict "
            f"of lists, got {type(history).__name__}"
        )
    values = {}
    for key, column in columns.items():
        try:
            values[key] = np.asarray(
                [float(v) if v not in ("", None) else np.nan for v in column], np.float64
            )
        except (TypeError, ValueError):
            continue  # a non-numeric column
    return values


def plot_training_history(
    history,
    output=None,
    steps_per_epoch: int | None = None,
    title: str | None = None,
    schedule=None,
):
    """Training curves: loss (and validation loss) and the learning rate, per step or epoch.

    Args:
        history: ``history.csv`` written by ``keras.callbacks.CSVLogger`` (as
            :func:`keras_transformer.training.train` does), a ``keras.callbacks.History`` (what
            ``model.fit`` returns) or a dict of equal-length lists. Columns used: ``loss``,
            ``val_loss``, ``learning_rate`` (added by ``TokensPerSecond``) and, if present,
            ``masked_accuracy``/``val_masked_accuracy``; the x axis is ``step`` if there is such
            a column, else the epoch.
        output: also save the figure there.
        steps_per_epoch: with it, epochs are drawn at their last step (``epoch * steps``).
        title: figure title.
        schedule: the learning-rate schedule of the run (e.g. a
            :class:`~keras_transformer.schedules.TransformerSchedule`, or any callable of the
            0-based update counter); with it the learning-rate panel shows the rate of every
            update ``1 .. last step`` (the logged values are per epoch only). Needs a step axis.

    Example::

        history = model.fit(train, epochs=20, steps_per_epoch=50, callbacks=[TokensPerSecond()])
        plot_training_history(history, steps_per_epoch=50,
                              schedule=TransformerSchedule(512, warmup_steps=4000))
    """
    values = _read_history(history)
    if "loss" not in values and "learning_rate" not in values:
        raise ValueError(
            "plot_training_history: the history has neither 'loss' nor "
            f"'learning_rate' (columns: {sorted(values)})"
        )
    x, x_label = _x_axis(values, steps_per_epoch)
    accuracy = "masked_accuracy" in values
    fig = _new_figure(5.0 * (3 if accuracy else 2), 3.8)
    axes = list(np.ravel(fig.subplots(1, 3 if accuracy else 2, squeeze=False)))
    marker = "o" if len(x) <= 30 else None

    def curve(ax, key, label, **style):
        if key in values and len(values[key]) == len(x):
            ax.plot(x, values[key], **{"marker": marker, "markersize": 3, "label": label, **style})

    curve(axes[0], "loss", "training")
    curve(axes[0], "val_loss", "validation")
    axes[0].set(title="Loss (label-smoothed cross-entropy)", ylabel="loss")
    if schedule is not None:
        if x_label != "step":
            raise ValueError(
                "plot_training_history: schedule needs a step axis (a 'step' column "
                "or steps_per_epoch)"
            )
        updates = np.arange(1, int(np.nanmax(x)) + 1)
        schedule_values = _schedule_values(schedule, updates - 1)
        axes[1].plot(updates, schedule_values, label="every step (schedule)")
        curve(axes[1], "learning_rate", "logged at epoch end", marker="o", linestyle="none")
    else:
        curve(axes[1], "learning_rate", "learning rate")
    axes[1].set(title="Learning rate (paper eq. 3)", ylabel="learning rate")
    axes[1].ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    if accuracy:
        curve(axes[2], "masked_accuracy", "training")
        curve(axes[2], "val_masked_accuracy", "validation")
        axes[2].set(title="Token accuracy", ylabel="accuracy")
    _finish_axes(fig, axes, x_label, title)
    _save(fig, output)
    return fig


def _x_axis(values, steps_per_epoch):
    """``(x, label)``: the ``step`` column, epochs times ``steps_per_epoch``, or epochs."""
    if "step" in values:
        return values["step"], "step"
    count = max(len(v) for v in values.values())
    epochs = values["epoch"] + 1 if "epoch" in values else np.arange(1, count + 1)
    if steps_per_epoch:
        return epochs * int(steps_per_epoch), "step"
    return epochs, "epoch"


def _finish_axes(fig, axes, x_label, title):
    for ax in axes:
        ax.set_xlabel(x_label)
        ax.grid(alpha=0.3)
        if len(ax.get_lines()) > 1:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)


def _schedule_values(schedule, counters: np.ndarray) -> np.ndarray:
    """``schedule(counter)`` for every counter, vectorised when the schedule allows it."""
    from keras import ops

    try:
        values = np.asarray(
            ops.convert_to_numpy(schedule(ops.convert_to_tensor(counters))), np.float64
        )
        if values.shape == counters.shape:
            return values
    except Exception:  # a schedule written for scalars only
        pass
    return np.asarray([float(ops.convert_to_numpy(schedule(int(c)))) for c in counters])
