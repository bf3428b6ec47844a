"""The encoder-decoder Transformer (paper section 3, Figure 1) as a functional Keras model."""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.config import TransformerConfig
from keras_transformer.layers import (DecoderBlock, EncoderBlock, FastDropout, PaddingMask,
                                      PositionalEncoding, SharedEmbedding)


def build_transformer(config: TransformerConfig, name: str = "transformer") -> keras.Model:
    """Builds the functional model ``{"source", "target"} -> logits``.

    Inputs are int32 ``[batch, length]`` token ids with 0 as padding; ``target`` is the decoder
    input shifted right (begin-of-sentence first). The output is float32 logits
    ``[batch, target_length, target_vocab_size]`` (float32 under mixed precision too).

    Example:

    >>> model = build_transformer(TransformerConfig.tiny(vocab_size=100))
    >>> ids = keras.ops.ones((2, 7), "int32")
    >>> tuple(model({"source": ids, "target": ids[:, :5]}).shape)
    (2, 5, 100)
    """
    config.validate()
    source = keras.Input(shape=(None,), dtype="int32", name="source")
    target = keras.Input(shape=(None,), dtype="int32", name="target")

    # Section 3.4: one matrix for both embeddings and the pre-softmax projection when shared.
    if config.shared_embeddings:
        source_embedding = target_embedding = SharedEmbedding(
            config.source_vocab_size, config.d_model, name="shared_embedding")
    else:
        source_embedding = SharedEmbedding(config.source_vocab_size, config.d_model,
                                           name="source_embedding")
        target_embedding = SharedEmbedding(config.target_vocab_size, config.d_model,
                                           name="target_embedding")

    block_args = dict(num_heads=config.num_heads, d_ff=config.d_ff, dropout=config.dropout,
                      attention_dropout=config.attention_dropout, norm=config.norm,
                      layer_norm_epsilon=config.layer_norm_epsilon)

    def embed(ids, embedding, prefix):
        # Section 3.5 and 5.4: positional encodings added, then dropout on the sum.
        x = embedding(ids)
        x = PositionalEncoding(config.max_length, config.positional,
                               name=f"{prefix}_positional_encoding")(x)
        return FastDropout(config.dropout, name=f"{prefix}_dropout")(x)

    source_mask = PaddingMask(name="source_padding_mask")(source)
    x = embed(source, source_embedding, "encoder")
    for i in range(config.num_layers):
        x = EncoderBlock(**block_args, name=f"encoder_block_{i}")(x, padding_mask=source_mask)
    if config.norm == "pre":
        x = keras.layers.LayerNormalization(epsilon=config.layer_norm_epsilon, name="encoder_norm")(x)
    encoder_output = x

    y = embed(target, target_embedding, "decoder")
    for i in range(config.num_layers):
        y = DecoderBlock(**block_args, name=f"decoder_block_{i}")(
            y, encoder_output, encoder_padding_mask=source_mask)
    if config.norm == "pre":
        y = keras.layers.LayerNormalization(epsilon=config.layer_norm_epsilon, name="decoder_norm")(y)
    logits = target_embedding(y, reverse=True)
    return keras.Model(inputs={"source": source, "target": target}, outputs=logits, name=name)


class TransformerParts:
    """The layers of a model from :func:`build_transformer`, callable piece by piece.

    Decoding runs the encoder once and the decoder one step at a time with key/value caches;
    attention plots need the weights of every head. Both reuse the model's own layers (found
    by name, so this also works on a model loaded from ``.keras``).

    Example:

    >>> model = build_transformer(TransformerConfig.tiny(vocab_size=100))
    >>> parts = TransformerParts(model)
    >>> source_ids = keras.ops.convert_to_tensor([[5, 6, 7, 3], [8, 9, 3, 0]], "int32")
    >>> target_ids = keras.ops.convert_to_tensor([[2, 11, 12], [2, 13, 0]], "int32")
    >>> memory, source_mask = parts.encode(source_ids)
    >>> logits = parts.decode(target_ids, memory, source_mask)
    >>> tuple(memory.shape), tuple(logits.shape)
    ((2, 4, 32), (2, 3, 100))
    >>> whole = model({"source": source_ids, "target": target_ids})  # the same computation
    >>> bool(keras.ops.all(keras.ops.isclose(logits, whole, atol=1e-5)))
    True
    """

    def __init__(self, model: keras.Model):
        self.model = model
        names = {layer.name for layer in model.layers}
        if "shared_embedding" in names:
            self.source_embedding = self.target_embedding = model.get_layer("shared_embedding")
        else:
            self.source_embedding = model.get_layer("source_embedding")
            self.target_embedding = model.get_layer("target_embedding")
        self.source_padding_mask = model.get_layer("source_padding_mask")
        self.encoder_positional = model.get_layer("encoder_positional_encoding")
        self.decoder_positional = model.get_layer("decoder_positional_encoding")
        self.encoder_dropout = model.get_layer("encoder_dropout")
        self.decoder_dropout = model.get_layer("decoder_dropout")
        self.encoder_blocks = sorted((l for l in model.layers if l.name.startswith("encoder_block_")),
                                     key=lambda l: int(l.name.rsplit("_", 1)[1]))
        self.decoder_blocks = sorted((l for l in model.layers if l.name.startswith("decoder_block_")),
                                     key=lambda l: int(l.name.rsplit("_", 1)[1]))
        self.encoder_norm = model.get_layer("encoder_norm") if "encoder_norm" in names else None
        self.decoder_norm = model.get_layer("decoder_norm") if "decoder_norm" in names else None
        attention = self.decoder_blocks[0].self_attention
        self.num_layers = len(self.decoder_blocks)
        self.num_heads = attention.num_heads
        self.key_dim = attention.key_dim
        self.d_model = attention.d_model
        self.vocab_size = self.target_embedding.vocab_size

    def encode(self, source, training=False, return_attention_scores=False):
        """Returns ``(encoder_output, source_padding_mask)`` (and the per-layer weights if asked)."""
        mask = self.source_padding_mask(source)
        x = self.encoder_dropout(self.encoder_positional(self.source_embedding(source)),
                                 training=training)
        weights = []
        for block in self.encoder_blocks:
            x = block(x, padding_mask=mask, return_attention_scores=return_attention_scores,
                      training=training)
            if return_attention_scores:
                x, w = x
                weights.append(w)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return (x, mask, weights) if return_attention_scores else (x, mask)

    def cross_attention_caches(self, encoder_output):
        """Encoder-decoder keys/values of every decoder layer, computed once per sentence."""
        return [block.cross_attention.compute_key_value(encoder_output)
                for block in self.decoder_blocks]

    def empty_self_attention_caches(self, batch_size, max_length=0, dtype=None):
        """Zeroed ``[batch, 2, h, max_length, d_k]`` self-attention caches, one per decoder layer.

        ``max_length=0`` gives empty caches to grow with ``decode(..., append_to_cache=True)``.
        """
        dtype = dtype or self.decoder_blocks[0].compute_dtype
        shape = (batch_size, 2, self.num_heads, max_length, self.key_dim)
        return [ops.zeros(shape, dtype) for _ in self.decoder_blocks]

    def decode(self, target, encoder_output, source_padding_mask, self_attention_caches=None,
               cross_attention_caches=None, cache_update_index=None, append_to_cache=False,
               training=False, return_attention_scores=False):
        """Runs the decoder on ``target`` ids; returns float32 logits.

        With caches, ``target`` holds the new positions only (usually one), written at
        ``cache_update_index`` in preallocated caches or, with ``append_to_cache=True``, appended
        to caches that hold exactly the earlier positions; the result is
        ``(logits, new_self_attention_caches)``.
        With ``return_attention_scores`` the per-layer ``(self, cross)`` weights come last.
        """
        offset = 0 if cache_update_index is None else cache_update_index
        if append_to_cache:  # positions so far = cache length
            offset = ops.shape(self_attention_caches[0])[3]
        y = self.decoder_dropout(
            self.decoder_positional(self.target_embedding(target), offset=offset), training=training)
        new_caches, weights = [], []
        for i, block in enumerate(self.decoder_blocks):
            outputs = block(
                y, encoder_output, encoder_padding_mask=source_padding_mask,
                self_attention_cache=None if self_attention_caches is None else self_attention_caches[i],
                cross_attention_cache=None if cross_attention_caches is None else cross_attention_caches[i],
                cache_update_index=cache_update_index, append_to_cache=append_to_cache,
                return_attention_scores=return_attention_scores, training=training)
            if not isinstance(outputs, tuple):
                outputs = (outputs,)
            y = outputs[0]
            if self_attention_caches is not None:
                new_caches.append(outputs[1])
            if return_attention_scores:
                weights.append(outputs[-1])
        if self.decoder_norm is not None:
            y = self.decoder_norm(y)
        logits = self.target_embedding(y, reverse=True)
        result = (logits,)
        if self_attention_caches is not None:
            result += (new_caches,)
        if return_attention_scores:
            result += (weights,)
        return result[0] if len(result) == 1 else result


def cast_model(model: keras.Model, dtype) -> keras.Model:
    """A copy of ``model`` that computes under the Keras dtype policy ``dtype``.

    For inference: ``"bfloat16"`` (weights stored in bfloat16 too) or ``"mixed_bfloat16"`` run the
    matmuls about twice as fast on CPUs with AVX512-BF16 and on recent GPUs (on the 2-core CPU
    of ``results/benchmarks.md`` beam search at batch 64 gained ~1.2x, batch 1 lost a little);
    ``"float32"`` undoes it. The layers' configs get the new policy (the integer inputs keep
    theirs), the weights are copied and cast. Logits stay float32, as :class:`SharedEmbedding` returns them.

    Example:

    >>> model = build_transformer(TransformerConfig.tiny(vocab_size=100))
    >>> fast = cast_model(model, "bfloat16")
    >>> fast.get_layer("decoder_block_0").compute_dtype
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


def attention_weights(model: keras.Model, source, target) -> dict:
    """Attention weights of every layer and head, from the model's own attention layers.

    Returns a dict of numpy arrays: ``"encoder"`` ``[layers, batch, heads, S, S]``,
    ``"decoder_self"`` ``[layers, batch, heads, T, T]`` and ``"decoder_cross"``
    ``[layers, batch, heads, T, S]``; each row sums to 1 over unmasked keys.
    """
    parts = TransformerParts(model)
    source = ops.convert_to_tensor(source, "int32")
    target = ops.convert_to_tensor(target, "int32")
    memory, mask, encoder = parts.encode(source, return_attention_scores=True)
    _, decoder = parts.decode(target, memory, mask, return_attention_scores=True)
    to_numpy = lambda ws: ops.convert_to_numpy(ops.stack(ws))  # noqa: E731
    return {
        "encoder": to_numpy(encoder),
        "decoder_self": to_numpy([w[0] for w in decoder]),
        "decoder_cross": to_numpy([w[1] for w in decoder]),
    }
