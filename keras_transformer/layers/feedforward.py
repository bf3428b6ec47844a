"""Position-wise feed-forward network FFN(x) = max(0, x W1 + b1) W2 + b2 (paper section 3.3)."""

import keras
from keras import ops

from keras_transformer.layers.projection import project_rows


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionwiseFeedForward(keras.layers.Layer):
    """Two dense layers with a ReLU between, applied at every position alike (equation (2)).

    The weights live in two ``keras.layers.Dense`` sub-layers (``inner``, ``outer``), so
    checkpoints and configs look like Keras' own. ``fast=False`` calls them as they are
    (``outer(inner(x))``, the stock form); ``fast=True`` (default) flattens the positions once and
    runs both matmuls and bias adds on ``[batch * length, d]`` rows with the same kernels (a LoRA
    update included: ``Dense.kernel`` carries it); quantized sub-layers always run through
    ``Dense``. Both give the same outputs (``tests/test_layers.py``).

    Example:

    >>> ffn = PositionwiseFeedForward(d_ff=2048)
    >>> tuple(ffn(keras.ops.zeros((2, 5, 512))).shape)
    (2, 5, 512)
    """

    def __init__(
        self, d_ff, activation="relu", kernel_initializer="glorot_uniform", fast=True, **kwargs
    ):
        super().__init__(**kwargs)
        self.fast = bool(fast)
        self.d_ff = int(d_ff)
        self.activation = keras.activations.get(activation)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, inputs_shape):
        d_model = inputs_shape[-1]
        self.inner = keras.layers.Dense(
            self.d_ff,
            activation=self.activation,
            name="inner",
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
        )
        self.outer = keras.layers.Dense(
            d_model,
            name="outer",
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
        )
        self.inner.build(inputs_shape)
        self.outer.build((*inputs_shape[:-1], self.d_ff))

    def _float_kernels(self):
        """True when both sub-layers hold float kernels (not quantized)."""
        return all(
            getattr(layer, "quantization_mode", None) is None for layer in (self.inner, self.outer)
        )

    def call(self, inputs):
        if not (self.fast and self._float_kernels()):  # equation (2) through the Dense layers
            return self.outer(self.inner(inputs))
        hidden = self.activation(project_rows(inputs, self.inner.kernel, self.inner.bias))
        outputs = project_rows(hidden, self.outer.kernel, self.outer.bias)
        return ops.reshape(outputs, ops.shape(inputs))

    def projection_weights(self) -> dict:
        """Equation (2)'s weights by role, for converters: ``{"inner": (W_1 [d_model, d_ff],
        b_1), "outer": (W_2 [d_ff, d_model], b_2)}`` (the layer's variables)."""
        return {
            "inner": (self.inner.kernel, self.inner.bias),
            "outer": (self.outer.kernel, self.outer.bias),
        }

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_ff": self.d_ff,
                "fast": self.fast,
                "activation": keras.activations.serialize(self.activation),
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
