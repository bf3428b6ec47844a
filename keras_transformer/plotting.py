# Paper appendix ("Attention Visualizations", Figures 3-5) and section 3.5 (positional encoding).
"""Matplotlib figures: attention heat maps per head, the positional encoding, training curves.

matplotlib is an optional extra (``pip install keras-transformer[plot]``, included in ``[dev]``)
and is imported only inside these functions. Figures are built with the object-oriented API
(``matplotlib.figure.Figure``, no ``pyplot``), so they work headless (the command line, tests, CI)
without choosing a backend, and are never left open in a global figure registry. Every function
returns its ``Figure`` and, given ``output``, also writes it there (PNG, or any format matplotlib
knows from the file suffix). In Jupyter, run ``%matplotlib inline`` once; a returned figure is then
shown when it is the last expression of a cell.

Axes of the attention maps: rows are queries, columns are keys, each row sums to 1 over the keys
(paper equation (1)). Token labels are the subword pieces without SentencePiece's word-start mark
``"▁"``; ``<s>`` is the begin-of-sentence id the decoder starts from and ``</s>`` the end.

Example::

    from keras_transformer import plotting
    fig = plotting.plot_sentence_attention(model, tokenizer, "A dog runs on the beach.",
                                           layer=-1, output="attention.png")
    plotting.plot_positional_encoding(100, 512, output="positional.png")
    plotting.plot_training_history("runs/multi30k/history.csv", output="history.png",
                                   steps_per_epoch=250)
"""

from __future__ import annotations

import csv
import os
import pathlib
from typing import Mapping, Optional, Sequence

import numpy as np

__all__ = [
    "attention_for_sentence",
    "plot_attention_heads",
    "plot_positional_encoding",
    "plot_sentence_attention",
    "plot_training_history",
    "token_labels",
]

_WORD_START = "\u2581"  # SentencePiece's "▁"


# ---------------------------------------------------------------------------- helpers
def _new_figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _save(fig, output, dpi: int = 110) -> None:
    if output is None:
        return
    path = pathlib.Path(os.fspath(output))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, facecolor="white")


def _piece(tokenizer, token_id: int) -> str:
    if hasattr(tokenizer, "id_to_piece"):
        return tokenizer.id_to_piece(token_id)
    # A tokenizer reloaded with tf.saved_model.load has `pieces` (a tf.function) only.
    import tensorflow as tf

    return tokenizer.pieces(tf.constant([token_id], tf.int32)).numpy()[0].decode("utf-8")


def token_labels(tokenizer, ids: Sequence[int]) -> list[str]:
    """Axis labels for subword ``ids``: the pieces without the word-start mark ``"▁"``.

    Padding becomes ``""``, the begin/end ids ``"<s>"``/``"</s>"``; a piece that is only the mark
    keeps it (else the label would be empty). ``tokenizer`` needs ``id_to_piece`` (a
    :class:`~keras_transformer.tokenization.SubwordTokenizer`) or ``pieces`` (a reloaded one).

    Example::

        token_labels(tokenizer, [2, 611, 1043, 3])   # ['<s>', 'A', 'dog', '</s>']
    """
    from keras_transformer.tokenization import BOS_ID, BOS_PIECE, EOS_ID, EOS_PIECE, PAD_ID

    labels = []
    for token_id in np.asarray(ids).reshape(-1).tolist():
        if token_id == PAD_ID:
            labels.append("")
        elif token_id == BOS_ID:
            labels.append(BOS_PIECE)
        elif token_id == EOS_ID:
            labels.append(EOS_PIECE)
        else:
            piece = _piece(tokenizer, token_id)
            labels.append(piece.replace(_WORD_START, "") or piece)
    return labels


# ---------------------------------------------------------------------------- attention
def plot_attention_heads(weights, row_tokens: Sequence[str], col_tokens: Sequence[str],
                         title: Optional[str] = None, fig=None, axes=None, *,
                         row_label: Optional[str] = None, col_label: Optional[str] = None,
                         head_names: Optional[Sequence[str]] = None, cmap: str = "Blues",
                         vmax: Optional[float] = 1.0, gamma: float = 0.5, colorbar: bool = True,
                         output=None):
    """Draws every head of one attention layer as a heat map, subword tokens on both axes.

    Args:
        weights: ``[heads, rows, cols]`` attention weights of one sentence and one layer (as in
            ``attention_weights(...)["encoder"][layer, 0]``); a 2-D array is one head.
        row_tokens, col_tokens: labels of the queries (y axis) and of the keys (x axis).
        title: drawn above the heads.
        fig: a ``Figure`` or ``SubFigure`` to draw into (default: a new figure sized to fit).
        axes: one ``Axes`` per head to draw into instead (``fig`` is then taken from them).
        row_label, col_label: axis titles (default ``"query"`` and ``"key"``).
        head_names: titles of the heads (default ``"head 1"``, ``"head 2"``, ...).
        cmap: matplotlib colour map.
        vmax: top of the colour scale; 1.0 (default) makes heads and layers comparable, None
            scales to the largest weight shown. The bottom is always 0, so masked positions
            (weight exactly 0) get the colour map's lowest colour (white for ``"Blues"``).
        gamma: colour = (weight / vmax) ** gamma; the default 0.5 (square root) keeps small but
            non-zero weights visible next to the exact zeros of masked positions; 1 is linear.
        colorbar: add one colour bar for all heads.
        output: also save the figure to this path.

    Returns:
        The figure drawn into.

    Example::

        w = attention_weights(model, source_ids, target_ids)
        plot_attention_heads(w["decoder_self"][-1, 0], target_labels, target_labels,
                             title="Decoder self-attention, last layer")
    """
    weights = np.asarray(weights, dtype=np.float32)
    if weights.ndim == 2:
        weights = weights[None]
    if weights.ndim != 3:
        raise ValueError(f"plot_attention_heads: weights must be [heads, rows, cols], got shape "
                         f"{weights.shape}")
    heads, rows, cols = weights.shape
    if len(row_tokens) != rows or len(col_tokens) != cols:
        raise ValueError(f"plot_attention_heads: weights of shape {weights.shape} need {rows} row "
                         f"and {cols} column labels, got {len(row_tokens)} and {len(col_tokens)}")
    if axes is not None:
        axes = list(np.ravel(axes))
        if len(axes) < heads:
            raise ValueError(f"plot_attention_heads: {heads} heads need {heads} axes, got {len(axes)}")
        fig = axes[0].figure
    else:
        if fig is None:
            fig = _new_figure(*_heads_size(heads, row_tokens, col_tokens, _token_inches(rows, cols)))
        axes = list(np.ravel(fig.subplots(1, heads, squeeze=False)))
    from matplotlib.colors import PowerNorm

    font = _font_size(max(rows, cols))
    top = vmax if vmax is not None else (float(weights.max()) or 1.0)
    image = None
    for head in range(heads):
        ax = axes[head]
        image = ax.imshow(weights[head], cmap=cmap, norm=PowerNorm(gamma, vmin=0.0, vmax=top),
                          interpolation="nearest", aspect="equal")
        ax.set_xticks(range(cols))
        ax.set_xticklabels(col_tokens, rotation=90, fontsize=font)
        ax.set_yticks(range(rows))
        if head == 0:
            ax.set_yticklabels(row_tokens, fontsize=font)
            ax.set_ylabel(row_label or "query", fontsize=font + 1)
        else:
            ax.set_yticklabels([])
        ax.set_xlabel(col_label or "key", fontsize=font + 1)
        ax.set_title(head_names[head] if head_names else f"head {head + 1}", fontsize=font + 2)
        ax.tick_params(length=2)
    if colorbar and image is not None:
        label = "attention weight" + ("" if gamma == 1 else f" (colour ~ weight^{gamma:g})")
        fig.colorbar(image, ax=axes[:heads], shrink=0.8, pad=0.01, label=label)
    if title:
        fig.suptitle(title, fontsize=font + 4)
    _save(getattr(fig, "figure", None) or fig, output)
    return fig


def _token_inches(*lengths: int) -> float:
    """Size of one heat-map cell: room for a tick label per token, and maps of >= 2.4 inches."""
    return max(0.2, 2.4 / max(1, *lengths))


def _label_inches(labels: Sequence[str], font: float) -> float:
    """Room taken by the longest tick label (rotated or not), plus the tick itself."""
    return 0.6 * font / 72 * max([len(label) for label in labels] + [1]) + 0.15


def _heads_size(heads: int, row_tokens, col_tokens, unit: float) -> tuple[float, float]:
    """(width, height) in inches that one row of ``heads`` heat maps needs, decorations included."""
    font = _font_size(max(len(row_tokens), len(col_tokens)))
    width = (heads * (unit * len(col_tokens) + 0.15) + _label_inches(row_tokens, font) + 0.3
             + 1.1)  # y tick labels and y label of the first map; colour bar
    height = (unit * len(row_tokens) + _label_inches(col_tokens, font) + 0.45  # x labels
              + 0.3 + 0.45)  # head titles; row title
    return width, height


def _font_size(tokens: int) -> float:
    return 8.0 if tokens <= 20 else 7.0 if tokens <= 35 else 6.0


def _source_ids(model, tokenizer, text: str) -> np.ndarray:
    import tensorflow as tf

    from keras_transformer.tokenization import EOS_ID

    ids = tokenizer.tokenize(tf.constant([text]))[0].numpy().astype(np.int32).tolist()
    limit = _model_max_length(model)
    return np.asarray(ids[:limit - 1] + [EOS_ID], np.int32)


def _model_max_length(model) -> int:
    layer = model.get_layer("encoder_positional_encoding")
    return int(layer.max_length)


def attention_for_sentence(model, tokenizer, text: str, translation: Optional[str] = None,
                           max_extra_length: int = 50) -> dict:
    """Attention weights of every layer and head for one sentence and its translation.

    The source is tokenized and ends with ``</s>``, as in training. Without ``translation`` the
    model's own greedy translation is used (:func:`keras_transformer.decoding.greedy_decode`).
    The decoder runs on ``<s> y_1 ... y_n`` and predicts ``y_1 ... y_n </s>``; the weights come
    from :func:`keras_transformer.model.attention_weights` (the model's own layers).

    Returns a dict with ``"encoder"`` ``[layers, heads, S, S]``, ``"decoder_self"``
    ``[layers, heads, T, T]``, ``"decoder_cross"`` ``[layers, heads, T, S]`` (numpy, batch
    dimension removed), the ids ``"source_ids"``, ``"decoder_input_ids"``, ``"output_ids"``, their
    labels ``"source_tokens"``, ``"decoder_input_tokens"``, ``"output_tokens"``, and the texts
    ``"text"`` and ``"translation"``.

    Example::

        result = attention_for_sentence(model, tokenizer, "A dog runs.")
        result["decoder_self"].shape   # (layers, heads, T, T)
    """
    import tensorflow as tf

    from keras_transformer.model import attention_weights
    from keras_transformer.tokenization import BOS_ID, EOS_ID, PAD_ID

    source = _source_ids(model, tokenizer, text)
    if translation is None:
        from keras_transformer.decoding import greedy_decode

        ids, _ = greedy_decode(model, source[None], max_extra_length=max_extra_length)
        output = [int(t) for t in np.asarray(ids)[0] if t != PAD_ID]
        if EOS_ID in output:
            output = output[:output.index(EOS_ID) + 1]
        translation = tokenizer.detokenize(tf.constant([output or [EOS_ID]], tf.int32))
        translation = translation.numpy()[0].decode("utf-8")
    else:
        ids = tokenizer.tokenize(tf.constant([translation]))[0].numpy().astype(np.int32).tolist()
        output = ids[:_model_max_length(model) - 1] + [EOS_ID]
    if not output:  # nothing decoded (max_extra_length=0 and an empty source): keep one row
        output = [EOS_ID]
    decoder_input = [BOS_ID] + output[:-1]
    weights = attention_weights(model, source[None], np.asarray([decoder_input], np.int32))
    return {
        "encoder": weights["encoder"][:, 0],
        "decoder_self": weights["decoder_self"][:, 0],
        "decoder_cross": weights["decoder_cross"][:, 0],
        "source_ids": source,
        "decoder_input_ids": np.asarray(decoder_input, np.int32),
        "output_ids": np.asarray(output, np.int32),
        "source_tokens": token_labels(tokenizer, source),
        "decoder_input_tokens": token_labels(tokenizer, decoder_input),
        "output_tokens": token_labels(tokenizer, output),
        "text": text,
        "translation": translation,
    }


def plot_sentence_attention(model, tokenizer, text: str, layer: int = -1, output=None,
                            translation: Optional[str] = None, *, max_extra_length: int = 50,
                            cmap: str = "Blues", vmax: Optional[float] = 1.0, gamma: float = 0.5):
    """Encoder self-, decoder self- and encoder-decoder attention of every head of one layer.

    One row of heat maps per attention type, one column per head (as the paper's appendix shows
    heads side by side). The decoder self-attention is causal: everything above the diagonal is
    exactly 0 (the lowest colour), since position ``i`` may attend to positions ``<= i`` only.

    Args:
        model: a model from :func:`keras_transformer.build_transformer` (trained).
        tokenizer: its :class:`~keras_transformer.tokenization.SubwordTokenizer`.
        text: the source sentence.
        layer: which encoder/decoder layer (0-based; negative counts from the last).
        output: also save the figure there (e.g. ``attention.png``).
        translation: the target sentence; default: the model's greedy translation.
        max_extra_length: greedy decoding emits at most ``source length + this`` tokens.
        cmap, vmax, gamma: colours, as in :func:`plot_attention_heads`.

    Returns:
        The ``Figure``. (``keras-transformer attention --run DIR --text ... --output fig.png``
        calls this function.)

    Example::

        plot_sentence_attention(model, tokenizer, "Two dogs play in the snow.", layer=0,
                                output="attention_layer0.png")
    """
    result = attention_for_sentence(model, tokenizer, text, translation, max_extra_length)
    layers = result["encoder"].shape[0]
    if not -layers <= layer < layers:
        raise ValueError(f"plot_sentence_attention: layer={layer} but the model has {layers} "
                         f"layers (use 0..{layers - 1} or negative indices)")
    index = layer % layers
    heads = result["encoder"].shape[1]
    source, inputs, outputs = (result["source_tokens"], result["decoder_input_tokens"],
                               result["output_tokens"])
    unit = _token_inches(len(source), len(inputs))
    sizes = [_heads_size(heads, source, source, unit), _heads_size(heads, inputs, inputs, unit),
             _heads_size(heads, outputs, source, unit)]
    heights = [height for _, height in sizes]
    fig = _new_figure(max(width for width, _ in sizes), sum(heights) + 0.7)
    encoder_fig, self_fig, cross_fig = fig.subfigures(3, 1, height_ratios=heights)
    name = f"layer {index + 1} of {layers}"
    style = dict(cmap=cmap, vmax=vmax, gamma=gamma)
    plot_attention_heads(result["encoder"][index], source, source,
                         title=f"Encoder self-attention ({name})", fig=encoder_fig,
                         row_label="source (query)", col_label="source (key)", **style)
    plot_attention_heads(result["decoder_self"][index], inputs, inputs,
                         title=f"Decoder self-attention ({name}; causal: 0 above the diagonal)",
                         fig=self_fig, row_label="decoder input (query)",
                         col_label="decoder input (key)", **style)
    plot_attention_heads(result["decoder_cross"][index], outputs, source,
                         title=f"Encoder-decoder attention ({name})", fig=cross_fig,
                         row_label="predicted token (query)", col_label="source (key)", **style)
    fig.suptitle(f"{result['text']}\n\u2192 {result['translation']}", fontsize=11)
    _save(fig, output)
    return fig


# ---------------------------------------------------------------------------- positions
def plot_positional_encoding(length: int, d_model: int, output=None,
                             dimensions: Optional[Sequence[int]] = None):
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
        raise ValueError(f"plot_positional_encoding: need length >= 1 and d_model >= 2, got "
                         f"{length} and {d_model}")
    table = np.asarray(ops.convert_to_numpy(sinusoidal_encoding(length, d_model)))
    fig = _new_figure(12, 4.5)
    matrix_ax, curve_ax = fig.subplots(1, 2, width_ratios=[1.6, 1])
    image = matrix_ax.imshow(table, cmap="RdBu", vmin=-1, vmax=1, aspect="auto",
                             interpolation="nearest")
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
        raise TypeError("plot_training_history: expected a CSV path, a keras History or a dict "
                        f"of lists, got {type(history).__name__}")
    values = {}
    for key, column in columns.items():
        try:
            values[key] = np.asarray([float(v) if v not in ("", None) else np.nan for v in column],
                                     np.float64)
        except (TypeError, ValueError):
            continue  # a non-numeric column
    return values


def plot_training_history(history, output=None, steps_per_epoch: Optional[int] = None,
                          title: Optional[str] = None, schedule=None):
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
        raise ValueError("plot_training_history: the history has neither 'loss' nor "
                         f"'learning_rate' (columns: {sorted(values)})")
    count = max(len(v) for v in values.values())
    if "step" in values:
        x, x_label = values["step"], "step"
    elif steps_per_epoch:
        epochs = values["epoch"] + 1 if "epoch" in values else np.arange(1, count + 1)
        x, x_label = epochs * int(steps_per_epoch), "step"
    else:
        epochs = values["epoch"] + 1 if "epoch" in values else np.arange(1, count + 1)
        x, x_label = epochs, "epoch"
    accuracy = "masked_accuracy" in values
    fig = _new_figure(5.0 * (3 if accuracy else 2), 3.8)
    axes = list(np.ravel(fig.subplots(1, 3 if accuracy else 2, squeeze=False)))
    marker = "o" if count <= 30 else None

    def curve(ax, key, label, **style):
        if key in values and len(values[key]) == len(x):
            ax.plot(x, values[key], **{"marker": marker, "markersize": 3, "label": label, **style})

    curve(axes[0], "loss", "training")
    curve(axes[0], "val_loss", "validation")
    axes[0].set_title("Loss (label-smoothed cross-entropy)")
    axes[0].set_ylabel("loss")
    if schedule is not None:
        if x_label != "step":
            raise ValueError("plot_training_history: schedule needs a step axis (a 'step' column "
                             "or steps_per_epoch)")
        updates = np.arange(1, int(np.nanmax(x)) + 1)
        axes[1].plot(updates, _schedule_values(schedule, updates - 1), label="every step (schedule)")
        curve(axes[1], "learning_rate", "logged at epoch end", marker="o", linestyle="none")
    else:
        curve(axes[1], "learning_rate", "learning rate")
    axes[1].set_title("Learning rate (paper eq. 3)")
    axes[1].set_ylabel("learning rate")
    axes[1].ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    if accuracy:
        curve(axes[2], "masked_accuracy", "training")
        curve(axes[2], "val_masked_accuracy", "validation")
        axes[2].set_title("Token accuracy")
        axes[2].set_ylabel("accuracy")
    for ax in axes:
        ax.set_xlabel(x_label)
        ax.grid(alpha=0.3)
        if len(ax.get_lines()) > 1:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    _save(fig, output)
    return fig


def _schedule_values(schedule, counters: np.ndarray) -> np.ndarray:
    """``schedule(counter)`` for every counter, vectorised when the schedule allows it."""
    from keras import ops

    try:
        values = np.asarray(ops.convert_to_numpy(schedule(ops.convert_to_tensor(counters))),
                            np.float64)
        if values.shape == counters.shape:
            return values
    except Exception:  # a schedule written for scalars only
        pass
    return np.asarray([float(ops.convert_to_numpy(schedule(int(c)))) for c in counters])
