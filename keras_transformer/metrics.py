# Paper section 6 reports perplexity per token ("per-wordpiece"); accuracy and counts for logs.
"""Token-level metrics over real target tokens: ``MaskedAccuracy``, ``Perplexity``, ``TokenCount``.

They share :mod:`keras_transformer.losses`' per-token kernels (plain TF ops, or the same
functions compiled by XLA with ``jit_compile=True``) and its padding convention: label
``pad_id`` (0) marks padding, which never counts.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.losses import (
    _argmax_hits,
    _kernel,
    _labels_and_mask,
    _token_weights,
    token_cross_entropy,
)

__all__ = ["MaskedAccuracy", "Perplexity", "TokenCount"]


class _TokenRatio(keras.metrics.Metric):
    """Base for metrics of the form ``sum(numerator over real tokens) / number of real tokens``.

    Both sums are ``on_read`` variables aggregated with SUM, so under ``tf.distribute`` the value
    Keras reads at the end of an epoch (cross-replica) is the global ratio, while per-step logs
    average the replicas' ratios.
    """

    def __init__(self, pad_id=0, name=None, dtype=None, jit_compile=True):
        super().__init__(name=name, dtype=dtype or "float32")
        self.pad_id = int(pad_id)
        # False: the plain TF ops; True: the same per-token function compiled by XLA.
        self.jit_compile = bool(jit_compile)
        self.numerator = self.add_variable(
            shape=(), initializer="zeros", dtype="float32", name="numerator"
        )
        self.count = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="count")

    def _per_token(self, labels, y_pred):
        raise NotImplementedError

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = ops.convert_to_tensor(y_pred)
        if not y_pred.dtype.is_floating:  # floating logits keep their dtype (bf16: no f32 copy)
            y_pred = ops.cast(y_pred, "float32")
        labels, mask = _labels_and_mask(y_true, y_pred, self.pad_id)
        weights = _token_weights(mask, sample_weight)
        self.numerator.assign_add(ops.sum(self._per_token(labels, y_pred) * weights))
        self.count.assign_add(ops.sum(weights))

    def reset_state(self):
        self.numerator.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        return {
            "name": self.name,
            "dtype": self.dtype,
            "pad_id": self.pad_id,
            "jit_compile": self.jit_compile,
        }


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedAccuracy(_TokenRatio):
    """Fraction of real (label != ``pad_id``) target tokens whose argmax prediction is right.

    Example:

    >>> import numpy as np
    >>> metric = MaskedAccuracy()
    >>> logits = np.eye(4)[[[1, 2, 3]]] * 5.0  # predicts 1, 2, 3
    >>> metric.update_state(np.array([[1, 3, 0]]), logits)  # one right, one wrong, one pad
    >>> float(metric.result())
    0.5
    """

    def __init__(self, pad_id=0, name="masked_accuracy", dtype=None, jit_compile=True):
        super().__init__(pad_id=pad_id, name=name, dtype=dtype, jit_compile=jit_compile)

    def _per_token(self, labels, y_pred):
        # tf.argmax, not keras.ops.argmax: the latter first rewrites -0.0 entries with a where
        # over the whole [B, T, V] tensor (four extra passes over it).
        return _kernel(_argmax_hits, self.jit_compile)(labels, y_pred)

    def result(self):
        return ops.divide_no_nan(self.numerator, self.count)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Perplexity(_TokenRatio):
    """``exp`` of the mean *unsmoothed* cross-entropy over real target tokens.

    Example:

    >>> import numpy as np
    >>> metric = Perplexity()
    >>> metric.update_state(np.array([[3, 1, 0]]), np.zeros((1, 3, 10)))  # uniform over 10
    >>> round(float(metric.result()), 4)
    10.0
    """

    def __init__(self, from_logits=True, pad_id=0, name="perplexity", dtype=None, jit_compile=True):
        super().__init__(pad_id=pad_id, name=name, dtype=dtype, jit_compile=jit_compile)
        self.from_logits = bool(from_logits)

    def update_state(self, y_true, y_pred, sample_weight=None):
        losses, mask = token_cross_entropy(
            y_true,
            y_pred,
            0.0,
            self.from_logits,
            self.pad_id,
            fused=False,
            jit_compile=self.jit_compile,
        )
        weights = _token_weights(mask, sample_weight)
        self.numerator.assign_add(ops.sum(losses * weights))
        self.count.assign_add(ops.sum(weights))

    def result(self):
        return ops.exp(ops.divide_no_nan(self.numerator, self.count))

    def get_config(self):
        return {**super().get_config(), "from_logits": self.from_logits}


@keras.saving.register_keras_serializable(package="keras_transformer")
class TokenCount(keras.metrics.Metric):
    """Running number of real (label != ``pad_id``) target tokens, e.g. for tokens per second.

    Under ``tf.distribute`` the per-step value is one replica's count; the end-of-epoch value
    (read cross-replica) is the sum over the local replicas.

    Example:

    >>> import numpy as np
    >>> metric = TokenCount()
    >>> metric.update_state(np.array([[3, 1, 0], [2, 0, 0]]), np.zeros((2, 3, 5)))
    >>> float(metric.result())
    3.0
    """

    def __init__(self, pad_id=0, name="tokens", dtype=None):
        super().__init__(name=name, dtype=dtype or "float32")
        self.pad_id = int(pad_id)
        self.count = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="count")

    def update_state(self, y_true, y_pred=None, sample_weight=None):
        labels = ops.cast(ops.convert_to_tensor(y_true), "int32")
        self.count.assign_add(ops.sum(ops.cast(ops.not_equal(labels, self.pad_id), "float32")))

    def result(self):
        return ops.convert_to_tensor(self.count)

    def reset_state(self):
        self.count.assign(0.0)

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype, "pad_id": self.pad_id}
