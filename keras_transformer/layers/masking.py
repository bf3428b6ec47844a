"""Padding masks computed from token ids (id 0 is padding), as a layer of the functional graph,
and the score given to masked keys."""

import keras
from keras import ops

# Given to masked scores before the softmax: "-inf" that stays finite in float32, so a row whose
# keys are all masked gives a uniform (not NaN) distribution. Scores are always float32 here.
MASK_VALUE = -1e9


@keras.saving.register_keras_serializable(package="keras_transformer")
class PaddingMask(keras.layers.Layer):
    """Boolean ``[batch, length]``: True at real tokens, False at the padding id.

    Example:

    >>> PaddingMask()(keras.ops.convert_to_tensor([[5, 7, 0]])).numpy().tolist()
    [[True, True, False]]
    """

    def __init__(self, padding_id=0, **kwargs):
        super().__init__(**kwargs)
        self.padding_id = int(padding_id)

    def call(self, token_ids):
        return ops.not_equal(token_ids, self.padding_id)

    def compute_output_spec(self, token_ids):
        return keras.KerasTensor(token_ids.shape, dtype="bool")

    def get_config(self):
        return {**super().get_config(), "padding_id": self.padding_id}
