# Paper section 5.4 (Residual Dropout): P_drop = 0.1 on sub-layer outputs and embedding sums.
"""``FastDropout``: ``keras.layers.Dropout`` that draws 16 random bits per element, not a float."""

import keras


@keras.saving.register_keras_serializable(package="keras_transformer")
class FastDropout(keras.layers.Dropout):
    """``keras.layers.Dropout`` with half the random-number work (same arguments and config).

    Keras' dropout draws one uniform float per element (``tf.nn.experimental.stateless_dropout``);
    the Philox generator behind it makes 32 bits per draw. Here every 32-bit draw gives two
    16-bit numbers and an element is kept when its number is ``>= round(rate * 65536)``: the rate
    is exact to 1/65536, kept elements are scaled by ``1 / (1 - rate)`` as in Keras: half the random
    bits (timings in ``results/benchmarks.md``). Other backends, ``noise_shape`` and inference
    fall back to Keras' own path.

    Example:

    >>> layer = FastDropout(0.5, seed=1)
    >>> x = keras.ops.ones((1000,))
    >>> y = layer(x, training=True)
    >>> sorted(set(keras.ops.convert_to_numpy(y).tolist())), 400 < int(keras.ops.sum(y == 0)) < 600
    ([0.0, 2.0], True)
    """

    def call(self, inputs, training=False):
        if (
            not (training and self.rate > 0)
            or self.rate >= 1
            or self.noise_shape is not None
            or keras.backend.backend() != "tensorflow"
        ):
            return super().call(inputs, training=training)
        import tensorflow as tf

        seed = self.seed_generator.next()
        if seed.dtype != tf.int32:  # the stateless ops want int32 seeds (as Keras does it)
            seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
        size = tf.size(inputs)
        bits = tf.random.stateless_uniform(
            [(size + 1) // 2], seed, minval=None, maxval=None, dtype=tf.uint32
        )
        halves = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size]
        threshold = tf.constant(min(int(round(self.rate * 65536)), 65535), tf.uint16)
        keep = tf.reshape(halves, tf.shape(inputs)) >= threshold
        scale = tf.cast(1.0 / (1.0 - self.rate), inputs.dtype)
        return tf.where(keep, inputs * scale, tf.zeros([], inputs.dtype))


def dropout_layer(rate, fast=True, **kwargs):
    """Dropout (section 5.4): stock ``keras.layers.Dropout``, or :class:`FastDropout` when ``fast``
    (the same distribution of masks, tested in ``tests/test_layers.py``)."""
    return FastDropout(rate, **kwargs) if fast else keras.layers.Dropout(rate, **kwargs)
