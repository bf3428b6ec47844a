# Paper section 5.3 (Optimizer), equation (3): warmup then inverse-square-root learning rate.
"""The Transformer learning-rate schedule and the paper's Adam optimizer.

Equation (3) of "Attention Is All You Need"::

    lrate = d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5)

The rate grows linearly for ``warmup_steps`` updates, peaks at
``d_model^-0.5 * warmup_steps^-0.5`` at ``step_num == warmup_steps`` and then decays with the
inverse square root of the step.

Step counting: Keras calls a schedule with the optimizer's raw update counter, which is 0 while the
first update is computed. ``step_num`` in equation (3) starts at 1 (at 0 the rate would be 0 and the
first update would be wasted), so the schedule uses ``step_num = counter + 1``.

Gradient accumulation: with ``gradient_accumulation_steps=k`` a Keras 3 optimizer increments its raw
counter (``optimizer._iterations``) on every micro-batch and hands *that* counter to the schedule,
while ``optimizer.iterations`` (the public property) is ``raw // k``, the number of real updates.
The real update happens on the micro-batch where ``raw % k == k - 1``. Pass the same ``k`` to
:class:`TransformerSchedule` so that it maps ``raw`` to ``step_num = raw // k + 1``: the n-th real
update then uses ``lrate(n)``, exactly as without accumulation. :func:`transformer_optimizer` does
this for you.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.optimizers import Adam, FusedAdam

__all__ = ["TransformerSchedule", "transformer_optimizer"]


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """``scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)``, ``step = counter + 1``.

    Args:
        d_model: model width (the paper's base model uses 512).
        warmup_steps: number of linear-warmup updates (4000 in the paper).
        scale: constant factor applied to the whole rate (1.0 in the paper).
        gradient_accumulation_steps: ``None`` or the optimizer's ``gradient_accumulation_steps``;
            the schedule then counts real updates, not micro-batches (see the module docstring).

    Example:

    >>> schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    >>> round(float(schedule(0)), 10)  # optimizer.iterations == 0 -> step_num 1
    1.747e-07
    >>> round(float(schedule(3999)), 8)  # step_num 4000: the peak, 512**-0.5 * 4000**-0.5
    0.00069877
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0, gradient_accumulation_steps=None):
        if isinstance(d_model, bool) or not isinstance(d_model, (int, float)) or d_model <= 0:
            raise ValueError(
                f"TransformerSchedule: d_model must be a positive number, got {d_model!r}"
            )
        if (
            isinstance(warmup_steps, bool)
            or not isinstance(warmup_steps, (int, float))
            or warmup_steps <= 0
        ):
            raise ValueError(
                f"TransformerSchedule: warmup_steps must be a positive number, got {warmup_steps!r}"
            )
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0:
            raise ValueError(f"TransformerSchedule: scale must be a positive number, got {scale!r}")
        if gradient_accumulation_steps is not None and (
            isinstance(gradient_accumulation_steps, bool)
            or not isinstance(gradient_accumulation_steps, int)
            or gradient_accumulation_steps < 1
        ):
            raise ValueError(
                "TransformerSchedule: gradient_accumulation_steps must be None or an "
                f"integer >= 1, got {gradient_accumulation_steps!r}"
            )
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale
        self.gradient_accumulation_steps = gradient_accumulation_steps

    def __call__(self, step):
        counter = ops.convert_to_tensor(step)
        if self.gradient_accumulation_steps and self.gradient_accumulation_steps > 1:
            # Integer division of the integer counter: the k micro-batches of an update share one
            # step.
            counter = ops.floor_divide(counter, self.gradient_accumulation_steps)
        step_num = ops.cast(counter, "float32") + 1.0
        warmup = ops.cast(self.warmup_steps, "float32")
        rate = ops.minimum(ops.rsqrt(step_num), step_num * ops.power(warmup, -1.5))
        return ops.cast(self.scale * float(self.d_model) ** -0.5, "float32") * rate

    def peak_learning_rate(self) -> float:
        """The largest rate, reached at ``step_num == warmup_steps``."""
        return self.scale * float(self.d_model) ** -0.5 * float(self.warmup_steps) ** -0.5

    def get_config(self):
        return {
            "d_model": self.d_model,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def transformer_optimizer(
    d_model, warmup_steps=4000, scale=1.0, fused=True, **adam_kwargs
) -> keras.optimizers.Adam:
    """Adam(beta_1=0.9, beta_2=0.98, epsilon=1e-9) with :class:`TransformerSchedule` (section 5.3).

    With ``fused=False`` this is stock Keras,
    ``keras.optimizers.Adam(learning_rate=TransformerSchedule(d_model, ...), beta_1=0.9,
    beta_2=0.98, epsilon=1e-9)`` (as ``keras_transformer.optimizers.Adam``, whose only change is
    gradient accumulation that works under ``tf.distribute``: ``keras_transformer.accumulation``).
    With ``fused=True`` (default) it is the same optimizer as a
    :class:`keras_transformer.optimizers.FusedAdam`, whose per-variable update is TF's fused
    ``ResourceApplyAdam`` kernel (same variables, configs and results). Other keyword arguments go
    to the optimizer (they may override the betas or epsilon, e.g. ``clipnorm``,
    ``global_clipnorm`` or ``gradient_accumulation_steps``). ``gradient_accumulation_steps`` is also
    given to the schedule, so that the rate follows equation (3) in real updates.

    Example:

    >>> plain = transformer_optimizer(512, fused=False)
    >>> type(plain).__name__, plain.beta_1, plain.beta_2, plain.epsilon
    ('Adam', 0.9, 0.98, 1e-09)
    >>> optimizer = transformer_optimizer(512, gradient_accumulation_steps=4)
    >>> type(optimizer).__name__, optimizer.gradient_accumulation_steps
    ('FusedAdam', 4)
    """
    if "learning_rate" in adam_kwargs:
        raise TypeError(
            "transformer_optimizer sets learning_rate itself (TransformerSchedule); "
            "use `scale` to change the rate"
        )
    accumulation = adam_kwargs.get("gradient_accumulation_steps")
    kwargs = dict(beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    kwargs.update(adam_kwargs)
    schedule = TransformerSchedule(
        d_model,
        warmup_steps=warmup_steps,
        scale=scale,
        gradient_accumulation_steps=accumulation or None,
    )
    if not fused:  # keras.optimizers.Adam, with accumulation that works under a strategy
        return Adam(learning_rate=schedule, **kwargs)
    return FusedAdam(learning_rate=schedule, **kwargs)
