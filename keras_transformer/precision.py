"""Running a trained model under another Keras dtype policy (e.g. bfloat16 for serving)."""

from __future__ import annotations

import keras


def cast_model(model: keras.Model, dtype) -> keras.Model:
    """A copy of ``model`` that computes under the Keras dtype policy ``dtype``.

    For inference: ``"bfloat16"`` (weights stored in bfloat16 too) or ``"mixed_bfloat16"``
    (timings in ``results/benchmarks.md``); ``"float32"`` undoes it. The layers' configs get the
    new policy (the integer inputs keep theirs), the weights are copied and cast. Logits stay
    float32, as :class:`TokenEmbedding` returns them.

    Example:

    >>> from keras_transformer import TransformerConfig, build_transformer, model_dims
    >>> model = build_transformer(TransformerConfig.tiny(vocab_size=100))
    >>> model_dims(cast_model(model, "bfloat16"))["compute_dtype"]
    'bfloat16'
    """
    policy = keras.dtype_policies.get(dtype)
    config = model.get_config()
    for layer in config["layers"]:
        if layer["class_name"] != "InputLayer":
            layer["config"]["dtype"] = keras.dtype_policies.serialize(policy)
    copy = model.__class__.from_config(config)
    copy.set_weights(model.get_weights())
    return copy
