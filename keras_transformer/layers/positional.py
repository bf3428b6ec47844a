"""Sinusoidal (and, as an option, learned) positional encodings (paper section 3.5)."""

import math

import keras
import numpy as np
from keras import ops


def sinusoidal_encoding(length, d_model, offset=0):
    """The ``[length, d_model]`` float32 table of section 3.5, rows ``offset .. offset+length-1``.

    PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)):
    even dimensions hold sines and odd ones cosines, interleaved as the paper writes them.
    """
    positions = ops.cast(ops.arange(length) + ops.cast(offset, "int32"), "float32")[:, None]
    two_i = np.arange(0, d_model, 2, dtype="float32")
    inverse_frequency = np.exp(-math.log(10000.0) * two_i / d_model)  # 1 / 10000^(2i/d_model)
    angles = positions * inverse_frequency[None, :]  # [length, d_model / 2]
    # Interleave: dimension 2i gets sin(angle_i), 2i+1 gets cos(angle_i).
    table = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)
    return ops.reshape(table, (length, -1))[:, :d_model]


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionalEncoding(keras.layers.Layer):
    """Adds position information: ``inputs + PE[offset : offset + length]`` (section 3.5).

    ``kind="sinusoidal"`` (default) uses the fixed sinusoids of :func:`sinusoidal_encoding`;
    ``kind="learned"`` learns a ``[max_positions, d_model]`` table instead (the paper's Table 3,
    row E, found both equal). ``offset`` (int or scalar tensor) is the position of the first input
    row, for decoding one step at a time. ``max_positions`` is the number of rows of the learned
    table (sinusoids have no limit).

    Example:

    >>> layer = PositionalEncoding(max_positions=128)
    >>> tuple(layer(keras.ops.zeros((2, 10, 512))).shape)
    (2, 10, 512)
    """

    def __init__(
        self,
        max_positions=512,
        kind="sinusoidal",
        embeddings_initializer="glorot_uniform",
        **kwargs,
    ):
        # ``max_length``: the name in .keras files written before the rename.
        max_positions = kwargs.pop("max_length", max_positions)
        super().__init__(**kwargs)
        if kind not in ("sinusoidal", "learned"):
            raise ValueError(f"PositionalEncoding: kind={kind!r} must be 'sinusoidal' or 'learned'")
        self.max_positions = int(max_positions)
        self.kind = kind
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, inputs_shape):
        self.d_model = inputs_shape[-1]
        if self.kind == "learned":
            self.position_embeddings = self.add_weight(
                name="position_embeddings",
                shape=(self.max_positions, self.d_model),
                initializer=self.embeddings_initializer,
            )

    def encoding(self, length, offset=0):
        """The ``[length, d_model]`` table this layer adds, in float32."""
        if self.kind == "sinusoidal":
            return sinusoidal_encoding(length, self.d_model, offset)
        start = ops.cast(offset, "int32")
        return ops.cast(
            ops.slice(self.position_embeddings, [start, 0], [length, self.d_model]), "float32"
        )

    def call(self, inputs, offset=0):
        length = ops.shape(inputs)[1]
        return inputs + ops.cast(self.encoding(length, offset), inputs.dtype)[None]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_positions": self.max_positions,
                "kind": self.kind,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            }
        )
        return config
