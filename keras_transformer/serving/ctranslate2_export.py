"""Our Transformer as a CTranslate2 model: the spec built from the Keras weights with numpy.

CTranslate2 (the OpenNMT inference engine) runs a ``TransformerSpec`` of its own; this module
fills one from a model of :func:`keras_transformer.build_transformer` through
:class:`~keras_transformer.model.TransformerLayers` (never by layer names):

* ``pre_norm`` from the blocks' ``norm`` (post-norm, the paper's section 3.1, by default) and
  their layer-norm epsilon in the model's config (CTranslate2's default is 1e-5, ours 1e-6);
* linear weights ``[out, in]`` (Keras kernels transposed); self-attention Q, K, V fused into one
  linear, encoder-decoder attention Q alone and K, V fused; CTranslate2 scales queries by
  ``1 / sqrt(d_k)`` as equation (1) does;
* the embedding matrix for both embeddings and the pre-softmax projection when shared (section
  3.4), ``scale_embeddings`` for the ``sqrt(d_model)`` factor;
* the positional table given explicitly (CTranslate2's own sinusoids are OpenNMT's concatenated
  sin/cos layout, not the paper's interleaved one of section 3.5);
* the vocabulary as SentencePiece pieces in id order, our reserved ids included (``<pad>`` 0,
  ``<unk>`` 1, ``<s>`` 2 = the decoder's start token, ``</s>`` 3 = EOS, appended to every source
  by the engine: ``add_source_eos``).

The folder also holds the SentencePiece model (``sentencepiece.model``) and the serving settings
(``translator.json``: beam size, alpha, length limits), so it is self-contained:
:class:`keras_transformer.serving.CTranslate2Translator` and ``keras-transformer translate
--model DIR`` read it.
"""

from __future__ import annotations

import json

import keras
import numpy as np

from keras_transformer.layers.positional import sinusoidal_encoding
from keras_transformer.model import TransformerLayers
from keras_transformer.serving.atomic import atomic_folder
from keras_transformer.serving.formats import CTRANSLATE2_SETTINGS as SETTINGS_FILE
from keras_transformer.tokenization import BOS_ID, EOS_ID, PAD_ID, UNK_ID

__all__ = ["QUANTIZATIONS", "SETTINGS_FILE", "SPM_FILE", "ctranslate2_spec", "export_ctranslate2"]

QUANTIZATIONS = ("float32", "int16", "int8")
SPM_FILE = "sentencepiece.model"


def _np(variable):
    return np.asarray(keras.ops.convert_to_numpy(variable), dtype=np.float32)


def _linear(spec, kernel, bias):
    """A ``[in, out]`` Keras kernel (any trailing shape) as CTranslate2's ``[out, in]``."""
    kernel = _np(kernel)
    spec.weight = np.ascontiguousarray(kernel.reshape(kernel.shape[0], -1).T)
    if bias is not None:
        spec.bias = _np(bias).reshape(-1)


def _fused(spec, layers):
    """Several linears of one input as one (outputs concatenated)."""
    spec.weight = np.concatenate([layer.weight for layer in layers])
    spec.bias = np.concatenate([layer.bias for layer in layers])


def _norm(spec, norm):
    spec.gamma, spec.beta = _np(norm.gamma), _np(norm.beta)


def _attention(spec, attention, norm, self_attention):
    from ctranslate2.specs import common_spec

    q, k, v = (common_spec.LinearSpec() for _ in range(3))
    for linear, name in ((q, "query"), (k, "key"), (v, "value")):
        bias = getattr(attention, f"{name}_bias")
        _linear(linear, getattr(attention, f"{name}_kernel"), bias)
        if bias is None:
            linear.bias = np.zeros(linear.weight.shape[0], np.float32)
    if self_attention:
        _fused(spec.linear[0], [q, k, v])
    else:
        spec.linear[0].weight, spec.linear[0].bias = q.weight, q.bias
        _fused(spec.linear[1], [k, v])
    output = _np(attention.output_kernel)
    spec.linear[-1].weight = np.ascontiguousarray(output.reshape(-1, output.shape[-1]).T)
    if attention.output_bias is not None:
        spec.linear[-1].bias = _np(attention.output_bias)
    _norm(spec.layer_norm, norm)


def _feed_forward(spec, block):
    ffn = block.feed_forward
    if keras.activations.serialize(ffn.activation) != "relu":
        raise ValueError("ctranslate2_spec: only the ReLU feed-forward network is converted")
    _linear(spec.linear_0, ffn.inner.kernel, ffn.inner.bias)
    _linear(spec.linear_1, ffn.outer.kernel, ffn.outer.bias)
    _norm(spec.layer_norm, block.feed_forward_norm)


def _positions(layer, rows, d_model):
    if layer.kind == "learned":
        return _np(layer.position_embeddings)
    return np.asarray(keras.ops.convert_to_numpy(sinusoidal_encoding(rows, d_model)), np.float32)


def _embeddings(spec, embedding, positional, rows, d_model, final_norm):
    spec.scale_embeddings = bool(embedding.scale)
    spec.position_encodings.encodings = _positions(positional, rows, d_model)
    if final_norm is not None:
        _norm(spec.layer_norm, final_norm)


def _refuse_what_the_spec_cannot_hold(dims):
    """CTranslate2's ``sliding_window`` only trims a decoder's key/value cache (it has no band of
    distance r in the encoder's self-attention, nor our r previous positions and itself), and
    the ``from_config`` spec written here has heads of d_model / h: refuse the others."""
    if dims["attention_window"] is not None:
        raise ValueError(
            f"ctranslate2_spec: the model has attention_window={dims['attention_window']} "
            "(local restricted attention), which CTranslate2's TransformerSpec cannot express; "
            "export it as a SavedModel (keras-transformer export) instead"
        )
    if dims["key_dim"] * dims["num_heads"] != dims["d_model"]:
        raise ValueError(
            f"ctranslate2_spec: the model has key_dim={dims['key_dim']} with "
            f"num_heads={dims['num_heads']} and d_model={dims['d_model']} (not d_model / h); "
            "this converter writes heads of d_model / num_heads only: export it as a "
            "SavedModel (keras-transformer export) instead"
        )


def ctranslate2_spec(model: keras.Model, vocabulary: list[str], positions: int):
    """The ``ctranslate2.specs.TransformerSpec`` of ``model``, validated, not yet quantized.

    ``vocabulary``: the pieces of the shared vocabulary in id order. ``positions``: rows of the
    sinusoidal table to write (the longest source or target the engine may see).
    """
    from ctranslate2.specs import common_spec, transformer_spec

    layers = TransformerLayers.of(model)
    dims = layers.dims
    _refuse_what_the_spec_cannot_hold(dims)
    if (
        dims["source_vocab_size"] != dims["target_vocab_size"]
        or len(vocabulary) != dims["target_vocab_size"]
    ):
        raise ValueError(
            f"ctranslate2_spec: the vocabulary has {len(vocabulary)} pieces, the model "
            f"{dims['source_vocab_size']} source and {dims['target_vocab_size']} target ids "
            "(a shared vocabulary is needed)"
        )
    first = layers.decoder_blocks[0]
    spec = transformer_spec.TransformerSpec.from_config(
        (len(layers.encoder_blocks), len(layers.decoder_blocks)),
        dims["num_heads"],
        pre_norm=first.norm == "pre",
        activation=common_spec.Activation.RELU,
        alignment_layer=-1,  # return_attention: the last layer's cross-attention, all heads
        alignment_heads=dims["num_heads"],
    )
    d_model = dims["d_model"]
    source_matrix = _np(layers.source_embedding.embeddings)
    target_matrix = (
        source_matrix
        if layers.target_embedding is layers.source_embedding
        else _np(layers.target_embedding.embeddings)
    )
    spec.encoder.embeddings[0].weight = source_matrix
    spec.decoder.embeddings.weight = target_matrix
    spec.decoder.projection.weight = target_matrix  # section 3.4: the tied pre-softmax matrix
    for side, embedding, positional, norm in (
        (spec.encoder, layers.source_embedding, layers.encoder_positional, layers.encoder_norm),
        (spec.decoder, layers.target_embedding, layers.decoder_positional, layers.decoder_norm),
    ):
        _embeddings(side, embedding, positional, positions, d_model, norm)
    for layer_spec, block in zip(spec.encoder.layer, layers.encoder_blocks, strict=True):
        _attention(layer_spec.self_attention, block.self_attention, block.self_attention_norm, True)
        _feed_forward(layer_spec.ffn, block)
    for layer_spec, block in zip(spec.decoder.layer, layers.decoder_blocks, strict=True):
        _attention(layer_spec.self_attention, block.self_attention, block.self_attention_norm, True)
        _attention(layer_spec.attention, block.cross_attention, block.cross_attention_norm, False)
        _feed_forward(layer_spec.ffn, block)
    spec.register_source_vocabulary(vocabulary)
    spec.register_target_vocabulary(vocabulary)
    config = spec.config
    config.layer_norm_epsilon = float(first.layer_norm_epsilon)
    config.unk_token, config.bos_token, config.eos_token = (
        vocabulary[i] for i in (UNK_ID, BOS_ID, EOS_ID)
    )
    config.decoder_start_token = vocabulary[BOS_ID]
    config.add_source_eos = True
    spec.validate()
    return spec


def _settings(
    dims,
    beam_size,
    alpha,
    max_extra_length,
    max_output_length,
    max_source_length,
    max_input_chars,
    max_batch_tokens,
    quantization,
):
    if max_source_length is None:
        max_source_length = dims["max_positions"]
    elif dims["max_source_positions"] is not None:
        max_source_length = min(int(max_source_length), dims["max_source_positions"])
    if int(max_source_length) < 2:
        raise ValueError(
            f"max_source_length={max_source_length} leaves no room for a token and EOS"
        )
    for name, value, low in (
        ("beam_size", beam_size, 1),
        ("max_extra_length", max_extra_length, 0),
        ("max_batch_tokens", 1 if max_batch_tokens is None else max_batch_tokens, 1),
    ):
        if int(value) < low:
            raise ValueError(f"export_ctranslate2: {name}={value} must be >= {low}")
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization={quantization!r}: choose one of {', '.join(QUANTIZATIONS)}")
    return dict(
        format="ctranslate2",
        beam_size=int(beam_size),
        alpha=float(alpha),
        max_extra_length=int(max_extra_length),
        max_output_length=None if max_output_length is None else int(max_output_length),
        max_source_length=int(max_source_length),
        max_input_chars=int(max_input_chars or 32 * int(max_source_length)),
        max_batch_tokens=None if max_batch_tokens is None else int(max_batch_tokens),
        max_target_positions=dims["max_target_positions"],
        quantization=quantization,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
    )


def export_ctranslate2(
    model: keras.Model,
    tokenizer,
    path,
    quantization: str = "float32",
    beam_size: int = 4,
    alpha: float = 0.6,
    max_extra_length: int = 50,
    max_output_length: int | None = None,
    max_source_length: int | None = None,
    max_input_chars: int | None = None,
    max_batch_tokens: int | None = 4096,
) -> str:
    """Writes a CTranslate2 model folder of ``model`` to ``path`` and returns the path.

    ``tokenizer``: the run's :class:`~keras_transformer.tokenization.SubwordTokenizer` (shared
    vocabulary). ``quantization``: the stored weight type, ``float32``, ``int16`` or ``int8``
    (CTranslate2 can still compute in another type when loading). The other keywords are
    :func:`keras_transformer.export_translator`'s and become the folder's serving defaults. The
    folder is written beside ``path`` and renamed into place (see ``serving/atomic.py``).

    Example:

    >>> export_ctranslate2(model, tokenizer, "saved_models/en_de_ct2", quantization="int8")
    'saved_models/en_de_ct2'
    """
    dims = TransformerLayers.of(model).dims
    settings = _settings(
        dims,
        beam_size,
        alpha,
        max_extra_length,
        max_output_length,
        max_source_length,
        max_input_chars,
        max_batch_tokens,
        quantization,
    )
    vocabulary = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    rows = settings["max_source_length"] + settings["max_extra_length"] + 1
    spec = ctranslate2_spec(model, vocabulary, rows)
    spec.optimize(quantization=quantization)
    with atomic_folder(path) as folder:
        spec.save(str(folder))
        (folder / SPM_FILE).write_bytes(tokenizer.model_proto)
        (folder / SETTINGS_FILE).write_text(json.dumps({"translator": settings}, indent=2) + "\n")
    return str(path)
