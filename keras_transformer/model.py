"""The encoder-decoder Transformer (paper section 3, Figure 1), written once.

:class:`TransformerLayers` holds the layers of Figure 1 and runs their flow: embeddings and
positional encodings, N encoder blocks, N decoder blocks, the tied pre-softmax projection. The
same three methods serve every use:

* :func:`build_transformer` calls ``encode`` and ``decode`` on ``keras.Input`` tensors, which
  makes the functional ``keras.Model`` that ``fit``, ``.keras`` files and users see;
* decoding calls ``encode`` once, ``start_cache`` once and ``decode_step`` per position
  (:class:`DecoderCache`: one format, ``(keys, values)`` pairs per layer);
* plots call ``encode_with_scores`` / ``decode_with_scores`` (attention weights of every head).

The flow differs between these only in how each block is called (``block_call`` below), so a
variant of the model (a new attention, another cache) changes one place. Layers of a built or
loaded model are found with :meth:`TransformerLayers.of`; this is the only module that knows the
layers' names. Every method returns a fixed number of values.

Shapes: ``source`` int32 ``[batch, S]``, ``target`` int32 ``[batch, T]`` (0 = padding),
``memory`` ``[batch, S, d_model]``, logits float32 ``[batch, T, vocab]``.
"""

from __future__ import annotations

from typing import NamedTuple

import keras
from keras import ops

from keras_transformer.config import TransformerConfig
from keras_transformer.layers import (
    DecoderBlock,
    EncoderBlock,
    PaddingMask,
    PositionalEncoding,
    TokenEmbedding,
    dropout_layer,
)
from keras_transformer.layers.local_attention import next_position
from keras_transformer.precision import cast_model  # noqa: F401  (also public here)

__all__ = [
    "DecoderCache",
    "TransformerLayers",
    "attention_weights",
    "build_transformer",
    "cast_model",
    "model_dims",
]


class DecoderCache(NamedTuple):
    """What a decoding step needs besides the new tokens.

    ``self_attention``: per decoder layer, ``(keys, values)`` ``[batch, h, length, d_k or d_v]``
    of the earlier target positions (growing, or preallocated for XLA); with
    ``attention_window=r``, ``(keys, values, positions)`` of the last r positions only
    (``[batch, h, r, d_k or d_v]`` and int32 ``[batch, r]``, -1 at empty slots): a fixed size,
    however long the output. ``cross_attention``: per layer, the encoder-decoder
    ``(keys, values)`` ``[batch, h, S, d_k or d_v]``, fixed. ``source_mask``: ``[batch, S]``
    boolean, True at real source tokens. Both have one row per sentence instead of per
    hypothesis when made by ``start_cache(share_cross=True)``.
    ``projections``: per layer, the self-attention's Q/K/V kernels side by side, with biases
    (``DecoderBlock.step_projection``), made once per search; ``()`` entries: at every step.
    """

    self_attention: tuple
    cross_attention: tuple
    source_mask: object
    projections: tuple = ()


def _call(layer, *args, **kwargs):
    """``layer(*args, **kwargs)`` without the keyword arguments that are None (so the functional
    graph records the same calls as a plain ``layer(x)``)."""
    return layer(*args, **{key: value for key, value in kwargs.items() if value is not None})


class TransformerLayers:
    """The layers of Figure 1 and their flow (see the module docstring).

    Example:

    >>> model = build_transformer(TransformerConfig.tiny(vocab_size=100))
    >>> layers = TransformerLayers.of(model)
    >>> source = keras.ops.convert_to_tensor([[5, 6, 7, 3], [8, 9, 3, 0]], "int32")
    >>> target = keras.ops.convert_to_tensor([[2, 11, 12], [2, 13, 0]], "int32")
    >>> memory, source_mask = layers.encode(source)
    >>> logits = layers.decode(target, memory, source_mask)
    >>> tuple(memory.shape), tuple(logits.shape)
    ((2, 4, 32), (2, 3, 100))
    >>> whole = model({"source": source, "target": target})  # the same computation
    >>> bool(keras.ops.all(keras.ops.isclose(logits, whole, atol=1e-5)))
    True
    """

    # The names of the functional model's layers (also those of .keras files already written).
    SHARED_EMBEDDING = "shared_embedding"
    SOURCE_EMBEDDING, TARGET_EMBEDDING = "source_embedding", "target_embedding"
    SOURCE_MASK = "source_padding_mask"
    ENCODER_BLOCK, DECODER_BLOCK = "encoder_block_{}", "decoder_block_{}"  # as side() names them

    def __init__(
        self,
        *,
        source_embedding,
        target_embedding,
        source_padding_mask,
        positional,
        dropout,
        encoder_blocks,
        decoder_blocks,
        final_norms,
    ):
        self.source_embedding = source_embedding
        self.target_embedding = target_embedding
        self.source_padding_mask = source_padding_mask
        self.encoder_positional, self.decoder_positional = positional
        self.encoder_dropout, self.decoder_dropout = dropout
        self.encoder_blocks = tuple(encoder_blocks)
        self.decoder_blocks = tuple(decoder_blocks)
        self.encoder_norm, self.decoder_norm = final_norms  # pre-norm only, else None

    @classmethod
    def create(cls, config: TransformerConfig) -> TransformerLayers:
        """New layers for ``config``, the blocks built (explicitly, in Figure 1's order, so that
        a seed gives the same initial weights and dropout streams as it always did)."""
        fast = config.fast_kernels
        # Section 3.4: one matrix for both embeddings and the pre-softmax projection when shared.
        names = (
            [cls.SHARED_EMBEDDING]
            if config.shared_embeddings
            else [cls.SOURCE_EMBEDDING, cls.TARGET_EMBEDDING]
        )
        sizes = [config.source_vocab_size, config.target_vocab_size]
        embeddings = [TokenEmbedding(size, config.d_model, name=n) for n, size in zip(names, sizes)]
        source, target = embeddings[0], embeddings[-1]
        block_args = dict(
            num_heads=config.num_heads,
            d_ff=config.d_ff,
            dropout=config.dropout,
            attention_dropout=config.attention_dropout,
            norm=config.norm,
            layer_norm_epsilon=config.layer_norm_epsilon,
            fast=fast,
            key_dim=config.key_dim,
            value_dim=config.value_dim,
            attention_window=config.attention_window,
        )
        shape = (None, None, config.d_model)

        def side(name, block_class):
            """Positional encoding, dropout, N blocks and (pre-norm) a final norm of one side."""
            initializer = "glorot_uniform"
            if config.positional_stddev is not None:
                initializer = keras.initializers.RandomNormal(stddev=config.positional_stddev)
            positional = PositionalEncoding(
                config.max_positions,
                config.positional,
                embeddings_initializer=initializer,
                name=f"{name}_positional_encoding",
            )
            dropout = dropout_layer(config.dropout, fast, name=f"{name}_dropout")
            blocks = []
            for i in range(config.num_layers):
                blocks.append(block_class(**block_args, name=f"{name}_block_{i}"))
                blocks[-1].build(shape, shape)
            norm = None
            if config.norm == "pre":
                norm = keras.layers.LayerNormalization(
                    epsilon=config.layer_norm_epsilon, name=f"{name}_norm"
                )
            return positional, dropout, blocks, norm

        mask = PaddingMask(name=cls.SOURCE_MASK)
        encoder = side("encoder", EncoderBlock)
        decoder = side("decoder", DecoderBlock)
        return cls(
            source_embedding=source,
            target_embedding=target,
            source_padding_mask=mask,
            positional=(encoder[0], decoder[0]),
            dropout=(encoder[1], decoder[1]),
            encoder_blocks=encoder[2],
            decoder_blocks=decoder[2],
            final_norms=(encoder[3], decoder[3]),
        )

    @classmethod
    def of(cls, model: keras.Model) -> TransformerLayers:
        """The layers of a model from :func:`build_transformer` (or loaded from ``.keras``)."""
        names = {layer.name for layer in model.layers}

        def find(name):
            return model.get_layer(name) if name in names else None

        def blocks(pattern):
            found = []
            while pattern.format(len(found)) in names:
                found.append(model.get_layer(pattern.format(len(found))))
            return found

        shared = find(cls.SHARED_EMBEDDING)
        if shared is None and find(cls.SOURCE_EMBEDDING) is None:
            raise ValueError(
                f"{model.name!r} is not a model from build_transformer: it has no "
                f"layer {cls.SHARED_EMBEDDING!r} or {cls.SOURCE_EMBEDDING!r}"
            )
        return cls(
            source_embedding=shared or find(cls.SOURCE_EMBEDDING),
            target_embedding=shared or find(cls.TARGET_EMBEDDING),
            source_padding_mask=find(cls.SOURCE_MASK),
            positional=[find(f"{side}_positional_encoding") for side in ("encoder", "decoder")],
            dropout=[find(f"{side}_dropout") for side in ("encoder", "decoder")],
            encoder_blocks=blocks(cls.ENCODER_BLOCK),
            decoder_blocks=blocks(cls.DECODER_BLOCK),
            final_norms=[find("encoder_norm"), find("decoder_norm")],
        )

    @property
    def dims(self) -> dict:
        """The model's sizes: see :func:`model_dims`."""
        attention = self.decoder_blocks[0].self_attention

        def positions(layer):  # learned tables have a fixed number of rows; sinusoids none
            return layer.max_positions if layer.kind == "learned" else None

        return dict(
            d_model=int(attention.d_model),
            num_heads=int(attention.num_heads),
            key_dim=int(attention.key_dim),
            value_dim=int(attention.value_dim),
            attention_window=attention.attention_window,  # r of every self-attention
            num_layers=len(self.decoder_blocks),
            source_vocab_size=int(self.source_embedding.vocab_size),
            target_vocab_size=int(self.target_embedding.vocab_size),
            positional=self.encoder_positional.kind,
            max_positions=int(self.encoder_positional.max_positions),
            max_source_positions=positions(self.encoder_positional),
            max_target_positions=positions(self.decoder_positional),
            norm=self.decoder_blocks[0].norm,  # "post" (section 3.1) or "pre"
            layer_norm_epsilon=self.decoder_blocks[0].layer_norm_epsilon,
            dtype_policy=self.decoder_blocks[0].dtype_policy.name,
            compute_dtype=self.decoder_blocks[0].compute_dtype,
        )

    def export_weights(self) -> dict:
        """The weights by role, for converters (``inference/ctranslate2.py``), so that none
        reads a layer's inside or finds one by name. The Keras variables, in this structure::

            {"embeddings": {"source": [V, d], "target": [V, d]} (the same variable when
             shared, section 3.4), "scale_embeddings": bool, "activation": "relu",
             "positions": {"encoder": table or None, "decoder": ...} (learned tables; None:
             sinusoids of section 3.5), "final_norms": {"encoder": (gamma, beta) or None, ...},
             "encoder": [{"self_attention": ..., "self_attention_norm": (gamma, beta),
                          "feed_forward": ..., "feed_forward_norm": (gamma, beta)}, ...],
             "decoder": [{... and "cross_attention", "cross_attention_norm"}, ...]}

        with attention and feed-forward weights as their layers' ``projection_weights()``.
        """

        def norm(layer):
            return None if layer is None else (layer.gamma, layer.beta)

        def block(b, cross):
            weights = {
                "self_attention": b.self_attention.projection_weights(),
                "self_attention_norm": norm(b.self_attention_norm),
                "feed_forward": b.feed_forward.projection_weights(),
                "feed_forward_norm": norm(b.feed_forward_norm),
            }
            if cross:
                weights["cross_attention"] = b.cross_attention.projection_weights()
                weights["cross_attention_norm"] = norm(b.cross_attention_norm)
            return weights

        def table(layer):
            return layer.position_embeddings if layer.kind == "learned" else None

        return {
            "embeddings": {
                "source": self.source_embedding.embeddings,
                "target": self.target_embedding.embeddings,
            },
            "scale_embeddings": bool(self.source_embedding.scale),
            "activation": keras.activations.serialize(
                self.encoder_blocks[0].feed_forward.activation
            ),
            "positions": {
                "encoder": table(self.encoder_positional),
                "decoder": table(self.decoder_positional),
            },
            "final_norms": {"encoder": norm(self.encoder_norm), "decoder": norm(self.decoder_norm)},
            "encoder": [block(b, cross=False) for b in self.encoder_blocks],
            "decoder": [block(b, cross=True) for b in self.decoder_blocks],
        }

    # ------------------------------------------------------------------ the flow, once
    def _encoder(self, source, training, block_call):
        """Section 3.1 encoder: ``(memory, source_mask, [extra of each block])``."""
        mask = self.source_padding_mask(source)
        # Sections 3.4, 3.5, 5.4: embeddings * sqrt(d_model) + positional encodings, dropout.
        x = self.encoder_positional(self.source_embedding(source))
        x = _call(self.encoder_dropout, x, training=training)
        extras = []
        for block in self.encoder_blocks:
            x, extra = block_call(block, x, mask)
            extras.append(extra)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return x, mask, extras

    def _decoder(self, target, training, block_call, offset=None):
        """Section 3.1 decoder up to the logits (section 3.4): ``(logits, [extra of each
        block])``. ``offset``: the position of ``target[:, 0]`` when decoding step by step."""
        y = _call(self.decoder_positional, self.target_embedding(target), offset=offset)
        y = _call(self.decoder_dropout, y, training=training)
        extras = []
        for i, block in enumerate(self.decoder_blocks):
            y, extra = block_call(i, block, y)
            extras.append(extra)
        if self.decoder_norm is not None:
            y = self.decoder_norm(y)
        return self.target_embedding(y, reverse=True), extras

    # ------------------------------------------------------------------ public calls
    def encode(self, source, training=None):
        """``(memory [batch, S, d_model], source_mask [batch, S])``."""

        def block_call(block, x, mask):
            return _call(block, x, padding_mask=mask, training=training), None

        memory, mask, _ = self._encoder(source, training, block_call)
        return memory, mask

    def decode(self, target, memory, source_mask, training=None):
        """Logits ``[batch, T, vocab]`` (float32) of the whole target, future positions masked."""

        def block_call(i, block, y):
            return _call(
                block, y, memory, encoder_padding_mask=source_mask, training=training
            ), None

        return self._decoder(target, training, block_call)[0]

    def encode_with_scores(self, source):
        """``(memory, source_mask, weights)``: ``weights`` per layer ``[batch, h, S, S]``."""

        def block_call(block, x, mask):
            return block.call_with_scores(x, mask, training=False)

        return self._encoder(source, False, block_call)

    def decode_with_scores(self, target, memory, source_mask):
        """``(logits, weights)``: per layer ``(self [batch, h, T, T], cross [batch, h, T, S])``."""

        def block_call(i, block, y):
            return block.call_with_scores(y, memory, source_mask, training=False)

        return self._decoder(target, False, block_call)

    def start_cache(self, memory, source_mask, length=0, repeat=1, share_cross=False):
        """The cache before the first decoding step, for ``repeat`` rows per sentence (row
        ``b * repeat + j`` is copy ``j`` of sentence ``b``: the hypotheses of beam search).

        Encoder-decoder keys/values are computed once per sentence, then (and the source mask)
        repeated ``repeat`` times, or with ``share_cross`` kept once per sentence (then pass
        ``beams=repeat`` to :meth:`decode_step`). Self-attention caches are empty (``length=0``,
        grown one position per step) or zeros of ``length`` positions (preallocated, for XLA);
        with an ``attention_window`` r empty slots whatever ``length`` is.
        """
        cross = [block.compute_cross_cache(memory) for block in self.decoder_blocks]
        batch = ops.shape(source_mask)[0] * repeat
        if repeat > 1 and not share_cross:
            cross = [tuple(ops.repeat(t, repeat, axis=0) for t in pair) for pair in cross]
            source_mask = ops.repeat(source_mask, repeat, axis=0)
        empty = [block.empty_self_cache(batch, length) for block in self.decoder_blocks]
        fused = tuple(block.step_projection() for block in self.decoder_blocks)  # () if plain
        return DecoderCache(tuple(empty), tuple(cross), source_mask, fused)

    def decode_step(self, target, cache: DecoderCache, cache_update_index=None, beams=1):
        """Logits ``[batch, new, vocab]`` of new target positions ``target`` ``[batch, new]``
        (usually one) after those in ``cache``; returns ``(logits, cache)`` with the new
        positions' keys/values added: appended, or written at ``cache_update_index`` in a
        preallocated cache. ``beams=g``: the cache's cross-attention keys/values and source
        mask hold one row per ``g`` rows of ``target`` (``start_cache(share_cross=True)``)."""
        offset = cache_update_index
        if offset is None:  # after the positions in the cache (growing, or a rolling window)
            offset = next_position(cache.self_attention[0])

        def block_call(i, block, y):
            return block.call_cached(
                y,
                cache.self_attention[i],
                cache.cross_attention[i],
                cache.source_mask,
                cache_update_index,
                training=False,
                beams=beams,
                projection=cache.projections[i] if cache.projections else (),
            )

        logits, self_attention = self._decoder(target, False, block_call, offset=offset)
        return logits, cache._replace(self_attention=tuple(self_attention))


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
    layers = TransformerLayers.create(config)
    memory, source_mask = layers.encode(source)
    logits = layers.decode(target, memory, source_mask)
    return keras.Model(inputs={"source": source, "target": target}, outputs=logits, name=name)


def model_dims(model: keras.Model) -> dict:
    """Sizes of a model from :func:`build_transformer`: ``d_model``, ``num_heads``,
    ``key_dim`` (d_k), ``value_dim`` (d_v), ``attention_window`` (r, or None for full
    self-attention), ``num_layers``, ``source_vocab_size``, ``target_vocab_size``,
    ``positional``, ``max_positions`` (positional table size), ``max_source_positions`` /
    ``max_target_positions`` (the learned tables' rows, None for sinusoids), ``norm``
    (``"post"`` or ``"pre"``), ``layer_norm_epsilon``, ``dtype_policy``, ``compute_dtype``.

    Example:

    >>> dims = model_dims(build_transformer(TransformerConfig.tiny(vocab_size=100)))
    >>> dims["d_model"], dims["num_layers"], dims["target_vocab_size"]
    (32, 2, 100)
    """
    return TransformerLayers.of(model).dims


def attention_weights(model: keras.Model, source, target) -> dict:
    """Attention weights of every layer and head, from the model's own attention layers.

    Returns a dict of numpy arrays: ``"encoder"`` ``[layers, batch, heads, S, S]``,
    ``"decoder_self"`` ``[layers, batch, heads, T, T]`` and ``"decoder_cross"``
    ``[layers, batch, heads, T, S]``; each row sums to 1 over unmasked keys.
    """
    layers = TransformerLayers.of(model)
    source = ops.convert_to_tensor(source, "int32")
    target = ops.convert_to_tensor(target, "int32")
    memory, mask, encoder = layers.encode_with_scores(source)
    _, decoder = layers.decode_with_scores(target, memory, mask)
    to_numpy = lambda ws: ops.convert_to_numpy(ops.stack(ws))
    return {
        "encoder": to_numpy(encoder),
        "decoder_self": to_numpy([w[0] for w in decoder]),
        "decoder_cross": to_numpy([w[1] for w in decoder]),
    }
