# Paper section 6.1 (Machine Translation): "beam search with a beam size of 4 and length penalty
# alpha = 0.6 [38 = GNMT] ... maximum output length during inference to input length + 50, but
# terminate early when possible"; sections 3.2.3 and 3.4 (auto-regressive decoder, softmax output).
"""Greedy and beam search with key/value caches: one loop (``search.py``), two strategies
(``strategies.py``), the next-token choice (``tokens.py``), and the functions below.

Example:

>>> from keras_transformer import TransformerConfig, build_transformer
>>> model = build_transformer(TransformerConfig.tiny(vocab_size=100))
>>> source = [[5, 6, 7, 3], [8, 9, 3, 0]]
>>> ids, scores = beam_search(model, source, beam_size=4, alpha=0.6)
>>> ids.shape[0], scores.shape
(2, TensorShape([2]))
"""

from __future__ import annotations

import collections

import keras
import tensorflow as tf

from keras_transformer.decoding.search import Searcher, trim_padding
from keras_transformer.decoding.strategies import BeamSearch, GreedySearch, length_penalty

__all__ = [
    "BeamSearch",
    "GreedySearch",
    "Searcher",
    "beam_search",
    "get_searcher",
    "greedy_decode",
    "length_penalty",
    "trim_padding",
]

_CACHE_SIZE = 8
_searchers: collections.OrderedDict[tuple, Searcher] = collections.OrderedDict()


def get_searcher(model: keras.Model, **settings) -> Searcher:
    """The :class:`Searcher` for ``model`` and ``settings``, built once and then reused.

    Keeps the last 8 (each holds its model), so repeated calls of the functions below do not
    retrace. Settings are :class:`Searcher`'s keyword arguments.
    """
    key = (id(model), tuple(sorted(settings.items())))
    searcher = _searchers.get(key)
    if searcher is None or searcher.model is not model:
        searcher = Searcher(model, **settings)
        _searchers[key] = searcher
        while len(_searchers) > _CACHE_SIZE:
            _searchers.popitem(last=False)
    _searchers.move_to_end(key)
    return searcher


def greedy_decode(
    model: keras.Model,
    source_ids,
    max_extra_length: int = 50,
    max_output_length: int | None = None,
    jit_compile: bool = False,
):
    """Greedy search with key/value caches: the most probable token at every step.

    Returns ``(ids int32 [batch, length], scores float32 [batch])``: ids without BOS, ending at
    EOS, right-padded with 0; scores are the summed log-probabilities (see ``search.py``).

    Example:

    >>> from keras_transformer import TransformerConfig, build_transformer
    >>> model = build_transformer(TransformerConfig.tiny(vocab_size=100))
    >>> ids, scores = greedy_decode(model, [[5, 6, 7, 3]], max_extra_length=10)
    >>> ids.shape[0], int(ids.shape[1]) <= 4 + 10, float(scores[0]) <= 0.0
    (1, True, True)
    """
    searcher = get_searcher(
        model,
        beam_size=1,
        alpha=0.0,
        max_extra_length=max_extra_length,
        max_output_length=max_output_length,
        jit_compile=jit_compile,
    )
    return searcher.greedy(tf.convert_to_tensor(source_ids, tf.int32))


def beam_search(
    model: keras.Model,
    source_ids,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_extra_length: int = 50,
    max_output_length: int | None = None,
    jit_compile: bool = False,
):
    """Beam search with key/value caches and the GNMT length penalty (paper section 6.1).

    Returns the best hypothesis per sentence: ``(ids int32 [batch, length], scores float32
    [batch])``, ids as in :func:`greedy_decode`, scores ``log P(y) / ((5 + |y|) / 6) ** alpha``.

    Example:

    >>> from keras_transformer import TransformerConfig, build_transformer
    >>> model = build_transformer(TransformerConfig.tiny(vocab_size=100))
    >>> ids, scores = beam_search(model, [[5, 6, 7, 3], [8, 3, 0, 0]], beam_size=4, alpha=0.6)
    >>> tuple(scores.shape)
    (2,)
    """
    searcher = get_searcher(
        model,
        beam_size=beam_size,
        alpha=alpha,
        max_extra_length=max_extra_length,
        max_output_length=max_output_length,
        jit_compile=jit_compile,
    )
    return searcher.beam_search(tf.convert_to_tensor(source_ids, tf.int32))
