# Paper section 6.1 (inference settings: beam 4, alpha 0.6, input length + 50) packaged for serving;
# section 5.1 (shared subword vocabulary): the tokenizer travels inside the SavedModel.
"""A self-contained translation SavedModel: text in, text out.

:class:`Translator` is a ``tf.Module`` that holds the Keras model, the tokenizer(s) and a
:class:`~keras_transformer.decoding.Searcher`. All of them are tracked attributes, so
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
  subword (``serving/outputs.py``).

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
``python -m keras_transformer.export`` is the same command line with the ops registered::

    saved_model_cli show --dir saved_models/multi30k_en_de --all
    python -m keras_transformer.export run --dir saved_models/multi30k_en_de --tag_set serve \\
        --signature_def serving_default --input_exprs 'text=["A dog runs."]'

TensorFlow Serving needs a build with the tensorflow_text ops (as for any tensorflow_text model).
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

import keras
import tensorflow as tf

from keras_transformer.decoding import Searcher, length_penalty
from keras_transformer.decoding.sub_batches import search_in_sub_batches
from keras_transformer.model import cast_model, model_dims
from keras_transformer.serving import outputs
from keras_transformer.serving.atomic import atomic_folder
from keras_transformer.serving.ctranslate2_export import export_ctranslate2  # noqa: F401
from keras_transformer.serving.formats import SAVED_MODEL_SETTINGS
from keras_transformer.serving.saved_model_cli import saved_model_cli
from keras_transformer.tokenization import BOS_ID, EOS_ID, PAD_ID, UNK_ID, with_eos

__all__ = ["Translator", "export_ctranslate2", "export_translator", "saved_model_cli"]

_TEXT = tf.TensorSpec([None], tf.string, name="text")
_TOKENS = tf.TensorSpec([None, None], tf.int32, name="tokens")
SETTINGS_FILE = SAVED_MODEL_SETTINGS  # the file load_translator tells our SavedModels by


class Translator(tf.Module):
    """Text-to-text translation module: sanitize, tokenize, beam search, detokenize.

    Args:
        model: a model from :func:`keras_transformer.build_transformer` (trained).
        tokenizer: the source tokenizer, a ``tf.Module`` with ``tokenize(tf.string [B]) ->
            RaggedTensor int [B, (n)]`` (no BOS/EOS) and ``detokenize(int [B, L]) -> tf.string
            [B]`` such as :class:`keras_transformer.tokenization.SubwordTokenizer`.
        target_tokenizer: the target tokenizer if the vocabularies differ (default: shared).
        beam_size, alpha, max_extra_length: beam-search settings (paper: 4, 0.6, 50).
        max_output_length: optional cap on the subwords of a translation.
        max_source_length: source ids kept, EOS included (default: the model's positions).
        max_input_chars: characters kept before tokenization (default ``32 * max_source_length``).
        jit_compile: XLA-compiled search (CPU/GPU with XLA available where the model is served).
        xla_max_batch: XLA-compiled search for sub-batches of at most this many sentences only
            (the graph loop for larger ones); drop_finished: finished sentences leave the
            search's batch; share_cross_cache: beam hypotheses attend to one copy of their
            sentence's encoder-decoder keys/values (``decoding/search.py``; timings in
            ``results/serving.md``).
        max_batch_tokens: search a request in sub-batches of at most this many source ids
            (bounded memory, the same outputs: ``decoding/sub_batches.py``); None: one search.
        dtype: Keras dtype policy to serve in, e.g. ``"bfloat16"`` (default: the model's own;
            :func:`keras_transformer.cast_model`, timings in ``results/benchmarks.md``).

    Call ``translator.translate(tf.constant([...]))`` in memory, or export it with
    :func:`export_translator`.

    Example:

    >>> from keras_transformer import SubwordTokenizer
    >>> tokenizer = SubwordTokenizer.load("runs/multi30k/tokenizer")  # keras-transformer train
    >>> model = keras.models.load_model("runs/multi30k/averaged.keras")  # ... average
    >>> translator = Translator(model, tokenizer, beam_size=4, alpha=0.6)
    >>> sorted(translator.translate(tf.constant(["A dog runs."])))
    ['score', 'translation']
    """

    def __init__(
        self,
        model: keras.Model,
        tokenizer: tf.Module,
        target_tokenizer: tf.Module | None = None,
        beam_size: int = 4,
        alpha: float = 0.6,
        max_extra_length: int = 50,
        max_output_length: int | None = None,
        max_source_length: int | None = None,
        max_input_chars: int | None = None,
        jit_compile: bool = False,
        dtype: str | None = None,
        max_batch_tokens: int | None = 4096,
        xla_max_batch: int | None = None,
        drop_finished: bool = True,
        share_cross_cache: bool = True,
        name: str = "translator",
    ):
        super().__init__(name=name)
        if dtype is not None and dtype != model_dims(model)["dtype_policy"]:
            model = cast_model(model, dtype)
        self.model = model
        self.tokenizer = tokenizer
        self.target_tokenizer = tokenizer if target_tokenizer is None else target_tokenizer
        self.searcher = Searcher(
            model,
            beam_size=beam_size,
            alpha=alpha,
            max_extra_length=max_extra_length,
            max_output_length=max_output_length,
            jit_compile=jit_compile,
            xla_max_batch=xla_max_batch,
            drop_finished=drop_finished,
            share_cross_cache=share_cross_cache,
        )
        dims = model_dims(model)
        self.source_vocab_size = dims["source_vocab_size"]
        self.target_vocab_size = dims["target_vocab_size"]
        self._check_vocabularies()
        self.max_source_length = self._source_length(max_source_length, dims)
        self.max_input_chars = int(max_input_chars or 32 * self.max_source_length)
        if max_batch_tokens is not None and int(max_batch_tokens) < 1:
            raise ValueError(f"Translator: max_batch_tokens={max_batch_tokens} must be >= 1")
        self.max_batch_tokens = None if max_batch_tokens is None else int(max_batch_tokens)
        self.settings = self._record(dims["dtype_policy"])

    def _record(self, dtype):
        """The settings as ``translator.json`` records them."""
        search = self.searcher
        return dict(
            beam_size=search.beam_size,
            alpha=search.alpha,
            max_extra_length=search.max_extra_length,
            max_output_length=search.max_output_length,
            max_source_length=self.max_source_length,
            max_input_chars=self.max_input_chars,
            jit_compile=search.jit_compile,
            xla_max_batch=search.xla_max_batch,
            drop_finished=search.drop_finished,
            share_cross_cache=search.share_cross_cache,
            dtype=dtype,
            max_batch_tokens=self.max_batch_tokens,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
        )

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

    @staticmethod
    def _source_length(max_source_length, dims):
        """Source ids kept (EOS included): the model's positions unless asked for fewer."""
        positions = dims["max_positions"]
        if max_source_length is None:
            max_source_length = positions
        elif dims["positional"] == "learned":
            max_source_length = min(int(max_source_length), positions)
        if int(max_source_length) < 2:
            raise ValueError(
                f"Translator: max_source_length={max_source_length} leaves no room "
                "for a token and EOS"
            )
        return int(max_source_length)

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

    def _translate_ids(self, tokens):
        source, lengths = self._source_ids(tokens)
        if self.max_batch_tokens is None:
            ids, scores = self.searcher.search(source)
        else:  # bounded memory: sub-batches under the token budget, the same results
            ids, scores = search_in_sub_batches(
                self.searcher.search, source, self.max_batch_tokens, self.searcher.max_extra_length
            )
        if self.searcher.beam_size == 1:  # greedy: same tokens as a beam of 1; its score
            emitted = tf.reduce_sum(tf.cast(tf.not_equal(ids, PAD_ID), tf.int32), axis=1)
            scores = scores / length_penalty(emitted, self.searcher.alpha)
        empty = tf.equal(lengths, 0)
        ids = tf.where(tf.equal(ids, EOS_ID) | empty[:, None], PAD_ID, ids)
        return ids, tf.where(empty, 0.0, scores)

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
        """``[B]`` -> ``{"translations": [B, k], "scores": [B, k]}`` (``serving/outputs.py``)."""
        return outputs.nbest(self, self._tokenize(text))

    @tf.function(input_signature=[_TEXT])
    def translate_aligned(self, text):
        """``translate``'s outputs and ``"alignment"`` int32 ``[B, T]``: the attended source
        subword of every target subword (-1: padding; ``serving/outputs.py``)."""
        tokens = self._tokenize(text)
        ids, scores = self._translate_ids(tokens)
        alignment = outputs.alignments(self.model, self._source_ids(tokens)[0], ids)
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
        }
        # A Keras 3 variable is saved as a *new* tf.Variable built from the one the functions read
        # (keras/src/backend/tensorflow/core.py, Variable._export_to_saved_model_graph). The TF2
        # object loader (tf.saved_model.load, TFSMLayer) maps them back, but the graph loaders
        # (saved_model_cli run, TensorFlow Serving's C++ loader) restore only the new copies and
        # then fail with "Could not find variable decoder_block_0/...". Tracking the variables the
        # functions read (the model's weights; nothing else here holds one) saves those directly,
        # as keras.export.ExportArchive does.
        self.captured_variables = [weight.value for weight in self.model.weights]
        return functions

    def save(self, path) -> str:
        """Writes the SavedModel (its six signatures) and ``assets.extra/translator.json``:
        into a folder beside ``path``, renamed into place when complete (a killed export leaves
        no half-written SavedModel at ``path``; ``serving/atomic.py``)."""
        path = os.fspath(path)
        with atomic_folder(path) as folder:
            self._write(folder)
        return path

    def _write(self, folder):
        # No gradient functions: tf.custom_gradient's (the layer norm's fast path) were traced and
        # stored for a model nobody trains from its SavedModel (results/test_suite.md, session 15).
        # Asking for a gradient through the loaded model then fails, naming the op.
        options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
        tf.saved_model.save(self, os.fspath(folder), signatures=self.signatures(), options=options)
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

    The keyword arguments are :class:`Translator`'s (``beam_size``, ``alpha``,
    ``max_extra_length``, ``max_output_length``, ``max_source_length``, ``target_tokenizer``,
    ``max_input_chars``, ``jit_compile``, ``xla_max_batch``, ``drop_finished``,
    ``share_cross_cache``, ``dtype``, ``max_batch_tokens``). See the module docstring for the
    signatures and the input handling (truncation to ``max_source_length`` ids, EOS kept). The
    settings are also written, for people, to ``assets.extra/translator.json``.

    Example:

    >>> from keras_transformer import SubwordTokenizer
    >>> tokenizer = SubwordTokenizer.load("runs/multi30k/tokenizer")  # keras-transformer train
    >>> model = keras.models.load_model("runs/multi30k/averaged.keras")  # ... average
    >>> export_translator(model, tokenizer, "saved_models/en_de", beam_size=1)  # greedy
    'saved_models/en_de'
    """
    return Translator(model, tokenizer, **settings).save(path)


if __name__ == "__main__":
    sys.exit(saved_model_cli())
