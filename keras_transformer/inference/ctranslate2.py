"""The CTranslate2 export: our Transformer as a CTranslate2 model, and translating with it.

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
:class:`CTranslate2Translator` and ``keras-transformer translate
--model DIR`` read it.

Translating with a folder
-------------------------

:class:`CTranslate2Translator` cleans, cuts and tokenizes each line as the SavedModel does
(``inference/text.py``), decodes with the folder's settings (beam 4 unless exported otherwise) and
detokenizes. Differences from the SavedModel, all in the search, none in the model:

* **length penalty**: CTranslate2 divides a hypothesis' log-probability by ``len ** alpha``, our
  beam search by GNMT's ``((5 + len) / 6) ** alpha``. With ``length_penalty="gnmt"`` (default)
  the engine searches with its own penalty, returns its ``k`` finished hypotheses and they are
  re-ranked by the GNMT score, so the choice among them is ours; the hypotheses the beam keeps on
  the way can still differ (``results/serving.md`` measures how often, and the BLEU cost).
  ``length_penalty="ctranslate2"`` takes the engine's best as it is.
* **maximum length**: one limit per engine call (the batch's largest ``source + max_extra_length``),
  each output then cut to its own limit: exact for greedy search (a prefix of the longer search),
  for beam search only when no hypothesis of the batch reaches its limit.

Greedy search (``beam_size=1``) gives the SavedModel's tokens (``tests/test_ctranslate2.py``).
Scores are the SavedModel's: ``log P(y) / ((5 + |y|) / 6) ** alpha`` (``|y|`` counts EOS).
"""

from __future__ import annotations

import json
import pathlib
from typing import NamedTuple

import keras
import numpy as np

from keras_transformer.inference import text as text_io
from keras_transformer.inference.batching import length_sorted_batches, map_batches
from keras_transformer.inference.formats import CTRANSLATE2_SETTINGS as SETTINGS_FILE
from keras_transformer.inference.settings import (
    SAMPLING_FIELDS,
    SearchSettings,
    ServingSettings,
    record,
    sampling_request,
    split_settings,
)
from keras_transformer.layers.positional import sinusoidal_encoding
from keras_transformer.model import TransformerLayers
from keras_transformer.text.files import atomic_folder
from keras_transformer.text.tokenizer import BOS_ID, BOS_PIECE, EOS_ID, PAD_PIECE, UNK_ID

__all__ = [
    "SETTINGS_FILE",
    "SPM_FILE",
    "CTranslate2Translator",
    "Hypothesis",
    "ctranslate2_spec",
    "export_ctranslate2",
]

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
    gamma, beta = norm
    spec.gamma, spec.beta = _np(gamma), _np(beta)


def _attention(spec, weights, norm, self_attention):
    """One attention layer's ``projection_weights()`` and its norm into CTranslate2's spec."""
    from ctranslate2.specs import common_spec

    q, k, v = (common_spec.LinearSpec() for _ in range(3))
    for linear, name in ((q, "query"), (k, "key"), (v, "value")):
        kernel, bias = weights[name]
        _linear(linear, kernel, bias)
        if bias is None:
            linear.bias = np.zeros(linear.weight.shape[0], np.float32)
    if self_attention:
        _fused(spec.linear[0], [q, k, v])
    else:
        spec.linear[0].weight, spec.linear[0].bias = q.weight, q.bias
        _fused(spec.linear[1], [k, v])
    kernel, bias = weights["output"]
    output = _np(kernel)
    spec.linear[-1].weight = np.ascontiguousarray(output.reshape(-1, output.shape[-1]).T)
    if bias is not None:
        spec.linear[-1].bias = _np(bias)
    _norm(spec.layer_norm, norm)


def _feed_forward(spec, block):
    _linear(spec.linear_0, *block["feed_forward"]["inner"])
    _linear(spec.linear_1, *block["feed_forward"]["outer"])
    _norm(spec.layer_norm, block["feed_forward_norm"])


def _embeddings(spec, weights, side, rows, d_model):
    spec.scale_embeddings = weights["scale_embeddings"]
    table = weights["positions"][side]
    if table is None:  # section 3.5's sinusoids, written out (CTranslate2's own differ)
        table = sinusoidal_encoding(rows, d_model)
    spec.position_encodings.encodings = _np(table)
    if weights["final_norms"][side] is not None:
        _norm(spec.layer_norm, weights["final_norms"][side])


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
    if dims["value_dim"] != dims["key_dim"]:
        raise ValueError(
            f"ctranslate2_spec: the model has value_dim={dims['value_dim']} and "
            f"key_dim={dims['key_dim']} (d_v != d_k), which CTranslate2's TransformerSpec cannot "
            "express; export it as a SavedModel (keras-transformer export) instead"
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
    weights = layers.export_weights()
    if weights["activation"] != "relu":
        raise ValueError("ctranslate2_spec: only the ReLU feed-forward network is converted")
    spec = transformer_spec.TransformerSpec.from_config(
        (len(weights["encoder"]), len(weights["decoder"])),
        dims["num_heads"],
        pre_norm=dims["norm"] == "pre",
        activation=common_spec.Activation.RELU,
        alignment_layer=-1,  # return_attention: the last layer's cross-attention, all heads
        alignment_heads=dims["num_heads"],
    )
    d_model = dims["d_model"]
    embeddings = weights["embeddings"]
    source_matrix = _np(embeddings["source"])
    shared = embeddings["target"] is embeddings["source"]
    target_matrix = source_matrix if shared else _np(embeddings["target"])
    spec.encoder.embeddings[0].weight = source_matrix
    spec.decoder.embeddings.weight = target_matrix
    spec.decoder.projection.weight = target_matrix  # section 3.4: the tied pre-softmax matrix
    _embeddings(spec.encoder, weights, "encoder", positions, d_model)
    _embeddings(spec.decoder, weights, "decoder", positions, d_model)
    for layer_spec, block in zip(spec.encoder.layer, weights["encoder"], strict=True):
        _attention(
            layer_spec.self_attention, block["self_attention"], block["self_attention_norm"], True
        )
        _feed_forward(layer_spec.ffn, block)
    for layer_spec, block in zip(spec.decoder.layer, weights["decoder"], strict=True):
        _attention(
            layer_spec.self_attention, block["self_attention"], block["self_attention_norm"], True
        )
        _attention(
            layer_spec.attention, block["cross_attention"], block["cross_attention_norm"], False
        )
        _feed_forward(layer_spec.ffn, block)
    spec.register_source_vocabulary(vocabulary)
    spec.register_target_vocabulary(vocabulary)
    config = spec.config
    config.layer_norm_epsilon = float(dims["layer_norm_epsilon"])
    config.unk_token, config.bos_token, config.eos_token = (
        vocabulary[i] for i in (UNK_ID, BOS_ID, EOS_ID)
    )
    config.decoder_start_token = vocabulary[BOS_ID]
    config.add_source_eos = True
    spec.validate()
    return spec


def export_ctranslate2(
    model: keras.Model,
    tokenizer,
    path,
    search: SearchSettings | None = None,
    serving: ServingSettings | None = None,
    **changes,
) -> str:
    """Writes a CTranslate2 model folder of ``model`` to ``path`` and returns the path.

    ``tokenizer``: the run's :class:`~keras_transformer.text.tokenizer.SubwordTokenizer` (shared
    vocabulary). ``search``, ``serving`` and ``changes`` (their fields by name): the settings
    the folder translates with (``inference/settings.py``), ``quantization`` the stored weight
    type, ``float32``, ``int16`` or ``int8`` (CTranslate2 can still compute in another type
    when loading). The folder is written beside ``path`` and renamed into place
    (``keras_transformer/text/files.py``).

    Example:

    >>> export_ctranslate2(model, tokenizer, "saved_models/en_de_ct2", quantization="int8")
    'saved_models/en_de_ct2'
    """
    search, serving = split_settings(search, serving, "export_ctranslate2", **changes)
    dims = TransformerLayers.of(model).dims
    serving = serving.replace(format="ctranslate2").resolved(dims)
    settings = record(search, serving, max_target_positions=dims["max_target_positions"])
    vocabulary = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    rows = serving.max_source_length + search.max_extra_length + 1
    spec = ctranslate2_spec(model, vocabulary, rows)
    spec.optimize(quantization=serving.quantization)
    with atomic_folder(path) as folder:
        spec.save(str(folder))
        (folder / SPM_FILE).write_bytes(tokenizer.model_proto)
        (folder / SETTINGS_FILE).write_text(json.dumps({"translator": settings}, indent=2) + "\n")
    return str(path)


# ------------------------------------------------------------------ translating with a folder
class Hypothesis(NamedTuple):
    """One translation: ``text``, ``score`` (GNMT-normalized log P), ``tokens`` (pieces, no EOS)
    and ``alignment`` (per target token, the index of the most attended source token, or None)."""

    text: str
    score: float
    tokens: list
    alignment: list | None = None


def _gnmt(log_prob, length, alpha):
    return log_prob / ((5.0 + length) / 6.0) ** alpha


class CTranslate2Translator:
    """A CTranslate2 model folder from :func:`export_ctranslate2`, text in, text out.

    Args:
        path: the folder.
        compute_type: CTranslate2's compute type (``"default"``: the stored weight type).
        inter_threads: batches translated at once, one per CTranslate2 worker (each batch from
            a Python thread of its own: ``parallel.py``; 0 is 1).
        intra_threads: CTranslate2's threads per batch (0: its default).
        device: ``"cpu"`` or ``"cuda"``.

    Example:

    >>> translator = CTranslate2Translator("saved_models/en_de_ct2")
    >>> translator.translate(["A dog runs."])
    ['Ein Hund rennt.']
    """

    def __init__(
        self, path, compute_type="default", inter_threads=1, intra_threads=0, device="cpu"
    ):
        import ctranslate2
        import sentencepiece as spm

        self.path = pathlib.Path(path)
        self.settings = json.loads((self.path / SETTINGS_FILE).read_text())["translator"]
        self.processor = spm.SentencePieceProcessor(model_file=str(self.path / SPM_FILE))
        self.parallel = max(1, int(inter_threads))  # batches in flight, one per worker
        self.engine = ctranslate2.Translator(
            str(self.path),
            device=device,
            compute_type=compute_type,
            inter_threads=self.parallel,
            intra_threads=intra_threads,
        )

    def _limit(self, pieces):
        """Tokens a translation may have (EOS included), as the SavedModel's search."""
        s = self.settings
        limit = len(pieces) + 1 + s["max_extra_length"]
        for cap in (s["max_output_length"], s["max_target_positions"]):
            if cap is not None:
                limit = min(limit, cap)
        return max(limit, 1)

    def _source_pieces(self, lines):
        """The source pieces of every line, cleaned, cut and tokenized as the SavedModel's."""
        s = self.settings
        return [
            text_io.source_pieces(
                self.processor, line, s["max_input_chars"], s["max_source_length"]
            )
            for line in lines
        ]

    def _batch_options(self, limits, **search):
        """``translate_batch``'s options for a batch of these ``limits``: the folder's settings
        and this call's ``search`` (beam size, length penalty, sampling, ...)."""
        return dict(
            max_decoding_length=max(limits),
            min_decoding_length=0,
            max_input_length=0,
            suppress_sequences=[[PAD_PIECE], [BOS_PIECE]],
            no_repeat_ngram_size=self.settings.get("no_repeat_ngram_size", 0),
            return_scores=True,
            return_end_token=True,
            **search,
        )

    def _decode(self, batch, beam_size, alpha, k, length_penalty, align):
        """Hypotheses of a batch of source pieces (all non-empty): a list of ``k``-lists."""
        limits = [self._limit(p) for p in batch]
        results = self.engine.translate_batch(
            batch,
            **self._batch_options(
                limits,
                beam_size=beam_size,
                num_hypotheses=beam_size if length_penalty == "gnmt" else k,
                length_penalty=alpha,
                return_attention=align,
            ),
        )
        decoded = [
            self._hypotheses(result, limit, alpha, align and beam_size == 1)
            for result, limit in zip(results, limits, strict=True)
        ]
        found = [hypotheses for hypotheses, _ in decoded]
        self._rescore_cut(batch, found, [cut for _, cut in decoded], limits, alpha)
        if length_penalty == "gnmt":
            found = [sorted(hypotheses, key=lambda h: -h.score) for hypotheses in found]
        found = [hypotheses[:k] for hypotheses in found]
        if align and beam_size > 1:
            found = self._realign(batch, found)
        return found

    def _realign(self, batch, found):
        """Alignments of beam-search hypotheses from a forced greedy pass over each one: the
        attention CTranslate2 4.8.5 returns from beam search is wrong at the first target token
        (``tests/test_ctranslate2.py``); its greedy attention is exact."""
        eos = self.processor.id_to_piece(self.settings["eos_id"])
        sources = [source for source, hypotheses in zip(batch, found) for _ in hypotheses]
        flat = [h for hypotheses in found for h in hypotheses]
        forced = self.engine.translate_batch(
            sources,
            target_prefix=[h.tokens + [eos] for h in flat],
            beam_size=1,
            max_decoding_length=max(len(h.tokens) for h in flat) + 1,
            min_decoding_length=0,
            max_input_length=0,
            return_attention=True,
        )
        aligned = iter(
            h._replace(alignment=[int(np.argmax(row)) for row in r.attention[0][: len(h.tokens)]])
            for h, r in zip(flat, forced, strict=True)
        )
        return [[next(aligned) for _ in hypotheses] for hypotheses in found]

    def _hypotheses(self, result, limit, alpha, align):
        """Every hypothesis of one result, cut at ``limit`` tokens, and the indices of those
        cut (their scores still count the tokens past the limit)."""
        eos = self.processor.id_to_piece(self.settings["eos_id"])
        hypotheses, cut = [], []
        for i, tokens in enumerate(result.hypotheses):
            tokens = list(tokens)
            # The engine's score is log P / len ** alpha over the emitted tokens (EOS included).
            log_prob = result.scores[i] * len(tokens) ** alpha
            if len(tokens) > limit:  # decoded past this sentence's limit (the batch's longer)
                tokens = tokens[:limit]
                cut.append(i)
            emitted = len(tokens)
            if tokens and tokens[-1] == eos:
                tokens = tokens[:-1]
            alignment = None
            if align:
                alignment = [int(np.argmax(row)) for row in result.attention[i][: len(tokens)]]
            text = text_io.target_text(self.processor, tokens)
            hypotheses.append(Hypothesis(text, _gnmt(log_prob, emitted, alpha), tokens, alignment))
        return hypotheses, cut

    def _rescore_cut(self, batch, found, cuts, limits, alpha):
        """Scores the hypotheses cut at their sentence's limit over the tokens kept, as the
        SavedModel's search stops there (in place; one ``score_batch`` call per batch)."""
        where = [(b, i) for b, cut in enumerate(cuts) for i in cut]
        if not where:
            return
        scored = self.engine.score_batch(
            [batch[b] for b, _ in where], [found[b][i].tokens for b, i in where]
        )
        for (b, i), result in zip(where, scored, strict=True):
            log_prob = sum(result.log_probs[: limits[b]])  # without the EOS score_batch appends
            found[b][i] = found[b][i]._replace(score=_gnmt(log_prob, limits[b], alpha))

    def translate_hypotheses(
        self,
        lines,
        k=1,
        beam_size=None,
        alpha=None,
        batch_size=64,
        length_penalty="gnmt",
        align=False,
        progress=False,
    ) -> list[list[Hypothesis]]:
        """The ``k`` best hypotheses of every line (``k <= beam_size``), best first."""
        s = self.settings
        beam_size = int(s["beam_size"] if beam_size is None else beam_size)
        alpha = float(s["alpha"] if alpha is None else alpha)
        if not 1 <= k <= beam_size:
            raise ValueError(f"k={k} must be between 1 and the beam size {beam_size}")
        if length_penalty not in ("gnmt", "ctranslate2"):
            raise ValueError(f"length_penalty={length_penalty!r}: 'gnmt' or 'ctranslate2'")
        sources = self._source_pieces(lines)
        results = [[Hypothesis("", 0.0, [], [] if align else None)]] * len(sources)

        def run(chunk):
            return self._decode(
                [sources[i] for i in chunk], beam_size, alpha, k, length_penalty, align
            )

        chunks = self._chunks(sources, batch_size)
        for chunk, decoded in map_batches(run, chunks, self.parallel, progress):
            for i, hypotheses in zip(chunk, decoded, strict=True):
                results[i] = hypotheses
        return results

    def _chunks(self, sources, batch_size):
        """Indices of the non-empty sources, shortest first, in batches of at most
        ``batch_size`` lines and the folder's ``max_batch_tokens`` source ids (rows x the
        longest, EOS included), as the SavedModel's sub-batches."""
        budget = self.settings.get("max_batch_tokens")  # absent in folders before it existed
        lengths = [len(p) + 1 if p else 0 for p in sources]
        return length_sorted_batches(lengths, batch_size, budget)

    def translate_aligned(self, lines, batch_size=64, progress=False, **options):
        """The best :class:`Hypothesis` of every line, with its ``alignment``."""
        found = self.translate_hypotheses(
            lines, 1, batch_size=batch_size, progress=progress, align=True, **options
        )
        return [hypotheses[0] for hypotheses in found]

    def translate(self, lines, batch_size=64, progress=False, **options) -> list[str]:
        """The best translation of every line (options: :meth:`translate_hypotheses`'s), or
        with sampling options (``settings.SAMPLING_FIELDS``), or a folder exported to sample,
        a sample of each (:meth:`translate_samples`)."""
        sampling = {k: options.pop(k) for k in SAMPLING_FIELDS if k in options}
        if sampling_request(self.settings, **sampling).sampling:
            if options.get("beam_size") not in (None, 1):
                raise ValueError(f"beam_size={options['beam_size']}: sampling takes beam size 1")
            found = self.translate_samples(lines, 1, batch_size, progress, **sampling)
        else:
            found = self.translate_hypotheses(
                lines, 1, batch_size=batch_size, progress=progress, **options
            )
        return [hypotheses[0].text for hypotheses in found]

    def translate_samples(self, lines, n=1, batch_size=64, progress=False, **sampling):
        """``n`` random samples of every line through CTranslate2's own sampler (top-k, top-p,
        temperature; ``sampling``: ``settings.SAMPLING_FIELDS``, default the folder's): lists
        of :class:`Hypothesis`, ``score`` the summed log-probability. The seed seeds the
        engine once (``ctranslate2.set_random_seed``): the same seed, lines, batch size and
        threads give the same samples; they differ from the SavedModel's (another sampler)."""
        import ctranslate2

        request = sampling_request(self.settings, **sampling)
        ctranslate2.set_random_seed(request.seed)
        sources = [pieces for pieces in self._source_pieces(lines) for _ in range(n)]
        results = [Hypothesis("", 0.0, [], None)] * len(sources)

        def run(chunk):
            batch = [sources[i] for i in chunk]
            limits = [self._limit(p) for p in batch]
            drawn = self.engine.translate_batch(
                batch,
                **self._batch_options(
                    limits,
                    beam_size=1,
                    length_penalty=0.0,
                    sampling_topk=request.sampling_topk,
                    sampling_topp=request.sampling_topp,
                    sampling_temperature=request.sampling_temperature,
                ),
            )
            decoded = [self._hypotheses(r, limit, 0.0, False) for r, limit in zip(drawn, limits)]
            found = [hypotheses for hypotheses, _ in decoded]
            self._rescore_cut(batch, found, [cut for _, cut in decoded], limits, 0.0)
            return [hypotheses[0] for hypotheses in found]

        for chunk, drawn in map_batches(run, self._chunks(sources, batch_size), 1, progress):
            for i, hypothesis in zip(chunk, drawn, strict=True):
                results[i] = hypothesis
        return [results[i * n : (i + 1) * n] for i in range(len(lines))]
