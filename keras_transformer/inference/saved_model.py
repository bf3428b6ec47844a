# Paper section 6.1 (inference settings: beam 4, alpha 0.6, input length + 50) packaged for serving;
# section 5.1 (shared subword vocabulary): the tokenizer travels inside the SavedModel.
"""A self-contained translation SavedModel: text in, text out.

:class:`Translator` is a ``tf.Module`` that holds the Keras model, the tokenizer(s) and a
:class:`~keras_transformer.inference.search.Searcher`. All of them are tracked attributes, so
``tf.saved_model.save`` writes the weights, the SentencePiece model and the decoding graph into one
folder that can be moved or copied anywhere and loaded without this library (plain TensorFlow plus
``tensorflow_text`` for the SentencePiece ops).

Signatures (all shape-polymorphic over the batch; an empty batch gives empty outputs):

* ``serving_default``: ``text`` tf.string ``[None]`` -> ``translation`` tf.string ``[None]`` and
  ``score`` float32 ``[None]``;
* ``translate_tokens``: ``tokens`` int32 ``[None, None]`` (subword ids as ``tokenize`` gives them:
  no BOS/EOS, 0-padded) -> ``tokens`` int32 ``[None, None]`` (the same form) and ``score``;
* ``tokenize``: ``text`` tf.string ``[None]`` -> ``tokens`` int32 ``[None, None]`` (0-padded);
* ``detokenize``: ``tokens`` int32 ``[None, None]`` -> ``text`` tf.string ``[None]``.
* ``translate_nbest``: ``text`` -> ``translations`` tf.string ``[None, k]`` and ``scores``
  ``[None, k]``, the k (= beam size) best, best first; ``translate_aligned``: ``serving_default``'s
  outputs and ``alignment`` int32 ``[None, None]``, the attended source subword of each target
  subword (:func:`_alignments`);
* ``translate_sampled``: ``text``, and per line ``seed`` int64, ``topk`` int32, ``topp`` and
  ``temperature`` float32 -> ``translation`` and ``score`` (the summed log-probability): a
  random sample of each line (top-k, nucleus, temperature; ``inference/sampling.py``), the same
  for the same seed, line and settings in any batch or process.

``score`` is the beam-search score ``log P(y) / ((5 + |y|) / 6) ** alpha`` of the returned
translation (0 for an empty input).

Input handling (so that no input crashes or runs unbounded):

* invalid UTF-8 bytes are replaced by U+FFFD; control characters become spaces; runs of whitespace
  collapse to one space and both ends are stripped (so whitespace-only input is empty input);
* a line is cut to ``max_input_chars`` characters before tokenization (default
  ``32 * max_source_length``, far more than ``max_source_length`` subwords ever need);
* **truncation**: the source keeps its first ``max_source_length - 1`` subwords, then EOS, so the
  model always sees a well-formed source of at most ``max_source_length`` ids (default: the model's
  ``max_positions``). Everything after is dropped silently: split long documents into
  sentences before translating;
* the translation has at most ``source_length + max_extra_length`` subwords (paper: 50), and at
  most ``max_output_length`` if given;
* **bounded memory**: a request is searched in sub-batches of ``max_batch_tokens`` source ids;
* empty input (or input that tokenizes to nothing) gives ``""`` with score 0;
* ids outside the vocabulary passed to ``translate_tokens``/``detokenize`` become UNK.

Example:

>>> from keras_transformer import SubwordTokenizer
>>> tokenizer = SubwordTokenizer.load("runs/multi30k/tokenizer")  # keras-transformer train
>>> model = keras.models.load_model("runs/multi30k/averaged.keras")  # ... average
>>> export_translator(model, tokenizer, "saved_models/multi30k_en_de")
'saved_models/multi30k_en_de'
>>> reloaded = tf.saved_model.load("saved_models/multi30k_en_de")
>>> translation = reloaded.signatures["serving_default"](text=tf.constant(["A dog runs."]))
>>> translation["translation"].dtype, translation["score"].shape  # UTF-8 strings, log-probs
(tf.string, TensorShape([1]))
>>> layer = keras.layers.TFSMLayer("saved_models/multi30k_en_de", call_endpoint="serving_default")
>>> layer(tf.constant(["A dog runs.", "Two men talk."]))["translation"].shape
TensorShape([2])

Custom ops: the tokenizer runs SentencePiece ops from ``tensorflow_text``. A process that loads the
SavedModel must register them first (``import tensorflow_text``), or loading fails with "Op type not
registered 'SentencepieceOp'". ``saved_model_cli show`` reads the files only and works as is; TF's
``saved_model_cli run`` script imports nothing from tensorflow_text and so cannot run any signature:
``python -m keras_transformer.inference.saved_model`` is the same command line with the ops
registered::

    saved_model_cli show --dir saved_models/multi30k_en_de --all
    python -m keras_transformer.inference.saved_model run --dir saved_models/multi30k_en_de \\
        --tag_set serve --signature_def serving_default --input_exprs 'text=["A dog runs."]'

TensorFlow Serving needs a build with the tensorflow_text ops (as for any tensorflow_text model).
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
from collections.abc import Sequence

import keras
import tensorflow as tf

from keras_transformer.inference.batching import (
    length_sorted_batches,
    map_batches,
    search_in_sub_batches,
)
from keras_transformer.inference.formats import SAVED_MODEL_SETTINGS
from keras_transformer.inference.search import SAMPLING_SPECS, Searcher
from keras_transformer.inference.settings import (
    SearchSettings,
    ServingSettings,
    record,
    sampling_request,
    split_settings,
)
from keras_transformer.inference.strategies import length_penalty
from keras_transformer.inference.tokens import NEG_INF
from keras_transformer.layers.normalization import forward_only
from keras_transformer.model import TransformerLayers, cast_model, model_dims
from keras_transformer.text.files import atomic_folder
from keras_transformer.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, with_eos

__all__ = [
    "SETTINGS_FILE",
    "SavedModelTranslator",
    "Translator",
    "export_translator",
    "saved_model_cli",
    "set_tf_threads",
]

_TEXT = tf.TensorSpec([None], tf.string, name="text")
_TOKENS = tf.TensorSpec([None, None], tf.int32, name="tokens")
SETTINGS_FILE = SAVED_MODEL_SETTINGS  # the file load_translator tells our SavedModels by


class Translator(tf.Module):
    """Text-to-text translation module: sanitize, tokenize, beam search, detokenize.

    Args:
        model: a model from :func:`keras_transformer.build_transformer` (trained).
        tokenizer: the source tokenizer, a ``tf.Module`` with ``tokenize(tf.string [B]) ->
            RaggedTensor int [B, (n)]`` (no BOS/EOS) and ``detokenize(int [B, L]) -> tf.string
            [B]`` such as :class:`keras_transformer.text.tokenizer.SubwordTokenizer`.
        target_tokenizer: the target tokenizer if the vocabularies differ (default: shared).
        search: how the search decodes, a :class:`~keras_transformer.inference.settings.
            SearchSettings` (default: the paper's, beam 4, alpha 0.6, input length + 50).
        serving: input limits, the request's token budget and the dtype, a
            :class:`~keras_transformer.inference.settings.ServingSettings`.
        ensemble: more models of the same vocabulary, decoded with ``model`` as one ensemble
            (``search.ensemble_average`` combines their distributions at each step; the
            alignments of ``translate_aligned`` are ``model``'s attention).
        **changes: fields of either to change, by name (``beam_size=1``,
            ``max_batch_tokens=None``, ``dtype="bfloat16"``, ...).

    Call ``translator.translate(tf.constant([...]))`` in memory, or export it with
    :func:`export_translator`.

    Example:

    >>> from keras_transformer import SubwordTokenizer
    >>> tokenizer = SubwordTokenizer.load("runs/multi30k/tokenizer")  # keras-transformer train
    >>> model = keras.models.load_model("runs/multi30k/averaged.keras")  # ... average
    >>> translator = Translator(model, tokenizer, beam_size=4)
    >>> sorted(translator.translate(tf.constant(["A dog runs."])))
    ['score', 'translation']
    """

    def __init__(
        self,
        model: keras.Model,
        tokenizer: tf.Module,
        target_tokenizer: tf.Module | None = None,
        search: SearchSettings | None = None,
        serving: ServingSettings | None = None,
        name: str = "translator",
        ensemble: Sequence[keras.Model] = (),
        **changes,
    ):
        super().__init__(name=name)
        search, serving = split_settings(search, serving, "Translator", **changes)
        if serving.ensemble:
            raise ValueError(
                f"serving.ensemble={list(serving.ensemble)}: runs that `keras-transformer "
                "export` loads; in Python pass the member models: Translator(..., ensemble=[...])"
            )
        dims = model_dims(model)
        members = [model, *ensemble]
        if serving.dtype is not None:
            members = [_in_dtype(member, serving.dtype) for member in members]
        model = members[0]
        self.model = model
        self.tokenizer = tokenizer
        self.target_tokenizer = tokenizer if target_tokenizer is None else target_tokenizer
        self.searcher = Searcher(model, search, ensemble=members[1:])
        self.source_vocab_size = dims["source_vocab_size"]
        self.target_vocab_size = dims["target_vocab_size"]
        self._check_vocabularies()
        self.serving = serving.replace(format="saved_model").resolved(dims)
        self.max_source_length = self.serving.max_source_length
        self.max_input_chars = self.serving.max_input_chars
        self.max_batch_tokens = self.serving.max_batch_tokens
        # translator.json: the settings, the model's own dtype policy unless cast.
        dtype = serving.dtype or dims["dtype_policy"]
        self.settings = record(search, self.serving.replace(dtype=dtype), models=len(members))

    def _check_vocabularies(self):
        for role, tok, size in (
            ("tokenizer", self.tokenizer, self.source_vocab_size),
            ("target tokenizer", self.target_tokenizer, self.target_vocab_size),
        ):
            tok_size = getattr(tok, "vocab_size", None)
            if isinstance(tok_size, int) and tok_size != size:
                raise ValueError(
                    f"Translator: the {role} has {tok_size} ids but the model's "
                    f"embedding has {size}"
                )

    # ------------------------------------------------------------------ pieces
    def _clean(self, text):
        text = tf.strings.unicode_transcode(
            text, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        text = tf.strings.regex_replace(text, r"[[:cntrl:]\s]+", " ")
        text = tf.strings.strip(text)
        return tf.strings.substr(text, 0, self.max_input_chars, unit="UTF8_CHAR")

    @staticmethod
    def _valid(ids, vocab_size):
        """Out-of-vocabulary ids -> UNK."""
        ids = tf.cast(ids, tf.int32)
        return tf.where((ids < 0) | (ids >= vocab_size), UNK_ID, ids)

    def _source_ids(self, tokens):
        """Ragged subword ids -> model source ``[B, S]``: truncated, EOS appended, 0-padded;
        and the number of subwords kept per row (EOS not counted)."""
        source = with_eos(tokens, self.max_source_length)
        lengths = tf.cast(source.row_lengths(), tf.int32) - 1
        return source.to_tensor(default_value=PAD_ID), lengths

    def _bounded(self, search, source, *row_inputs):
        """``search(source, *row_inputs)``'s outputs, in sub-batches under ``max_batch_tokens``
        (bounded memory, the same outputs: ``inference/batching.py``); every signature searches
        here."""
        if self.max_batch_tokens is None:
            return search(source, *row_inputs)
        max_extra = self.searcher.max_extra_length
        return search_in_sub_batches(search, source, self.max_batch_tokens, max_extra, row_inputs)

    def _best(self, source):
        """The best translation of each source row: ``(ids [B, T], scores [B])``, GNMT scores
        also for greedy search (the tokens of a beam of 1, and its score)."""
        ids, scores = self.searcher.search(source)
        if self.searcher.beam_size == 1:
            emitted = tf.reduce_sum(tf.cast(tf.not_equal(ids, PAD_ID), tf.int32), axis=1)
            scores = scores / length_penalty(emitted, self.searcher.alpha)
        return ids, scores

    def _aligned(self, source):
        """:meth:`_best` and each target token's most attended source subword."""
        ids, scores = self._best(source)
        target = tf.where(tf.equal(ids, EOS_ID), PAD_ID, ids)
        return ids, scores, _alignments(self.model, source, target)

    def _translate_ids(self, tokens, aligned=False, sampling=None):
        """Ragged source subwords -> ``(ids [B, T], scores [B])`` without EOS (PAD-padded),
        and with ``aligned`` the alignment ``[B, T]`` (-1 at padding); with ``sampling``
        (seeds, top-k, top-p, temperatures, each ``[B]``) a sample of each."""
        source, lengths = self._source_ids(tokens)
        if sampling is not None:
            found = self._bounded(self.searcher.sample, source, *sampling)
        else:
            found = self._bounded(self._aligned if aligned else self._best, source)
        empty = tf.equal(lengths, 0)
        ids = tf.where(tf.equal(found[0], EOS_ID) | empty[:, None], PAD_ID, found[0])
        alignment = [tf.where(tf.not_equal(ids, PAD_ID), a, -1) for a in found[2:]]
        return (ids, tf.where(empty, 0.0, found[1]), *alignment)

    def _nbest(self, tokens):
        """Ragged source subwords -> ``{"translations": tf.string [B, k], "scores": [B, k]}``,
        the k (= beam size) best of a beam of k, best first."""
        source, lengths = self._source_ids(tokens)
        ids, scores = self._bounded(self.searcher.nbest, source)  # [B, k, T], [B, k]
        batch, k = tf.shape(ids)[0], tf.shape(ids)[1]
        empty = tf.equal(lengths, 0)[:, None]
        missing = scores <= NEG_INF / 2  # fewer than k finished hypotheses
        ids = tf.where(tf.equal(ids, EOS_ID) | empty[..., None] | missing[..., None], PAD_ID, ids)
        flat = tf.reshape(ids, [batch * k, -1])
        text = tf.where(tf.reduce_any(flat != PAD_ID, axis=1), self._detokenize(flat), "")
        scores = tf.where(empty, 0.0, tf.where(missing, NEG_INF, scores))
        return {"translations": tf.reshape(text, [batch, k]), "scores": scores}

    def _detokenize(self, ids):
        # One more PAD column: SubwordTokenizer.detokenize turns a [0, 0] batch into one string.
        return self.target_tokenizer.detokenize(tf.pad(ids, [[0, 0], [0, 1]]))

    def _tokenize(self, text):
        tokens = self.tokenizer.tokenize(self._clean(text))
        return tf.ragged.map_flat_values(self._valid, tokens, self.source_vocab_size)

    # ------------------------------------------------------------------ signatures
    @tf.function(input_signature=[_TEXT])
    def translate(self, text):
        """tf.string ``[B]`` -> ``{"translation": tf.string [B], "score": float32 [B]}``."""
        ids, scores = self._translate_ids(self._tokenize(text))
        translation = self._detokenize(ids)
        translation = tf.where(tf.reduce_any(ids != PAD_ID, axis=1), translation, "")
        return {"translation": translation, "score": scores}

    @tf.function(input_signature=[_TEXT])
    def translate_nbest(self, text):
        """``[B]`` -> ``{"translations": [B, k], "scores": [B, k]}``: the k (= beam size) best,
        best first (the first is ``translate``'s); fewer than k found: ``""`` and -inf."""
        return self._nbest(self._tokenize(text))

    @tf.function(input_signature=[_TEXT, *SAMPLING_SPECS])
    def translate_sampled(self, text, seed, topk, topp, temperature):
        """A random sample of each line: ``{"translation": [B], "score": [B]}``, ``score`` the
        summed log-probability of its tokens. Per line: ``seed`` int64 (the same seed, line
        and settings give the same sample), ``topk`` int32 (0: all; 1: greedy), ``topp`` and
        ``temperature`` float32 (``inference/sampling.py``)."""
        per_line = {"seed": seed, "topk": topk, "topp": topp, "temperature": temperature}
        checks = [
            tf.debugging.assert_equal(tf.shape(t), tf.shape(text), message=f"one {name} a line")
            for name, t in per_line.items()
        ] + [
            tf.debugging.assert_positive(temperature, message="temperature must be > 0"),
            tf.debugging.assert_positive(topp, message="topp must be in (0, 1]"),
            tf.debugging.assert_less_equal(topp, 1.0, message="topp must be in (0, 1]"),
        ]
        with tf.control_dependencies(checks):
            sampling = tuple(tf.identity(t) for t in (seed, topk, topp, temperature))
        ids, scores = self._translate_ids(self._tokenize(text), sampling=sampling)
        translation = tf.where(tf.reduce_any(ids != PAD_ID, axis=1), self._detokenize(ids), "")
        return {"translation": translation, "score": scores}

    @tf.function(input_signature=[_TEXT])
    def translate_aligned(self, text):
        """``translate``'s outputs and ``"alignment"`` int32 ``[B, T]``: the attended source
        subword of every target subword (-1: padding; :func:`_alignments`)."""
        ids, scores, alignment = self._translate_ids(self._tokenize(text), aligned=True)
        translation = tf.where(tf.reduce_any(ids != PAD_ID, axis=1), self._detokenize(ids), "")
        return {"translation": translation, "score": scores, "alignment": alignment}

    @tf.function(input_signature=[_TOKENS])
    def translate_tokens(self, tokens):
        """Subword ids ``[B, S]`` (no BOS/EOS, 0-padded) -> ``{"tokens": [B, T], "score": [B]}``.

        Input PAD/BOS/EOS ids are dropped; output ids have no BOS/EOS and are 0-padded.
        """
        tokens = self._valid(tokens, self.source_vocab_size)
        keep = (tokens != PAD_ID) & (tokens != BOS_ID) & (tokens != EOS_ID)
        ids, scores = self._translate_ids(tf.ragged.boolean_mask(tokens, keep))
        return {"tokens": ids, "score": scores}

    @tf.function(input_signature=[_TEXT])
    def tokenize(self, text):
        """``text`` tf.string ``[B]`` -> ``{"tokens": int32 [B, n]}`` (cleaned, not truncated)."""
        return {"tokens": self._tokenize(text).to_tensor(default_value=PAD_ID)}

    @tf.function(input_signature=[_TOKENS])
    def detokenize(self, tokens):
        """Target ids ``[B, T]`` -> ``{"text": tf.string [B]}`` (PAD/BOS dropped, stops at EOS)."""
        return {"text": self._detokenize(self._valid(tokens, self.target_vocab_size))}

    def signatures(self) -> dict:
        """The signatures' ``tf.function``s (each has its input signature), to pass as
        ``tf.saved_model.save(..., signatures=...)``.

        Also tracks the plain ``tf.Variable``s those functions read (see below).
        """
        # tf.functions, not concrete functions: tf.saved_model.save traces every tf.function of
        # the module again inside its save context (a tracing cache of its own), so functions
        # traced before it were traced, and stored, twice.
        functions = {
            "serving_default": self.translate,
            "translate_tokens": self.translate_tokens,
            "tokenize": self.tokenize,
            "detokenize": self.detokenize,
            "translate_nbest": self.translate_nbest,
            "translate_aligned": self.translate_aligned,
            "translate_sampled": self.translate_sampled,
        }
        # A Keras 3 variable is saved as a *new* tf.Variable built from the one the functions read
        # (keras/src/backend/tensorflow/core.py, Variable._export_to_saved_model_graph). The TF2
        # object loader (tf.saved_model.load, TFSMLayer) maps them back, but the graph loaders
        # (saved_model_cli run, TensorFlow Serving's C++ loader) restore only the new copies and
        # then fail with "Could not find variable decoder_block_0/...". Tracking the variables the
        # functions read (the model's weights; nothing else here holds one) saves those directly,
        # as keras.export.ExportArchive does.
        members = [self.model, *self.searcher.ensemble]
        self.captured_variables = [weight.value for m in members for weight in m.weights]
        return functions

    def save(self, path) -> str:
        """Writes the SavedModel (its seven signatures) and ``assets.extra/translator.json``:
        into a folder beside ``path``, renamed into place when complete (a killed export leaves
        no half-written SavedModel at ``path``; ``keras_transformer/text/files.py``)."""
        path = os.fspath(path)
        with atomic_folder(path) as folder:
            self._write(folder)
        return path

    def _write(self, folder):
        # No gradient functions: nobody trains from the SavedModel. The layer norm's fast path
        # is traced without its tf.custom_gradient (the same forward ops), so a load has no
        # "unsaved custom gradients" to warn of, and none is stored (results/test_suite.md,
        # session 15).
        options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
        with forward_only():
            tf.saved_model.save(
                self, os.fspath(folder), signatures=self.signatures(), options=options
            )
        extra = pathlib.Path(folder) / SETTINGS_FILE
        extra.parent.mkdir(parents=True, exist_ok=True)
        extra.write_text(
            json.dumps(
                {
                    "translator": self.settings,
                    "source_vocab_size": self.source_vocab_size,
                    "target_vocab_size": self.target_vocab_size,
                },
                indent=2,
            )
            + "\n"
        )


def export_translator(model: keras.Model, tokenizer: tf.Module, path, **settings) -> str:
    """Writes a self-contained translation SavedModel to ``path`` and returns the path.

    The keyword arguments are :class:`Translator`'s: ``target_tokenizer``, ``search``,
    ``serving`` and any field of either by name (``inference/settings.py``). See the module
    docstring for the signatures and the input handling (truncation to ``max_source_length``
    ids, EOS kept). The settings are also written, for people, to
    ``assets.extra/translator.json``.

    Example:

    >>> from keras_transformer import SubwordTokenizer
    >>> tokenizer = SubwordTokenizer.load("runs/multi30k/tokenizer")  # keras-transformer train
    >>> model = keras.models.load_model("runs/multi30k/averaged.keras")  # ... average
    >>> export_translator(model, tokenizer, "saved_models/en_de", beam_size=1)  # greedy
    'saved_models/en_de'
    """
    return Translator(model, tokenizer, **settings).save(path)


def _in_dtype(model, dtype):
    """``model`` under the Keras dtype policy ``dtype`` (itself if it has it already)."""
    return model if model_dims(model)["dtype_policy"] == dtype else cast_model(model, dtype)


def _alignments(model, source, ids):
    """``ids`` [B, T] (no BOS/EOS, 0-padded) of sources [B, S] -> int32 [B, T]: the attended
    source subword of each target token (an index into the source's subwords), -1 at padding.

    The arg-max over source positions of the last decoder layer's encoder-decoder attention,
    averaged over heads (what CTranslate2's ``return_attention`` gives for a model exported with
    ``alignment_heads = num_heads``); the source EOS is never an answer. One teacher-forced
    decoder pass over the translation (the decoder is causal, so each row sees what the search
    saw).
    """
    layers = TransformerLayers.of(model)
    batch = tf.shape(ids)[0]
    target = tf.concat([tf.fill([batch, 1], BOS_ID), ids[:, :-1]], axis=1)
    memory, source_mask = layers.encode(source, training=False)
    _, weights = layers.decode_with_scores(target, memory, source_mask)
    cross = tf.reduce_mean(tf.cast(weights[-1][1], tf.float32), axis=1)  # [B, T, S]
    # Source subwords only, as CTranslate2 returns them: not the EOS the model reads last.
    words = tf.not_equal(source, PAD_ID) & tf.not_equal(source, EOS_ID)
    cross = tf.where(words[:, None, :], cross, -1.0)
    positions = tf.argmax(cross, axis=-1, output_type=tf.int32)
    return tf.where(tf.not_equal(ids, PAD_ID), positions, -1)


# ------------------------------------------------------------------ translating with a folder
class SavedModelTranslator:
    """A SavedModel of :func:`keras_transformer.export_translator`, lines in, lines out.

    Args:
        path: the folder.
        intra_threads: TensorFlow's intra-op threads (0: its default, one per core).
        inter_threads: batches translated at once (as CTranslate2's ``inter_threads``), each
            from a thread of its own, with TensorFlow's inter-op pool sized to match. 0: one
            batch at a time, on TensorFlow's default inter-op pool, or on one inter-op thread
            when ``intra_threads`` is given (the CLI's ``--threads`` without ``--parallel``).

    TensorFlow sizes its pools once per process, before its first op: a later different value
    raises. One thread per batch suits this engine's small per-step ops: a single sentence
    with ``intra_threads=1, inter_threads=1``, a file with ``intra_threads=1`` and a batch
    per core (``results/serving.md``).
    """

    def __init__(self, path, intra_threads=0, inter_threads=0):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the SavedModel uses)

        from keras_transformer.quiet import dropping_noise

        set_tf_threads(intra_threads, inter_threads or (1 if intra_threads else 0))
        self.parallel = max(1, int(inter_threads))
        self.path = pathlib.Path(path)
        self.settings = json.loads((self.path / SAVED_MODEL_SETTINGS).read_text())["translator"]
        with dropping_noise():
            self.loaded = tf.saved_model.load(str(path))
        self.serve = self.loaded.signatures["serving_default"]

    def _map(self, signature, lines, batch_size, progress, **row_inputs):
        """``(chunk, outputs)`` of ``signature`` on batches of similar lengths, in order;
        ``row_inputs``: the signature's other inputs, numpy arrays of one value per line."""
        import tensorflow as tf

        # similar lengths together; an empty line counts as one character, so that it is sent
        chunks = length_sorted_batches([len(line) or 1 for line in lines], batch_size)

        def run(chunk):
            rows = {name: tf.constant(values[chunk]) for name, values in row_inputs.items()}
            return signature(text=tf.constant([lines[i] for i in chunk], tf.string), **rows)

        return map_batches(run, chunks, self.parallel, progress)

    def translate(self, lines, batch_size=64, progress=False, **sampling) -> list[str]:
        """The translation of every line; with ``sampling`` (``settings.SAMPLING_FIELDS``), or
        an export that samples, a sample of each (:meth:`translate_samples`)."""
        if sampling_request(self.settings, **sampling).sampling:
            found = self.translate_samples(lines, 1, batch_size, progress, **sampling)
            return [hypotheses[0].text for hypotheses in found]
        results = [""] * len(lines)
        for chunk, out in self._map(self.serve, lines, batch_size, progress):
            for i, text in zip(chunk, out["translation"].numpy(), strict=True):
                results[i] = text.decode("utf-8")
        return results

    def translate_hypotheses(self, lines, k=1, batch_size=64, progress=False, **options):
        """The ``k`` best translations of every line (``k <=`` the export's beam size), from the
        ``translate_nbest`` signature: lists of :class:`Hypothesis` (text and score)."""
        from keras_transformer.inference.ctranslate2 import Hypothesis

        beam = self.settings["beam_size"]
        if options.get("beam_size") not in (None, beam) or not 1 <= k <= beam:
            raise ValueError(f"{self.path}: exported with beam size {beam}; k={k} must fit in it")
        results = [[]] * len(lines)
        nbest = self.loaded.signatures["translate_nbest"]
        for chunk, out in self._map(nbest, lines, batch_size, progress):
            texts, scores = out["translations"].numpy(), out["scores"].numpy()
            for row, i in enumerate(chunk):
                results[i] = [
                    Hypothesis(texts[row, j].decode("utf-8"), float(scores[row, j]), None)
                    for j in range(k)
                ]
        return results

    def translate_samples(self, lines, n=1, batch_size=64, progress=False, **sampling):
        """``n`` random samples of every line (``translate_sampled`` signature): lists of
        :class:`Hypothesis` (text and summed log-probability). ``sampling``: top-k, top-p,
        temperature and seed (``settings.SAMPLING_FIELDS``; default: the export's); sample
        ``j`` of line ``i`` has the seed ``sampling.sentence_seeds(seed, ...)[i * n + j]``."""
        import numpy as np

        from keras_transformer.inference.ctranslate2 import Hypothesis
        from keras_transformer.inference.sampling import sentence_seeds

        request = sampling_request(self.settings, **sampling)  # top-k 1: greedy draws
        if "translate_sampled" not in self.loaded.signatures:
            raise ValueError(f"{self.path}: exported before sampling; export it again to sample")
        copies = [line for line in lines for _ in range(n)]
        rows = len(copies)
        inputs = dict(
            seed=sentence_seeds(request.seed, len(lines), n),
            topk=np.full(rows, request.sampling_topk, np.int32),
            topp=np.full(rows, request.sampling_topp, np.float32),
            temperature=np.full(rows, request.sampling_temperature, np.float32),
        )
        results = [None] * rows
        sampled = self.loaded.signatures["translate_sampled"]
        for chunk, out in self._map(sampled, copies, batch_size, progress, **inputs):
            texts, scores = out["translation"].numpy(), out["score"].numpy()
            for row, i in enumerate(chunk):
                results[i] = Hypothesis(texts[row].decode("utf-8"), float(scores[row]), None)
        return [results[i * n : (i + 1) * n] for i in range(len(lines))]

    def translate_aligned(self, lines, batch_size=64, progress=False):
        """Best translations with alignments (``translate_aligned`` signature): a
        :class:`Hypothesis` per line, ``alignment`` the source subword index of each target
        subword."""
        from keras_transformer.inference.ctranslate2 import Hypothesis

        results = [None] * len(lines)
        aligned = self.loaded.signatures["translate_aligned"]
        for chunk, out in self._map(aligned, lines, batch_size, progress):
            for row, i in enumerate(chunk):
                alignment = [int(a) for a in out["alignment"][row].numpy() if a >= 0]
                text = out["translation"][row].numpy().decode("utf-8")
                results[i] = Hypothesis(text, float(out["score"][row]), None, alignment)
        return results


def set_tf_threads(intra_threads=0, inter_threads=0):
    """Sizes TensorFlow's intra-op and inter-op thread pools (0: leave TensorFlow's default);
    a ``RuntimeError`` naming the setting if this process has already fixed another size."""
    import tensorflow as tf

    pools = (
        ("intra_threads", intra_threads, tf.config.threading.set_intra_op_parallelism_threads),
        ("inter_threads", inter_threads, tf.config.threading.set_inter_op_parallelism_threads),
    )
    for name, value, set_pool in pools:
        if int(value) < 0:
            raise ValueError(f"{name}={value} must be >= 0 (0: TensorFlow's default)")
        if not value:
            continue
        try:
            set_pool(int(value))
        except RuntimeError as error:
            raise RuntimeError(
                f"{name}={value}: TensorFlow's thread pools are sized once per process, before "
                "its first op, and this process has run ops already; pass it before anything "
                "else runs TensorFlow, or set TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS"
            ) from error


def saved_model_cli(argv=None) -> int:
    """TensorFlow's ``saved_model_cli`` with the tensorflow_text (SentencePiece) ops registered.

    Example (shell)::

        python -m keras_transformer.inference.saved_model run --dir saved_models/en_de \\
            --tag_set serve --signature_def serving_default --input_exprs 'text=["A dog runs."]'
    """
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
    from tensorflow.python.tools import saved_model_cli as cli

    sys.argv = ["saved_model_cli", *(sys.argv[1:] if argv is None else argv)]
    return cli.main()


if __name__ == "__main__":
    sys.exit(saved_model_cli())
