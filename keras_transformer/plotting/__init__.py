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

from keras_transformer.plotting.attention import (
    attention_for_sentence,
    plot_attention_heads,
    plot_sentence_attention,
    token_labels,
)
from keras_transformer.plotting.curves import plot_positional_encoding, plot_training_history

__all__ = [
    "attention_for_sentence",
    "plot_attention_heads",
    "plot_positional_encoding",
    "plot_sentence_attention",
    "plot_training_history",
    "token_labels",
]
