# Paper section 5.4 (Regularization, "Label Smoothing"): eps_ls = 0.1; plus token-level metrics.
"""Label-smoothed cross-entropy over real target tokens (the metrics are in ``metrics.py``).

Smoothing convention (Szegedy et al. 2016, the one the paper cites; also Keras'
``CategoricalCrossentropy(label_smoothing=...)``): the target distribution spreads ``eps`` uniformly
over the *whole* vocabulary of size ``V``, the true token included::

    q_k = (1 - eps) * [k == y] + eps / V
    loss = -sum_k q_k log p_k = (1 - eps) * (-log p_y) + eps * mean_k(-log p_k)

Tensor2Tensor instead spreads ``eps`` over the ``V - 1`` wrong tokens and subtracts the entropy of
``q`` so that a perfect model scores 0; both give the same gradients up to a ``V/(V-1)`` rescaling
of ``eps``. Nothing here subtracts that constant, so the smoothed loss never reaches 0; use
:class:`Perplexity` (unsmoothed) to compare models.

Plain and compiled: each per-token computation over the ``[B, T, V]`` logits is written once with
TF's stock ops (``tf.nn.softmax_cross_entropy_with_logits`` against ``q``, the op Keras'
``categorical_crossentropy`` runs on the TensorFlow backend; ``logsumexp(z) - z_y`` for the
metrics; ``argmax``). That plain form is what ``jit_compile=False`` runs. ``jit_compile=True`` (the
default of the loss and of the metrics) runs the very same function compiled by XLA, which fuses the
float32 cast, the one-hot targets, the softmax and the reductions into a few passes, also inside a
model compiled without XLA; it compiles once per ``[B, T]`` shape. ``tests/test_losses.py`` checks
both against the formula above, values and gradients.

Padding: label ``pad_id`` (0) marks padding. Such positions contribute nothing, and the loss of a
batch is ``sum over real tokens / number of real tokens`` whatever the padding. The loss does its
own reduction (it does not use Keras' ``sum_over_batch_size``, which would divide by ``B * T``
including padding) and ignores any Keras mask attached to the logits: the labels decide.

Distribution: under ``tf.distribute`` (``MirroredStrategy``, ``MultiWorkerMirroredStrategy``) each
replica sees part of the global batch. Keras expects a replica's loss to be its share of the global
loss (it sums gradients over replicas and reports ``loss * num_replicas`` averaged over replicas).
With ``cross_replica_normalization=True`` (default) each replica returns
``its token-loss sum / the number of real tokens in the global batch`` (one scalar all-reduce per
step), so training with ``R`` replicas computes exactly the loss and gradients of one device on the
same global batch even when replicas hold different numbers of real tokens. With ``False`` it
returns ``(its own token mean) / R``, Keras' usual convention.

Mixed precision: logits are cast to float32 before any arithmetic.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

__all__ = ["LabelSmoothedCrossEntropy", "token_cross_entropy"]

_REDUCTIONS = ("sum_over_batch_size", "mean", "sum", "none", None)


def _labels_and_mask(y_true, y_pred, pad_id):
    """int32 labels shaped ``y_pred.shape[:-1]``, padding replaced by 0, and a float32 mask."""
    labels = ops.convert_to_tensor(y_true)
    if len(labels.shape) == len(y_pred.shape):  # [B, T, 1] labels
        labels = ops.squeeze(labels, axis=-1)
    labels = ops.cast(labels, "int32")
    real = ops.not_equal(labels, pad_id)
    safe_labels = ops.where(real, labels, ops.zeros_like(labels))
    return safe_labels, ops.cast(real, "float32")


# ------------------------------------------------------------------------ per-token computations
# The plain TF form of each computation; `_kernel(fn, jit_compile=True)` gives its XLA twin.


def _smoothed_softmax_xent(labels, logits, label_smoothing):
    """``-sum_k q_k log p_k`` with ``q_k = (1 - eps) [k == y] + eps / V``, float32.

    TF's softmax cross-entropy kernels compute the loss and its gradient ``softmax(z) - q`` in the
    same pass over ``[B, T, V]``; ``eps = 0`` uses the sparse kernel (no one-hot targets).
    """
    logits = tf.cast(logits, tf.float32)
    vocab = tf.cast(tf.shape(logits)[-1], tf.float32)
    if label_smoothing:
        off = label_smoothing / vocab
        on = 1.0 - label_smoothing + off
        smoothed = tf.one_hot(labels, tf.shape(logits)[-1], on_value=on, off_value=off)
        return tf.nn.softmax_cross_entropy_with_logits(tf.stop_gradient(smoothed), logits)
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)


def _forward_xent(labels, logits):
    """Unsmoothed ``-log p_y = logsumexp(z) - z_y``, for metrics (needs no gradient pass)."""
    logits = tf.cast(logits, tf.float32)
    picked = tf.gather(logits, labels[..., None], batch_dims=len(labels.shape))[..., 0]
    return tf.reduce_logsumexp(logits, axis=-1) - picked


def _argmax_hits(labels, logits):
    """1.0 where ``argmax(logits) == label`` (argmax of bf16 logits needs no float32 copy)."""
    return tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32)


# jit_compile=True: the same three functions, each compiled by XLA (one compilation per shape).
_XLA = {
    fn: tf.function(fn, jit_compile=True, reduce_retracing=True)
    for fn in (_smoothed_softmax_xent, _forward_xent, _argmax_hits)
}


def _kernel(fn, jit_compile):
    """``fn`` itself (plain TF ops) or, with ``jit_compile``, its XLA-compiled twin."""
    return _XLA[fn] if jit_compile else fn


def _smoothed_xent_formula(labels, logits, label_smoothing):
    """The module docstring's ``(1 - eps) (-log p_y) + eps mean_k(-log p_k)``, op by op, float32.

    ``-log p_k = logsumexp(z) - z_k``: neither the softmax nor a one-hot ``[B, T, V]`` is formed.
    """
    logits = ops.cast(logits, "float32")
    log_normalizer = ops.logsumexp(logits, axis=-1)
    picked = ops.squeeze(ops.take_along_axis(logits, labels[..., None], axis=-1), axis=-1)
    nll = log_normalizer - picked
    return (1.0 - label_smoothing) * nll + label_smoothing * (
        log_normalizer - ops.mean(logits, axis=-1)
    )


def _smoothed_xent_from_probabilities(labels, probabilities, label_smoothing):
    """The same formula on probabilities (clipped to ``[epsilon, 1]`` before the log)."""
    probabilities = ops.cast(probabilities, "float32")
    log_probs = ops.log(ops.clip(probabilities, keras.backend.epsilon(), 1.0))
    losses = -ops.squeeze(ops.take_along_axis(log_probs, labels[..., None], axis=-1), axis=-1)
    if label_smoothing:
        losses = (1.0 - label_smoothing) * losses - label_smoothing * ops.mean(log_probs, axis=-1)
    return losses


def _floating_tensor(y_pred):
    if isinstance(y_pred, tf.Variable):  # keras.ops.take_along_axis needs a tensor
        y_pred = tf.convert_to_tensor(y_pred)
    y_pred = ops.convert_to_tensor(y_pred)
    if not y_pred.dtype.is_floating:
        y_pred = ops.cast(y_pred, "float32")
    return y_pred


def token_cross_entropy(
    y_true, y_pred, label_smoothing=0.0, from_logits=True, pad_id=0, fused=True, jit_compile=False
):
    """Per-token smoothed cross-entropy (float32, 0 at padding) and the float32 real-token mask.

    ``fused=True`` uses TF's softmax cross-entropy kernels, which compute the gradient in the same
    pass: the choice for a loss. ``fused=False`` writes the formula out: ``logsumexp(z) - z_y``
    (plus ``eps`` times ``logsumexp(z) - mean(z)``), cheaper when no gradient is needed (metrics).
    ``jit_compile=True`` runs the work over the ``[B, T, V]`` logits as one XLA-compiled function
    (one compilation per shape); the formula with ``eps > 0`` always runs as plain ops.

    Example:

    >>> import numpy as np
    >>> losses, mask = token_cross_entropy(np.array([[2, 0]]), np.zeros((1, 2, 4)))
    >>> [round(float(v), 4) for v in losses[0]], [float(v) for v in mask[0]]
    ([1.3863, 0.0], [1.0, 0.0])
    """
    y_pred = _floating_tensor(y_pred)
    labels, mask = _labels_and_mask(y_true, y_pred, pad_id)
    if not from_logits:
        losses = _smoothed_xent_from_probabilities(labels, y_pred, label_smoothing)
    elif fused:
        xent = _kernel(_smoothed_softmax_xent, jit_compile)
        losses = xent(labels, y_pred, float(label_smoothing))
    elif not label_smoothing:
        losses = _kernel(_forward_xent, jit_compile)(labels, y_pred)
    else:
        losses = _smoothed_xent_formula(labels, y_pred, label_smoothing)
    return losses * mask, mask


def _sum_over_replicas(value):
    """Sums ``value`` over the replicas of the running ``tf.distribute`` step (else a no-op)."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return value
    return context.all_reduce(tf.distribute.ReduceOp.SUM, value)


def _num_replicas():
    context = tf.distribute.get_replica_context()
    return 1 if context is None else context.num_replicas_in_sync


def _token_weights(mask, sample_weight):
    if sample_weight is None:
        return mask
    sample_weight = ops.cast(ops.convert_to_tensor(sample_weight), "float32")
    while len(sample_weight.shape) < len(mask.shape):  # per-sequence weights [B] -> [B, 1]
        sample_weight = ops.expand_dims(sample_weight, axis=-1)
    return mask * sample_weight


@keras.saving.register_keras_serializable(package="keras_transformer")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Label-smoothed sparse cross-entropy, averaged over real (non-padding) target tokens.

    Args:
        label_smoothing: ``eps_ls``; 0.1 in the paper. 0 gives plain sparse cross-entropy.
        from_logits: whether ``y_pred`` holds logits (default) or probabilities.
        pad_id: label id of padding, excluded from the loss and from the token count.
        cross_replica_normalization: divide by the global number of real tokens under
            ``tf.distribute`` (see the module docstring).
        reduction: ``"sum_over_batch_size"`` (or ``"mean"``): sum over real tokens / number of real
            tokens; ``"sum"``: the sum; ``None``/``"none"``: the per-token losses, 0 at padding.
        jit_compile: ``False`` runs TF's softmax cross-entropy kernels as they are (the plain
            form); ``True`` (default) runs the same function compiled by XLA, also inside a model
            compiled without XLA (see the module docstring). Both give the same numbers up to
            float rounding.

    ``sample_weight`` (``[B]`` per sequence or ``[B, T]`` per token) scales each token's loss; the
    divisor stays the number of real tokens.

    Example:

    >>> import numpy as np
    >>> plain = LabelSmoothedCrossEntropy(label_smoothing=0.1, jit_compile=False)  # TF's kernels
    >>> labels = np.array([[5, 6, 0, 0]])  # two real tokens, two padding
    >>> round(float(plain(labels, np.zeros((1, 4, 8)))), 4)  # uniform logits: log(8)
    2.0794
    >>> loss = LabelSmoothedCrossEntropy(label_smoothing=0.1)  # default: the same, XLA-compiled
    >>> round(float(loss(labels, np.zeros((1, 4, 8)))), 4)
    2.0794
    """

    def __init__(
        self,
        label_smoothing=0.1,
        from_logits=True,
        pad_id=0,
        cross_replica_normalization=True,
        reduction="sum_over_batch_size",
        name="label_smoothed_cross_entropy",
        dtype=None,
        jit_compile=True,
    ):
        if reduction not in _REDUCTIONS:
            raise ValueError(
                f"LabelSmoothedCrossEntropy: reduction must be one of {_REDUCTIONS}, "
                f"got {reduction!r}"
            )
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(
                "LabelSmoothedCrossEntropy: label_smoothing must be in [0, 1), "
                f"got {label_smoothing!r}"
            )
        # Computation is always float32; `dtype` is accepted for Keras compatibility only.
        super().__init__(name=name, reduction=reduction, dtype="float32")
        self.label_smoothing = float(label_smoothing)
        self.from_logits = bool(from_logits)
        self.pad_id = int(pad_id)
        self.cross_replica_normalization = bool(cross_replica_normalization)
        self.jit_compile = bool(jit_compile)

    def _token_losses(self, y_true, y_pred):
        return token_cross_entropy(
            y_true,
            y_pred,
            self.label_smoothing,
            self.from_logits,
            self.pad_id,
            jit_compile=self.jit_compile,
        )

    def call(self, y_true, y_pred):
        """Per-token losses, float32, 0 at padding."""
        return self._token_losses(y_true, y_pred)[0]

    def __call__(self, y_true, y_pred, sample_weight=None):
        with keras.name_scope(self.name):
            losses, mask = self._token_losses(y_true, y_pred)
            weighted = losses * _token_weights(mask, sample_weight)
            if self.reduction in (None, "none"):
                return weighted
            total = ops.sum(weighted)
            if self.reduction == "sum":
                return total
            count = ops.sum(mask)
            if self.cross_replica_normalization:
                # This replica's share of the global token mean; shares add up to the global mean.
                return ops.divide_no_nan(total, _sum_over_replicas(ops.stop_gradient(count)))
            return ops.divide_no_nan(total, count) / float(_num_replicas())

    def get_config(self):
        return {
            "name": self.name,
            "reduction": self.reduction,
            "label_smoothing": self.label_smoothing,
            "from_logits": self.from_logits,
            "pad_id": self.pad_id,
            "cross_replica_normalization": self.cross_replica_normalization,
            "jit_compile": self.jit_compile,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
