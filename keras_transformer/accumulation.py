"""Gradient accumulation under ``tf.distribute``: the Keras 3 optimizer step that works there.

Keras 3.15's ``BaseOptimizer._backend_apply_gradients`` accumulates gradients with
``ops.cond(is_update_step, update, accumulate)`` and runs the update (``_backend_update_step``,
which calls ``merge_call``) inside that ``cond``. Under any ``tf.distribute`` strategy the training
step runs in a replica context, where ``merge_call`` cannot be called while a ``cond`` branch is
being traced: ``fit`` stops at its first step with "`merge_call` called while defining a new graph
or a tf.function" (``MirroredStrategy`` on one CPU included, which ``train`` uses by default).

:class:`DistributedAccumulation` keeps Keras' arithmetic (update with the mean of the last
``gradient_accumulation_steps`` micro-batch gradients, then reset the accumulators; otherwise add
to them) but orders the work the way ``tf.distribute`` needs: gradients are all-reduced in the
replica context, then one ``merge_call`` enters the cross-replica context, and each variable's
``cond`` runs inside ``strategy.extended.update`` for that variable, where no ``merge_call`` is
needed. Outside a strategy, or without accumulation, Keras' own method runs unchanged.
``tests/test_training_settings.py`` trains through ``train`` with accumulation and checks that
two micro-batches give the update of the batch that holds both.
"""

from __future__ import annotations

import tensorflow as tf
from keras import ops

__all__ = ["DistributedAccumulation"]


class DistributedAccumulation:
    """Mixin for a Keras optimizer (before it in the bases): accumulation under a strategy."""

    def _backend_apply_gradients(self, grads, trainable_variables):
        steps = self.gradient_accumulation_steps
        in_replica = tf.distribute.has_strategy() and not tf.distribute.in_cross_replica_context()
        if not steps or not in_replica:
            return super()._backend_apply_gradients(grads, trainable_variables)
        if self.weight_decay:  # Keras applies it with a merge_call of its own
            raise ValueError("weight_decay with gradient accumulation under a strategy")
        is_update = ops.equal((self._iterations + 1) % steps, 0)
        accumulators = [
            self._accumulated_gradients[self._get_variable_index(v)] for v in trainable_variables
        ]
        tf_variables = [v.value for v in trainable_variables]  # the strategy's variables
        pairs = self._all_reduce_sum_gradients(list(zip(grads, tf_variables)))
        learning_rate = self.learning_rate

        def in_cross_replica_context(distribution, pairs):
            for (grad, variable), accumulator in zip(pairs, accumulators):
                distribution.extended.update(
                    variable,
                    self._accumulate_or_update,
                    args=(grad, accumulator, learning_rate, is_update),
                    group=False,
                )

        tf.__internal__.distribute.interim.maybe_merge_call(
            in_cross_replica_context, self._distribution_strategy, pairs
        )

    def _accumulate_or_update(self, variable, grad, accumulator, learning_rate, is_update):
        """On one device: the update with the mean gradient, or one more micro-batch summed."""
        total = grad + accumulator.value

        def update():
            (mean,) = self._clip_gradients([total / self.gradient_accumulation_steps])
            self.update_step(mean, variable, learning_rate)
            accumulator.assign(tf.zeros_like(total))
            return tf.constant(True)

        def accumulate():
            accumulator.assign(total)
            return tf.constant(False)

        return tf.cond(is_update, update, accumulate)
