"""Decoders for tests and benchmarks, not for users.

* :func:`greedy_decode_uncached`: the reference greedy search that re-runs the whole model on the
  source and the whole prefix at every step (what the TensorFlow tutorial does): O(n^2) decoder
  positions and the source re-encoded at every step. The tests check that the cached
  :class:`~keras_transformer.inference.search.Searcher` emits the same tokens;
  ``benchmarks/decoding.py`` times against it.
* :class:`NoEosSearcher`: a searcher that never emits EOS, so every hypothesis runs to its
  maximum length (to time untrained models, and to test the length limits).
* :func:`greedy_by_full_calls` and :func:`full_model_call`: greedy search in plain Python over
  the model's full forward pass per step, for references that must not share the search's code
  (``tests/test_ensemble.py``, ``tests/test_repetition_guard.py``).
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.inference.search import Searcher, trim_padding
from keras_transformer.text.tokenizer import BOS_ID, EOS_ID, PAD_ID


class NoEosSearcher(Searcher):
    """A :class:`Searcher` whose outputs never contain EOS."""

    banned_ids = (PAD_ID, BOS_ID, EOS_ID)


def uncached_greedy_function(searcher: Searcher):
    """The uncached reference search for ``searcher``'s model and settings, as a
    ``tf.function`` ``int32 [batch, source_length] -> (ids, scores)``."""

    def search(source_ids):
        source_ids = searcher.prepare_source(source_ids)
        batch = tf.shape(source_ids)[0]
        limits = searcher.limits(source_ids)
        length = tf.reduce_max(tf.concat([limits, [1]], axis=0))

        def cond(i, prefix, scores, finished):
            return tf.logical_and(i < length, tf.logical_not(tf.reduce_all(finished)))

        def body(i, prefix, scores, finished):
            logits = searcher.model({"source": source_ids, "target": prefix}, training=False)
            token_log_prob, token = searcher.best_tokens(logits[:, -1], 1)
            token_log_prob, token = token_log_prob[:, 0], token[:, 0]
            token = tf.where(finished, PAD_ID, token)
            scores = scores + tf.where(finished, 0.0, token_log_prob)
            finished = finished | tf.equal(token, EOS_ID) | (i + 1 >= limits)
            return i + 1, tf.concat([prefix, token[:, None]], axis=1), scores, finished

        state = (
            tf.constant(0),
            tf.fill([batch, 1], BOS_ID),
            tf.zeros([batch], tf.float32),
            tf.zeros([batch], tf.bool),
        )
        invariants = (
            tf.TensorShape([]),
            tf.TensorShape([None, None]),
            tf.TensorShape([None]),
            tf.TensorShape([None]),
        )
        _, prefix, scores, _ = tf.while_loop(cond, body, state, shape_invariants=invariants)
        return trim_padding(prefix[:, 1:]), scores

    spec = tf.TensorSpec([None, None], tf.int32, name="source_ids")
    return tf.function(search, input_signature=[spec], autograph=False)


def greedy_decode_uncached(
    model, source_ids, max_extra_length: int = 50, max_output_length: int | None = None
):
    """Greedy search without caches; same outputs as ``greedy_decode`` up to rounding."""
    searcher = Searcher(
        model,
        beam_size=1,
        alpha=0.0,
        max_extra_length=max_extra_length,
        max_output_length=max_output_length,
    )
    return uncached_greedy_function(searcher)(tf.convert_to_tensor(source_ids, tf.int32))


def full_model_call(model):
    """``model``'s teacher-forced forward pass ``(source int32 [rows, width], target int32 [rows,
    length]) -> logits [rows, length, vocab]`` as one ``tf.function`` traced once for any shape:
    the model's own call, fast enough to run once per step of a reference search."""
    spec = tf.TensorSpec([None, None], tf.int32)

    def call(source, target):
        return model({"source": source, "target": target}, training=False)

    return tf.function(call, input_signature=[spec, spec], autograph=False)


def greedy_by_full_calls(next_log_probs, lengths):
    """Greedy search of several rows at once in plain Python: ``next_log_probs(emitted)`` takes
    every row's emitted ids (lists of one length) and returns numpy ``[rows, vocab]``, the
    log-probabilities of each row's next id (-inf where banned; a full model call per step).
    Row ``r`` stops at EOS or after ``lengths[r]`` ids; a stopped row's later ids only keep the
    batch rectangular and are ignored. Returns ``[(ids, summed log-probability)]`` per row."""
    import numpy as np

    emitted = [[] for _ in lengths]
    results = [([], 0.0) for _ in lengths]
    done = [length <= 0 for length in lengths]
    while not all(done):
        log_probs = next_log_probs(emitted)
        for row, (ids, score) in enumerate(results):
            token = int(np.argmax(log_probs[row]))
            emitted[row].append(token)
            if not done[row]:
                ids.append(token)
                results[row] = (ids, score + float(log_probs[row, token]))
                done[row] = token == EOS_ID or len(ids) >= lengths[row]
    return results
