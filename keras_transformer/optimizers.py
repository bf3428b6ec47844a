# Paper section 5.3 (Optimizer): Adam with beta_1 = 0.9, beta_2 = 0.98, epsilon = 1e-9.
"""``FusedAdam``: Keras' Adam whose per-variable update is TF's fused ``ResourceApplyAdam`` kernel.

The paper's optimizer is stock Keras::

    keras.optimizers.Adam(learning_rate=TransformerSchedule(d_model),
                          beta_1=0.9, beta_2=0.98, epsilon=1e-9)

and that is what ``transformer_optimizer(d_model, fused=False)`` returns. ``FusedAdam``, what
``transformer_optimizer(d_model)`` (``fused=True``) returns, is the same optimizer with a faster
update: Keras 3's ``Adam.update_step`` builds each variable's update from about fifteen separate
ops (casts, powers, two ``assign_add``, sqrt, divide, ``assign_sub``), and on a CPU with a hundred
variables these small ops cost more than the arithmetic. TF ships the same update as one
multithreaded kernel per variable (``tf.raw_ops.ResourceApplyAdam``), with exactly Keras' formula::

    m <- m + (g - m) (1 - beta_1)         v <- v + (g^2 - v) (1 - beta_2)
    var <- var - lr sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + epsilon)

``FusedAdam`` uses that kernel for dense gradients on the TensorFlow backend and Keras' own update
everywhere else (sparse ``IndexedSlices`` gradients, ``amsgrad``, other backends). Variables, slots,
configs and checkpoints are those of ``keras.optimizers.Adam``; ``tests/test_schedules.py`` checks
that both give the same weights and slots over several steps.
"""

import keras
from keras import ops

from keras_transformer.accumulation import DistributedAccumulation


@keras.saving.register_keras_serializable(package="keras_transformer")
class Adam(DistributedAccumulation, keras.optimizers.Adam):
    """``keras.optimizers.Adam``, with gradient accumulation that works under ``tf.distribute``
    (``keras_transformer.accumulation``); otherwise Keras' own code throughout."""


@keras.saving.register_keras_serializable(package="keras_transformer")
class FusedAdam(DistributedAccumulation, keras.optimizers.Adam):
    """``keras.optimizers.Adam`` with TF's fused update kernel (same arguments, same results).

    Example:

    >>> optimizer = FusedAdam(learning_rate=1e-3, beta_2=0.98, epsilon=1e-9)
    >>> variable = keras.Variable([1.0, 2.0])
    >>> optimizer.apply([keras.ops.convert_to_tensor([0.5, -0.5])], [variable])
    >>> [round(float(v), 4) for v in variable.numpy()]  # the first step moves each weight by lr
    [0.999, 2.001]
    """

    def update_step(self, gradient, variable, learning_rate):
        if not self._can_fuse(gradient):
            return super().update_step(gradient, variable, learning_rate)  # Keras' Adam
        self._fused_update_step(gradient, variable, learning_rate)

    def _can_fuse(self, gradient):
        """Dense gradient, no ``amsgrad``, TensorFlow backend: the cases the fused kernel covers."""
        import tensorflow as tf

        return (
            keras.backend.backend() == "tensorflow"
            and not self.amsgrad
            and not isinstance(gradient, tf.IndexedSlices)
        )

    def _fused_update_step(self, gradient, variable, learning_rate):
        """Keras' Adam update (the module docstring's formula) as one ``ResourceApplyAdam``."""
        import tensorflow as tf

        index = self._get_variable_index(variable)
        target = variable.value if isinstance(variable, keras.Variable) else variable
        dtype = target.dtype
        step = ops.cast(self.iterations + 1, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=target.handle,
            m=self._momentums[index].value.handle,
            v=self._velocities[index].value.handle,
            beta1_power=ops.power(ops.cast(self.beta_1, dtype), step),
            beta2_power=ops.power(ops.cast(self.beta_2, dtype), step),
            lr=ops.cast(learning_rate, dtype),
            beta1=ops.cast(self.beta_1, dtype),
            beta2=ops.cast(self.beta_2, dtype),
            epsilon=ops.cast(self.epsilon, dtype),
            grad=ops.cast(gradient, dtype),
            use_locking=False,
            use_nesterov=False,
        )
