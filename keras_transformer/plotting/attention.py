# Paper appendix ("Attention Visualizations", Figures 3-5).
"""Attention heat maps: every head of a layer, or the three attentions of one sentence."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from keras_transformer.plotting.figures import _new_figure, _save
from keras_transformer.text.tokenizer import with_eos

_WORD_START = "\u2581"  # SentencePiece's "▁"


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
    :class:`~keras_transformer.text.tokenizer.SubwordTokenizer`) or ``pieces`` (a reloaded one).

    Example::

        token_labels(tokenizer, [2, 611, 1043, 3])   # ['<s>', 'A', 'dog', '</s>']
    """
    from keras_transformer.text.tokenizer import BOS_ID, BOS_PIECE, EOS_ID, EOS_PIECE, PAD_ID

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
def plot_attention_heads(
    weights,
    row_tokens: Sequence[str],
    col_tokens: Sequence[str],
    title: str | None = None,
    fig=None,
    axes=None,
    *,
    row_label: str | None = None,
    col_label: str | None = None,
    head_names: Sequence[str] | None = None,
    cmap: str = "Blues",
    vmax: float | None = 1.0,
    gamma: float = 0.5,
    colorbar: bool = True,
    output=None,
):
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
    weights = _check_heads(weights, row_tokens, col_tokens)
    heads, rows, cols = weights.shape
    if axes is not None:
        axes = list(np.ravel(axes))
        if len(axes) < heads:
            raise ValueError(
                f"plot_attention_heads: {heads} heads need {heads} axes, got {len(axes)}"
            )
        fig = axes[0].figure
    else:
        if fig is None:
            size = _heads_size(heads, row_tokens, col_tokens, _token_inches(rows, cols))
            fig = _new_figure(*size)
        axes = list(np.ravel(fig.subplots(1, heads, squeeze=False)))
    from matplotlib.colors import PowerNorm

    font = _font_size(max(rows, cols))
    norm = PowerNorm(
        gamma, vmin=0.0, vmax=vmax if vmax is not None else (float(weights.max()) or 1.0)
    )
    image = None
    for head in range(heads):
        name = head_names[head] if head_names else f"head {head + 1}"
        labels = (row_tokens, col_tokens, row_label or "query", col_label or "key")
        image = _draw_head(axes[head], weights[head], labels, name, head == 0, font, cmap, norm)
    if colorbar and image is not None:
        label = "attention weight" + ("" if gamma == 1 else f" (colour ~ weight^{gamma:g})")
        fig.colorbar(image, ax=axes[:heads], shrink=0.8, pad=0.01, label=label)
    if title:
        fig.suptitle(title, fontsize=font + 4)
    _save(getattr(fig, "figure", None) or fig, output)
    return fig


def _layer_index(layer, layers):
    if not -layers <= layer < layers:
        raise ValueError(
            f"plot_sentence_attention: layer={layer} but the model has {layers} "
            f"layers (use 0..{layers - 1} or negative indices)"
        )
    return layer % layers


def _check_heads(weights, row_tokens, col_tokens) -> np.ndarray:
    """``weights`` as float32 ``[heads, rows, cols]``, its labels checked against its shape."""
    weights = np.asarray(weights, dtype=np.float32)
    if weights.ndim == 2:
        weights = weights[None]
    if weights.ndim != 3:
        raise ValueError(
            f"plot_attention_heads: weights must be [heads, rows, cols], got shape {weights.shape}"
        )
    _, rows, cols = weights.shape
    if len(row_tokens) != rows or len(col_tokens) != cols:
        raise ValueError(
            f"plot_attention_heads: weights of shape {weights.shape} need {rows} row "
            f"and {cols} column labels, got {len(row_tokens)} and {len(col_tokens)}"
        )
    return weights


def _draw_head(ax, weights, labels, name, first, font, cmap, norm):
    """One head's heat map; only the first head gets the row labels."""
    row_tokens, col_tokens, row_label, col_label = labels
    image = ax.imshow(weights, cmap=cmap, norm=norm, interpolation="nearest", aspect="equal")
    ax.set_xticks(range(len(col_tokens)))
    ax.set_xticklabels(col_tokens, rotation=90, fontsize=font)
    ax.set_yticks(range(len(row_tokens)))
    if first:
        ax.set_yticklabels(row_tokens, fontsize=font)
        ax.set_ylabel(row_label, fontsize=font + 1)
    else:
        ax.set_yticklabels([])
    ax.set_xlabel(col_label, fontsize=font + 1)
    ax.set_title(name, fontsize=font + 2)
    ax.tick_params(length=2)
    return image


def _token_inches(*lengths: int) -> float:
    """Size of one heat-map cell: room for a tick label per token, and maps of >= 2.4 inches."""
    return max(0.2, 2.4 / max(1, *lengths))


def _label_inches(labels: Sequence[str], font: float) -> float:
    """Room taken by the longest tick label (rotated or not), plus the tick itself."""
    return 0.6 * font / 72 * max([len(label) for label in labels] + [1]) + 0.15


def _heads_size(heads: int, row_tokens, col_tokens, unit: float) -> tuple[float, float]:
    """(width, height) in inches that one row of ``heads`` heat maps needs, decorations included."""
    font = _font_size(max(len(row_tokens), len(col_tokens)))
    width = (
        heads * (unit * len(col_tokens) + 0.15) + _label_inches(row_tokens, font) + 0.3 + 1.1
    )  # y tick labels and y label of the first map; colour bar
    height = (
        unit * len(row_tokens)
        + _label_inches(col_tokens, font)
        + 0.45  # x labels
        + 0.3
        + 0.45
    )  # head titles; row title
    return width, height


def _font_size(tokens: int) -> float:
    return 8.0 if tokens <= 20 else 7.0 if tokens <= 35 else 6.0


def _source_ids(model, tokenizer, text: str) -> np.ndarray:
    import tensorflow as tf

    ids = tokenizer.tokenize(tf.constant([text]))[0].numpy().tolist()
    return np.asarray(with_eos([ids], _positions(model))[0], np.int32)


def _positions(model) -> int:
    from keras_transformer.model import model_dims

    return model_dims(model)["max_positions"]


def attention_for_sentence(
    model, tokenizer, text: str, translation: str | None = None, **search
) -> dict:
    """Attention weights of every layer and head for one sentence and its translation.

    The source is tokenized and ends with ``</s>``, as in training. Without ``translation`` the
    model's own greedy translation is used (:func:`keras_transformer.greedy_decode`; ``search``:
    its :class:`~keras_transformer.inference.settings.SearchSettings` fields).
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
    from keras_transformer.text.tokenizer import BOS_ID, EOS_ID, PAD_ID

    source = _source_ids(model, tokenizer, text)
    if translation is None:
        from keras_transformer.inference.search import greedy_decode

        ids, _ = greedy_decode(model, source[None], **search)
        output = [int(t) for t in np.asarray(ids)[0] if t != PAD_ID]
        if EOS_ID in output:
            output = output[: output.index(EOS_ID) + 1]
        translation = tokenizer.detokenize(tf.constant([output or [EOS_ID]], tf.int32))
        translation = translation.numpy()[0].decode("utf-8")
    else:
        ids = tokenizer.tokenize(tf.constant([translation]))[0].numpy().astype(np.int32).tolist()
        output = with_eos([ids], _positions(model))[0]
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


def plot_sentence_attention(
    model,
    tokenizer,
    text: str,
    layer: int = -1,
    output=None,
    translation: str | None = None,
    *,
    cmap: str = "Blues",
    vmax: float | None = 1.0,
    gamma: float = 0.5,
    **search,
):
    """Encoder self-, decoder self- and encoder-decoder attention of every head of one layer.

    One row of heat maps per attention type, one column per head (as the paper's appendix shows
    heads side by side). The decoder self-attention is causal: everything above the diagonal is
    exactly 0 (the lowest colour), since position ``i`` may attend to positions ``<= i`` only.

    Args:
        model: a model from :func:`keras_transformer.build_transformer` (trained).
        tokenizer: its :class:`~keras_transformer.text.tokenizer.SubwordTokenizer`.
        text: the source sentence.
        layer: which encoder/decoder layer (0-based; negative counts from the last).
        output: also save the figure there (e.g. ``attention.png``).
        translation: the target sentence; default: the model's greedy translation.
        cmap, vmax, gamma: colours, as in :func:`plot_attention_heads`.
        **search: settings of the greedy decoding (``max_extra_length``, ...).

    Returns:
        The ``Figure``. (``keras-transformer attention --run DIR --text ... --output fig.png``
        calls this function.)

    Example::

        plot_sentence_attention(model, tokenizer, "Two dogs play in the snow.", layer=0,
                                output="attention_layer0.png")
    """
    result = attention_for_sentence(model, tokenizer, text, translation, **search)
    layers = result["encoder"].shape[0]
    index = _layer_index(layer, layers)
    name = f"layer {index + 1} of {layers}"
    source, inputs = result["source_tokens"], result["decoder_input_tokens"]
    # (weights, row labels, column labels, title, row axis, column axis) of the three maps
    panels = [
        ("encoder", source, source, f"Encoder self-attention ({name})", "source"),
        (
            "decoder_self",
            inputs,
            inputs,
            f"Decoder self-attention ({name}; causal: 0 above the diagonal)",
            "decoder input",
        ),
        (
            "decoder_cross",
            result["output_tokens"],
            source,
            f"Encoder-decoder attention ({name})",
            "predicted token",
        ),
    ]
    heads = result["encoder"].shape[1]
    unit = _token_inches(len(source), len(inputs))
    sizes = [_heads_size(heads, rows, cols, unit) for _, rows, cols, _, _ in panels]
    heights = [height for _, height in sizes]
    fig = _new_figure(max(width for width, _ in sizes), sum(heights) + 0.7)
    subfigures = fig.subfigures(3, 1, height_ratios=heights)
    for subfigure, (key, rows, cols, title, row_axis) in zip(subfigures, panels):
        col_axis = "source" if cols is source else "decoder input"
        plot_attention_heads(
            result[key][index],
            rows,
            cols,
            title=title,
            fig=subfigure,
            row_label=f"{row_axis} (query)",
            col_label=f"{col_axis} (key)",
            cmap=cmap,
            vmax=vmax,
            gamma=gamma,
        )
    fig.suptitle(f"{result['text']}\n\u2192 {result['translation']}", fontsize=11)
    _save(fig, output)
    return fig
