# Paper section 3.1: LayerNorm(x + Sublayer(x)) after every sub-layer (Ba et al. 2016).
"""``LayerNormalization`` over the last axis with a hand-written gradient (TensorFlow backend)."""

import contextlib
import threading

import keras

_TRACING = threading.local()


@contextlib.contextmanager
def forward_only():
    """Layer norms traced inside take no hand-written gradient (the same forward ops).

    For graphs that are never differentiated, such as an export: a SavedModel that holds
    ``tf.custom_gradient`` ops warns of "unsaved custom gradients" on every load."""
    previous = getattr(_TRACING, "forward_only", False)
    _TRACING.forward_only = True
    try:
        yield
    finally:
        _TRACING.forward_only = previous


def _layer_norm_tf(x, gamma, beta, epsilon):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis, computed in float32.

    Autodiff of Keras' version differentiates through ``moments`` and the broadcasts (about 40
    small ops per call); the closed form below needs a dozen::

        dx = inv * (g - mean(g) - x_hat * mean(g * x_hat)),   g = dy * gamma
    """
    import tensorflow as tf

    def normalize(x, gamma, beta):
        xf = tf.cast(x, tf.float32)
        centred = xf - tf.reduce_mean(xf, axis=-1, keepdims=True)
        inv = tf.math.rsqrt(tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True) + epsilon)
        x_hat = centred * inv
        return tf.cast(x_hat * gamma + beta, x.dtype), x_hat, inv

    @tf.custom_gradient
    def forward(x, gamma, beta):
        y, x_hat, inv = normalize(x, gamma, beta)

        def backward(dy):
            dyf = tf.cast(dy, tf.float32)
            rows = list(range(len(dy.shape) - 1))
            g = dyf * gamma
            dx = inv * (
                g
                - tf.reduce_mean(g, axis=-1, keepdims=True)
                - x_hat * tf.reduce_mean(g * x_hat, axis=-1, keepdims=True)
            )
            return (
                tf.cast(dx, x.dtype),
                tf.reduce_sum(dyf * x_hat, axis=rows),
                tf.reduce_sum(dyf, axis=rows),
            )

        return y, backward

    gamma, beta = tf.cast(gamma, tf.float32), tf.cast(beta, tf.float32)
    if getattr(_TRACING, "forward_only", False):
        return normalize(x, gamma, beta)[0]
    return forward(x, gamma, beta)


@keras.saving.register_keras_serializable(package="keras_transformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """``keras.layers.LayerNormalization`` (same arguments, weights and config) whose training
    step is cheaper on TensorFlow: normalization over the last axis with ``center`` and ``scale``
    uses a closed-form gradient (a dozen ops instead of about forty). Other settings and backends
    run Keras' own code. Timings in ``results/benchmarks.md``.

    Example:

    >>> norm = LayerNormalization(epsilon=1e-6)
    >>> y = norm(keras.ops.convert_to_tensor([[1.0, 2.0, 3.0, 4.0]]))
    >>> [round(float(v), 3) for v in y[0]]
    [-1.342, -0.447, 0.447, 1.342]
    """

    def call(self, inputs):
        axis = (
            self.axis
            if isinstance(self.axis, int)
            else (self.axis[0] if len(self.axis) == 1 else None)
        )
        rank = len(inputs.shape)
        if (
            keras.backend.backend() != "tensorflow"
            or self.rms_scaling
            or not self.center
            or not self.scale
            or axis is None
            or axis not in (-1, rank - 1)
        ):
            return super().call(inputs)
        outputs = _layer_norm_tf(inputs, self.gamma, self.beta, self.epsilon)
        return keras.ops.cast(outputs, self.compute_dtype)


def layer_normalization(epsilon, fast=True, **kwargs):
    """LayerNorm (section 3.1): stock ``keras.layers.LayerNormalization``, or
    :class:`LayerNormalization` with the closed-form gradient when ``fast`` (same weights, values
    and gradients: ``tests/test_layers.py``)."""
    cls = LayerNormalization if fast else keras.layers.LayerNormalization
    return cls(epsilon=epsilon, **kwargs)
