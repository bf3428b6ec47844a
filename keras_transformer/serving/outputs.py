"""The SavedModel's optional outputs: n-best lists and source alignments (graph functions).

* :func:`nbest`: the ``k`` best translations of a beam of ``k`` (``k`` = the export's beam size),
  with their GNMT-normalized scores, best first; the first equals ``serving_default``.
* :func:`alignments`: per target token, the source subword it attends most: the arg-max over
  source positions of the last decoder layer's encoder-decoder attention, averaged over heads
  (what CTranslate2's ``return_attention`` gives for a model exported with
  ``alignment_heads = num_heads``): the source EOS is never an answer. Computed by one
  teacher-forced decoder pass over the translation (the decoder is causal, so each row sees
  what the search saw).
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.decoding.tokens import NEG_INF
from keras_transformer.model import TransformerLayers
from keras_transformer.tokenization import BOS_ID, EOS_ID, PAD_ID

__all__ = ["alignments", "nbest"]


def nbest(translator, tokens):
    """Ragged source subwords -> ``{"translations": tf.string [B, k], "scores": [B, k]}``."""
    source, lengths = translator._source_ids(tokens)
    ids, scores = translator.searcher.nbest(source)  # [B, k, T], [B, k]
    batch, k = tf.shape(ids)[0], tf.shape(ids)[1]
    empty = tf.equal(lengths, 0)[:, None]
    missing = scores <= NEG_INF / 2  # fewer than k finished hypotheses
    ids = tf.where(tf.equal(ids, EOS_ID) | empty[..., None] | missing[..., None], PAD_ID, ids)
    flat = tf.reshape(ids, [batch * k, -1])
    text = translator._detokenize(flat)
    text = tf.where(tf.reduce_any(flat != PAD_ID, axis=1), text, "")
    scores = tf.where(empty, 0.0, tf.where(missing, NEG_INF, scores))
    return {"translations": tf.reshape(text, [batch, k]), "scores": scores}


def alignments(model, source, ids):
    """``ids`` [B, T] (no BOS/EOS, 0-padded) of sources [B, S] -> int32 [B, T]: the attended
    source subword of each target token (an index into the source's subwords), -1 at padding."""
    layers = TransformerLayers.of(model)
    batch = tf.shape(ids)[0]
    target = tf.concat([tf.fill([batch, 1], BOS_ID), ids[:, :-1]], axis=1)
    memory, source_mask = layers.encode(source, training=False)
    _, weights = layers.decode_with_scores(target, memory, source_mask)
    cross = tf.reduce_mean(tf.cast(weights[-1][1], tf.float32), axis=1)  # [B, T, S]
    # Source subwords only, as CTranslate2 returns them: not the EOS the model reads last.
    words = tf.not_equal(source, PAD_ID) & tf.not_equal(source, EOS_ID)
    cross = tf.where(words[:, None, :], cross, -1.0)
    positions = tf.argmax(cross, axis=-1, output_type=tf.int32)
    return tf.where(tf.not_equal(ids, PAD_ID), positions, -1)
