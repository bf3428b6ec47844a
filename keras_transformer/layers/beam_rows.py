"""The k beam hypotheses of a sentence as k queries of one row (decoding, section 6.1).

Beam search decodes ``batch * k`` rows, row ``b * k + j`` being hypothesis ``j`` of sentence
``b``; keys and values computed once per sentence (the encoder-decoder ones) have ``batch``
rows. Regrouping the queries lets the k hypotheses attend to the one copy of their sentence.
"""

from keras import ops


def group_rows(x, group):
    """``[batch * g, h, t, d] -> [batch, h, g * t, d]``: the ``g`` rows of each sentence as
    queries of one row."""
    _, heads, length, depth = ops.shape(x)
    x = ops.reshape(x, (-1, group, heads, length, depth))
    return ops.reshape(ops.transpose(x, (0, 2, 1, 3, 4)), (-1, heads, group * length, depth))


def ungroup_rows(x, group):
    """The inverse of :func:`group_rows`: ``[batch, h, g * t, d] -> [batch * g, h, t, d]``."""
    _, heads, length, depth = ops.shape(x)
    x = ops.reshape(x, (-1, heads, group, length // group, depth))
    return ops.reshape(ops.transpose(x, (0, 2, 1, 3, 4)), (-1, heads, length // group, depth))
