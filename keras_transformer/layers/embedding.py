"""Token embeddings scaled by sqrt(d_model), shared with the pre-softmax projection (3.4)."""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class TokenEmbedding(keras.layers.Layer):
    """One ``[vocab_size, d_model]`` matrix E used two ways (section 3.4).

    The model shares one such layer between the two embeddings and the pre-softmax projection
    (``TransformerConfig.shared_embeddings``), or has one per side.

    * ``layer(ids)`` looks tokens up and multiplies by sqrt(d_model): ``E[ids] * sqrt(d_model)``.
    * ``layer(x, reverse=True)`` gives the pre-softmax logits ``x E^T``, always float32 so the
      softmax and loss stay accurate under a mixed-precision policy.

    Example:

    >>> embedding = TokenEmbedding(vocab_size=8000, d_model=256)
    >>> x = embedding(keras.ops.ones((2, 7), dtype="int32"))
    >>> tuple(embedding(x, reverse=True).shape)
    (2, 7, 8000)
    """

    def __init__(self, vocab_size, d_model, embeddings_initializer=None, scale=True, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = int(vocab_size)
        self.d_model = int(d_model)
        self.scale = bool(scale)
        # N(0, d_model^-0.5) keeps E[ids] * sqrt(d_model) at unit scale, as tied embeddings need.
        if embeddings_initializer is None:
            embeddings_initializer = keras.initializers.RandomNormal(stddev=self.d_model**-0.5)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, inputs_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.d_model),
            initializer=self.embeddings_initializer,
        )

    def call(self, inputs, reverse=False):
        if reverse:
            kernel = ops.cast(self.embeddings, inputs.dtype)
            return ops.cast(ops.matmul(inputs, ops.transpose(kernel)), "float32")
        vectors = ops.take(self.embeddings, ops.cast(inputs, "int32"), axis=0)
        vectors = ops.cast(vectors, self.compute_dtype)
        if self.scale:
            vectors = vectors * ops.cast(math.sqrt(self.d_model), self.compute_dtype)
        return vectors

    def compute_output_spec(self, inputs, reverse=False):
        if reverse:
            return keras.KerasTensor((*inputs.shape[:-1], self.vocab_size), dtype="float32")
        return keras.KerasTensor((*inputs.shape, self.d_model), dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "d_model": self.d_model,
                "scale": self.scale,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class SharedEmbedding(TokenEmbedding):
    """The earlier name of :class:`TokenEmbedding`, kept so that ``.keras`` files written before
    the rename load (they name ``keras_transformer>SharedEmbedding``)."""
