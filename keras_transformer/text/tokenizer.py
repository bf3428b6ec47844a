# Subword tokenizer shared by source and target (paper section 5.1: "sentences were encoded using
# byte-pair encoding, which has a shared source-target vocabulary of about 37000 tokens").
#
# The vocabulary is trained with the `sentencepiece` package and applied through
# `tensorflow_text.SentencepieceTokenizer`, so tokenization runs inside `tf.data.Dataset.map` and
# inside a `tf.function` with a `tf.string` input signature (the serving export embeds this module).
"""Subword tokenizer: train a shared SentencePiece vocabulary; tokenize/detokenize in TensorFlow.

Reserved ids (defined in ``text/vocabulary.py``, the one place; importable from here too)::

    PAD_ID = 0   padding, never produced by ``tokenize``
    UNK_ID = 1   unknown piece (rare: byte fallback covers characters unseen in training)
    BOS_ID = 2   start of a decoder input sequence ("<s>")
    EOS_ID = 3   end of sequence ("</s>")

Example::

    tok = SubwordTokenizer.train(["data/train.en", "data/train.de"], vocab_size=8000,
                                 output_dir="runs/tok")
    ids = tok.tokenize(["A man in an orange hat."])      # tf.RaggedTensor int32, no BOS/EOS
    tok.detokenize(ids)                                   # [b"A man in an orange hat."]
    tok.save("runs/tok/saved")                            # self-contained SavedModel folder
    tok2 = SubwordTokenizer.load("runs/tok/saved")
"""

from __future__ import annotations

import io
import os
import pathlib
from collections.abc import Sequence

import sentencepiece as spm
import tensorflow as tf

from keras_transformer.text.files import atomic_write_bytes, atomic_write_text
from keras_transformer.text.lines import DataError, PathLike
from keras_transformer.text.sentencepiece_model import (
    EXTRA_MODEL_FILE,
    graph_tokenizer,
    read_model_proto,
    sample_sentences,
    training_text,
)
from keras_transformer.text.urlpath import as_path
from keras_transformer.text.vocabulary import (
    BOS_ID,
    BOS_PIECE,
    EOS_ID,
    EOS_PIECE,
    PAD_ID,
    PAD_PIECE,
    TOKENIZER_DIR,
    UNK_ID,
    UNK_PIECE,
)

__all__ = [
    "PAD_ID",
    "UNK_ID",
    "BOS_ID",
    "EOS_ID",
    "PAD_PIECE",
    "UNK_PIECE",
    "BOS_PIECE",
    "EOS_PIECE",
    "SubwordTokenizer",
    "TOKENIZER_DIR",
    "with_eos",
]


def with_eos(ids, max_length=None):
    """First ``max_length - 1`` subwords of each row, then ``EOS_ID``: a model sequence.

    Every sequence the model reads or learns ends in EOS and fits ``max_length`` positions
    (EOS included); with ``max_length=None`` nothing is cut. ``ids`` is a ``tf.RaggedTensor``
    ``[batch, (n)]`` (returns a RaggedTensor of its dtype; works inside ``tf.function`` and
    ``tf.data``, ``max_length`` may be a scalar tensor there) or a list of id lists (returns a
    list of lists of ``int``).

    Example::

        with_eos([[17, 5, 9], [23]], max_length=3)   # [[17, 5, 3], [23, 3]]
        with_eos(tf.ragged.constant([[17, 5, 9]]))  # <tf.RaggedTensor [[17, 5, 9, 3]]>
    """
    if isinstance(max_length, int) and max_length < 1:
        raise ValueError(f"max_length={max_length} leaves no room for EOS")
    if isinstance(ids, tf.RaggedTensor):
        if max_length is not None:
            ids = ids[:, : max_length - 1]
        eos = tf.fill([ids.nrows(), 1], tf.constant(EOS_ID, ids.dtype))
        column = tf.RaggedTensor.from_tensor(eos, row_splits_dtype=ids.row_splits.dtype)
        return tf.concat([ids, column], axis=1)
    cut = None if max_length is None else max_length - 1
    return [[int(token) for token in list(row)[:cut]] + [EOS_ID] for row in ids]


class SubwordTokenizer(tf.Module):
    """Shared source/target subword tokenizer (SentencePiece) usable inside TensorFlow graphs.

    Construct it from a serialized SentencePiece model (``bytes``), a ``.model`` file path or a
    folder written by :meth:`save`; or train a new one with :meth:`train`.

    * ``tokenize(strings)``: 1-D ``tf.string`` batch -> ``tf.RaggedTensor`` int32 ``[batch, (n)]``.
      No BOS/EOS are added (the data pipeline adds them).
    * ``detokenize(ids)``: ``tf.RaggedTensor`` or dense padded ``tf.Tensor`` int32/int64
      ``[batch, length]`` -> ``tf.string [batch]``. PAD and BOS are dropped and each row stops at
      its first EOS, so raw decoder output can be passed as is. Pass tensors or NumPy arrays (a
      Python list is traced by value by ``tf.function``).
    * ``pieces(ids)``: int32 ``[n]`` -> the pieces as ``tf.string [n]`` (attention plot labels).

    All three are ``tf.function``s, so a module that holds this tokenizer as an attribute can call
    them inside its own ``tf.function`` and be exported with ``tf.saved_model.save``. The model
    proto is a tracked ``tf.string`` variable: saved folders are self-contained and movable.

    Example::

        tok = SubwordTokenizer.train(["train.en", "train.de"], 8000, "runs/tok")
        ids = tok.tokenize(tf.constant(["Two dogs play in the snow."]))
        assert tok.detokenize(ids).numpy()[0] == b"Two dogs play in the snow."
        tok.pieces(ids[0])     # [b"\\xe2\\x96\\x81Two", b"\\xe2\\x96\\x81dogs", ...]

    Create it outside a ``tf.distribute`` strategy scope (it holds a string variable).
    """

    def __init__(self, model, name: str | None = None):
        super().__init__(name=name or "subword_tokenizer")
        proto = read_model_proto(model)
        processor = spm.SentencePieceProcessor(model_proto=proto)
        self._check_reserved_ids(processor)
        self._processor = processor
        self._proto = proto
        #: Path of the ``.model`` file when trained or loaded from one, else None.
        self.model_path: str | None = None
        with tf.init_scope(), tf.device("/CPU:0"):
            self._sentencepiece_model = tf.Variable(
                proto, dtype=tf.string, trainable=False, name="sentencepiece_model"
            )
        self._sp = graph_tokenizer(proto)
        # Trace the signatures that a SavedModel should carry (dense and ragged, int32 and int64).
        for dtype in (tf.int32, tf.int64):
            self.detokenize.get_concrete_function(tf.TensorSpec([None, None], dtype))
            self.detokenize.get_concrete_function(
                tf.RaggedTensorSpec([None, None], dtype, ragged_rank=1, row_splits_dtype=tf.int64)
            )
        self.get_vocab_size.get_concrete_function()

    @staticmethod
    def _check_reserved_ids(processor: spm.SentencePieceProcessor) -> None:
        expected = {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID}
        actual = {
            "pad": processor.pad_id(),
            "unk": processor.unk_id(),
            "bos": processor.bos_id(),
            "eos": processor.eos_id(),
        }
        if actual != expected:
            raise ValueError(
                f"SentencePiece model has reserved ids {actual}, this library needs {expected}: "
                "train it with SubwordTokenizer.train (pad_id=0 unk_id=1 bos_id=2 eos_id=3)"
            )

    # ------------------------------------------------------------------ training and persistence

    @classmethod
    def train(
        cls,
        texts_or_files,
        vocab_size: int = 8000,
        output_dir: PathLike | None = None,
        *,
        model_type: str = "bpe",
        model_prefix: str = "sentencepiece",
        character_coverage: float = 1.0,
        byte_fallback: bool = True,
        normalization_rule_name: str = "identity",
        max_sentences: int = 2_000_000,
        seed: int = 0,
        num_threads: int = 1,
        extra_options: dict | None = None,
    ) -> SubwordTokenizer:
        """Train a shared vocabulary on source and target training text and return the tokenizer.

        Args:
          texts_or_files: file paths (plain or ``.gz``, one sentence per line; ``pathlib.Path``
            or an existing file's ``str``), an iterable of sentences, or a ``tf.data.Dataset`` of
            ``tf.string``. Pass both languages' training files for a shared vocabulary.
          vocab_size: number of pieces including the 4 reserved ids and 256 byte pieces.
          output_dir: where ``{model_prefix}.model`` and ``.vocab`` are written (created if
            needed); None keeps the model in memory only.
          model_type: ``"bpe"`` (default, as the paper) or ``"unigram"``.
          character_coverage: 1.0 keeps every character seen (right for Latin scripts).
          byte_fallback: unseen characters become UTF-8 byte pieces instead of UNK, so
            ``detokenize(tokenize(s)) == s`` also holds for out-of-domain text.
          normalization_rule_name: ``"identity"`` keeps text exactly (case, punctuation, Unicode
            form; only runs of spaces and leading/trailing spaces collapse); ``"nmt_nfkc"``
            applies NFKC, which changes some characters on round trip. With the defaults,
            ``detokenize(tokenize(s)) == s`` for 99.7-100 % of Multi30k and newstest2014 lines.
          max_sentences: at most this many non-empty lines (a seeded reservoir sample) are used.
          seed: seeds the sample and SentencePiece's random generator.
          num_threads: SentencePiece trainer threads (1 keeps training bit-for-bit repeatable).
          extra_options: more ``SentencePieceTrainer.train`` keyword arguments.

        Example::

            tok = SubwordTokenizer.train(["multi30k/train.en", "multi30k/train.de"], 8000, "tok")
        """
        sentences = sample_sentences(training_text(texts_or_files), max_sentences, seed)
        if not sentences:
            named = texts_or_files if isinstance(texts_or_files, (list, tuple)) else []
            files = ", ".join(str(f) for f in named if isinstance(f, (str, os.PathLike)))
            raise DataError(f"no training text: every input line was empty ({files or 'text'})")
        spm.set_random_generator_seed(seed)
        writer = io.BytesIO()
        options = dict(
            sentence_iterator=iter(sentences),
            model_writer=writer,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            byte_fallback=byte_fallback,
            normalization_rule_name=normalization_rule_name,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            pad_piece=PAD_PIECE,
            unk_piece=UNK_PIECE,
            bos_piece=BOS_PIECE,
            eos_piece=EOS_PIECE,
            num_threads=num_threads,
            shuffle_input_sentence=False,
            input_sentence_size=0,
            minloglevel=2,
        )
        options.update(extra_options or {})
        try:
            spm.SentencePieceTrainer.train(**options)
        except RuntimeError as err:
            raise ValueError(f"SentencePiece training failed: {err}") from err
        tokenizer = cls(writer.getvalue())
        if output_dir is not None:
            tokenizer.model_path = tokenizer.write_model(
                pathlib.Path(output_dir) / f"{model_prefix}.model"
            )
        return tokenizer

    def write_model(self, path: PathLike) -> str:
        """Write the SentencePiece ``.model`` (and a ``.vocab`` listing) atomically; return path."""
        path = pathlib.Path(path)
        atomic_write_bytes(path, self._proto)
        vocab = path.with_suffix(".vocab")
        lines = [
            f"{self._processor.id_to_piece(i)}\t{self._processor.get_score(i):g}\n"
            for i in range(self.vocab_size)
        ]
        atomic_write_text(vocab, "".join(lines))
        return str(path)

    def save(self, path: PathLike) -> str:
        """Save as a self-contained SavedModel folder (plus ``assets.extra/sentencepiece.model``).

        ``tf.saved_model.load(path)`` gives an object with ``tokenize``, ``detokenize``, ``pieces``
        and ``get_vocab_size``; :meth:`load` gives back a full ``SubwordTokenizer``.
        """
        path = pathlib.Path(path)
        tf.saved_model.save(self, str(path))
        extra = path / EXTRA_MODEL_FILE
        extra.parent.mkdir(parents=True, exist_ok=True)
        extra.write_bytes(self._proto)
        return str(path)

    @classmethod
    def load(cls, path: PathLike) -> SubwordTokenizer:
        """Load from a folder written by :meth:`save` (or any SavedModel embedding one tokenizer),
        or from a ``.model`` file; either may be at a URL (``gs://...``, read by ``tf.io.gfile``).

        Example::

            tok = SubwordTokenizer.load("runs/tok/saved")
        """
        tokenizer = cls(read_model_proto(path))
        if as_path(path).is_file():
            tokenizer.model_path = str(path)
        return tokenizer

    # ------------------------------------------------------------------ properties

    @property
    def vocab_size(self) -> int:
        """Number of ids (reserved ids included); the model's embedding size."""
        return self._processor.get_piece_size()

    @property
    def model_proto(self) -> bytes:
        """The serialized SentencePiece model."""
        return self._proto

    def id_to_piece(self, token_id: int) -> str:
        """The piece (as text) of one id, e.g. ``"\u2581dog"``."""
        return self._processor.id_to_piece(int(token_id))

    def piece_to_id(self, piece: str) -> int:
        """Id of a piece, ``UNK_ID`` if the piece is not in the vocabulary."""
        return self._processor.piece_to_id(piece)

    def encode(self, text: str) -> list:
        """Python-side tokenization of one string (no TensorFlow), same ids as ``tokenize``."""
        return self._processor.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        """Python-side detokenization, as ``detokenize`` (PAD/BOS dropped, stops at EOS)."""
        kept = []
        for token in ids:
            token = int(token)
            if token == EOS_ID:
                break
            if token not in (PAD_ID, BOS_ID):
                kept.append(token)
        return self._processor.decode(kept)

    # ------------------------------------------------------------------ graph functions

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="strings")])
    def tokenize(self, strings):
        """``tf.string [batch]`` -> ``tf.RaggedTensor`` int32 ``[batch, (tokens)]``, no BOS/EOS."""
        return self._sp.tokenize(strings)

    # autograph=False: the body has no tensor-dependent Python control flow, and autograph's
    # converted call once handed it TfMethodTarget as ``self`` (TF 2.21, in a notebook kernel).
    @tf.function(reduce_retracing=True, autograph=False)
    def detokenize(self, ids):
        """int ids ``[batch, length]`` (ragged or dense padded) -> ``tf.string [batch]``.

        PAD and BOS are dropped and a row ends at its first EOS. Any rank >= 1 works: a 1-D
        input gives a scalar string.
        """
        if isinstance(ids, tf.RaggedTensor):
            dense = ids.to_tensor(default_value=PAD_ID)
        else:
            dense = tf.convert_to_tensor(ids)
        dense = tf.cast(dense, tf.int32)
        outer_shape = tf.shape(dense)[:-1]
        # Any rank >= 1 (also unknown at trace time) -> [rows, length] -> strings of outer_shape.
        # An explicit row count: with -1, a [0, 0] batch would become one empty row.
        rows = tf.reshape(dense, tf.stack([tf.reduce_prod(outer_shape), tf.shape(dense)[-1]]))
        before_eos = tf.math.cumsum(tf.cast(rows == EOS_ID, tf.int32), axis=1) == 0
        keep = before_eos & (rows != PAD_ID) & (rows != BOS_ID)
        text = self._sp.detokenize(tf.ragged.boolean_mask(rows, keep))
        return tf.reshape(text, outer_shape)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32, name="ids")])
    def pieces(self, ids):
        """int32 ids ``[n]`` -> their pieces ``tf.string [n]`` (``"<s>"``, ``"\u2581dog"``, ...)."""
        return self._sp.id_to_string(ids)

    @tf.function(input_signature=[])
    def get_vocab_size(self):
        """Vocabulary size as an int32 scalar tensor (usable on a reloaded SavedModel)."""
        return self._sp.vocab_size()

    def __repr__(self) -> str:
        return f"SubwordTokenizer(vocab_size={self.vocab_size})"
