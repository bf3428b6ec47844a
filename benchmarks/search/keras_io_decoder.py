"""The keras.io recipe's decoder, applied to our model: the baseline of ``decoding.py``."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_transformer.text.tokenizer import BOS_ID, EOS_ID, PAD_ID

KERAS_IO_LENGTH = 40  # the keras.io recipe pads sources and prompts to MAX_SEQUENCE_LENGTH = 40


def keras_io_greedy(model, stop=True, length=KERAS_IO_LENGTH):
    """The keras.io recipe's decoder (``decode_sequences`` of "English-to-Spanish translation with
    KerasHub"), applied to our model: eager ``keras_hub.samplers.GreedySampler``, the source padded
    to ``length``, a ``[BOS, PAD, ...]`` prompt of ``length`` ids, and at every step the whole model
    re-run on the source and the whole padded prompt, keeping the logits at ``index - 1``. It stops
    when every sentence has emitted EOS (or after ``length - 1`` steps), so outputs are at most
    ``length - 1`` subwords long. Give it sources of at most ``length`` ids
    (``source_batches(..., max_source_length=length)`` cuts them, EOS kept last, as the model was
    trained). Returns ``search(source_ids) -> (ids, None)`` in our format (no BOS, up to and
    including the first EOS, 0-padded)."""
    import keras_hub

    sampler = keras_hub.samplers.GreedySampler()

    def search(source_ids):
        source = tf.pad(source_ids, [[0, 0], [0, length - tf.shape(source_ids)[1]]])
        batch = tf.shape(source)[0]
        prompt = tf.concat(
            [tf.fill([batch, 1], BOS_ID), tf.fill([batch, length - 1], PAD_ID)], axis=1
        )

        def next_logits(prompt, cache, index):  # the recipe's `next`
            logits = model({"source": source, "target": prompt}, training=False)[:, index - 1, :]
            return logits, None, cache

        generated = sampler(
            next_logits, prompt, index=1, stop_token_ids=[EOS_ID] if stop else None
        ).numpy()[:, 1:]
        eos = generated == EOS_ID
        after_eos = np.cumsum(eos, axis=1) - eos > 0  # what the recipe's post-processing drops
        width = max(1, int((~after_eos).sum(axis=1).max()))
        return tf.constant(np.where(after_eos, PAD_ID, generated)[:, :width]), None

    return search


def agreement(outputs, reference, longest):
    """How many sentences of ``outputs`` equal ``reference``'s, among those whose reference has at
    most ``longest`` subwords, EOS included (the keras.io decoder cannot emit more)."""
    same = total = 0
    for a, b in zip(outputs, reference):
        for x, y in zip(a, b):
            x, y = x[x != PAD_ID], y[y != PAD_ID]
            if len(y) <= longest:
                total += 1
                same += int(np.array_equal(x, y))
    return same, total
