# Subword tokenizer shared by source and target (paper section 5.1: "sentences were encoded using
# byte-pair encoding, which has a shared source-target vocabulary of about 37000 tokens").
#
# The vocabulary is trained with the `sentencepiece` package and applied through
# `tensorflow_text.SentencepieceTokenizer`, so tokenization runs inside `tf.data.Dataset.map` and
# inside a `tf.function` with a `tf.string` input signature (the serving export embeds this module).
"""Subword tokenizer: train a shared SentencePiece vocabulary; tokenize/detokenize in TensorFlow.

Reserved ids (the ONE place they are defined; everything else imports them from here)::

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

import gzip
import hashlib
import io
import os
import pathlib
import random
from typing import Iterable, Iterator, Sequence, Union

import sentencepiece as spm
import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.python.ops import sentencepiece_tokenizer as _tf_text_sentencepiece

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
]

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
PAD_PIECE = "<pad>"
UNK_PIECE = "<unk>"
BOS_PIECE = "<s>"
EOS_PIECE = "</s>"

#: Name of the tracked string variable holding the serialized SentencePiece model. `load` looks for
#: a checkpoint key ending in this name, so it also finds the tokenizer inside a bigger SavedModel.
_MODEL_VARIABLE = "_sentencepiece_model"
_MODEL_KEY_SUFFIX = f"{_MODEL_VARIABLE}/.ATTRIBUTES/VARIABLE_VALUE"
#: Plain copy of the model written next to a saved tokenizer, for tools outside TensorFlow.
_EXTRA_MODEL_FILE = os.path.join("assets.extra", "sentencepiece.model")

PathLike = Union[str, os.PathLike]


def _open_text(path: PathLike):
    path = os.fspath(path)
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def _iter_file_lines(path: PathLike) -> Iterator[str]:
    with _open_text(path) as handle:
        for line_number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(
                    f"{os.fspath(path)}, line {line_number}: not valid UTF-8 ({err.reason} at byte "
                    f"{err.start})"
                ) from None
            yield line.rstrip("\r\n")


def _looks_like_file(item) -> bool:
    if isinstance(item, os.PathLike):
        return True
    return (
        isinstance(item, str)
        and len(item) < 4096
        and "\n" not in item
        and os.path.isfile(item)
    )


def _iter_training_text(texts_or_files) -> Iterator[str]:
    if isinstance(texts_or_files, (str, os.PathLike)):
        texts_or_files = [texts_or_files]
    if isinstance(texts_or_files, tf.data.Dataset):
        for value in texts_or_files.as_numpy_iterator():
            yield value.decode("utf-8")
        return
    for item in texts_or_files:
        if _looks_like_file(item):
            if not os.path.isfile(os.fspath(item)):
                raise FileNotFoundError(f"tokenizer training file not found: {os.fspath(item)}")
            yield from _iter_file_lines(item)
        elif isinstance(item, bytes):
            yield item.decode("utf-8")
        else:
            yield str(item)


def _sample_sentences(texts: Iterable[str], max_sentences: int, seed: int) -> list:
    """Reservoir sample of at most ``max_sentences`` non-empty lines, in corpus order, seeded."""
    rng = random.Random(seed)
    reservoir: list = []
    seen = 0
    for text in texts:
        if not text.strip():
            continue
        if len(reservoir) < max_sentences:
            reservoir.append((seen, text))
        else:
            slot = rng.randint(0, seen)
            if slot < max_sentences:
                reservoir[slot] = (seen, text)
        seen += 1
    reservoir.sort()
    return [text for _, text in reservoir]


def _read_model_proto(model) -> bytes:
    """Serialized SentencePiece model from bytes, a ``.model`` file or a saved tokenizer folder."""
    if isinstance(model, (bytes, bytearray)):
        return bytes(model)
    if isinstance(model, tf.Tensor):
        return model.numpy()
    path = pathlib.Path(os.fspath(model))
    if path.is_dir():
        return _read_model_from_saved_model(path)
    if not path.is_file():
        raise FileNotFoundError(f"SentencePiece model not found: {path}")
    return path.read_bytes()


def _read_model_from_saved_model(path: pathlib.Path) -> bytes:
    extra = path / _EXTRA_MODEL_FILE
    if extra.is_file():
        return extra.read_bytes()
    prefix = path / "variables" / "variables"
    if (path / "variables" / "variables.index").is_file():
        keys = [name for name, _ in tf.train.list_variables(str(prefix))]
        matches = [k for k in keys if k.endswith(_MODEL_KEY_SUFFIX)]
        if len(matches) == 1:
            return tf.train.load_variable(str(prefix), matches[0])
        if len(matches) > 1:
            raise ValueError(f"{path} holds {len(matches)} tokenizers ({matches}); load one by key")
    models = sorted(path.glob("*.model"))
    if len(models) == 1:
        return models[0].read_bytes()
    raise FileNotFoundError(
        f"no tokenizer in {path}: expected a SavedModel written by SubwordTokenizer.save "
        "or a single *.model file"
    )


class _SharedSentencepieceResource(_tf_text_sentencepiece._SentencepieceModelResource):
    """The SentencePiece model resource under a shared name, so that it outlives the kernel cache.

    tensorflow-text creates the resource as private to its kernel; ``tf.random.set_seed`` (and so
    ``keras.utils.set_random_seed``) clears the eager kernel cache and with it the resource, after
    which every tokenizer call fails with "Resource localhost/_0_SentencepieceOp/... does not
    exist" (tensorflow/text#570). A ``shared_name`` makes the resource manager own it instead. The
    name is the model's sha256, so tokenizers with the same model share one resource.
    """

    def __init__(self, model: bytes):
        self._shared_name = "kt_sentencepiece_" + hashlib.sha256(model).hexdigest()[:32]
        super().__init__(model, None)

    def _create_resource(self):
        with tf.name_scope("SentenceTokenizerInitializer"):
            return _tf_text_sentencepiece.gen_sentencepiece_tokenizer.sentencepiece_op(
                model=self._model, shared_name=self._shared_name
            )


def _graph_tokenizer(proto: bytes) -> tf_text.SentencepieceTokenizer:
    tokenizer = tf_text.SentencepieceTokenizer(model=proto, out_type=tf.int32)
    # Swap in the shared-name resource (see _SharedSentencepieceResource). tensorflow-text is
    # pinned to TF's minor version; tests/test_tokenization.py fails if this attribute moves.
    if not hasattr(tokenizer, "_model_resource"):
        raise RuntimeError("tensorflow_text.SentencepieceTokenizer has no _model_resource: "
                           "update keras_transformer.tokenization for this tensorflow-text")
    tokenizer._model_resource = _SharedSentencepieceResource(proto)
    return tokenizer


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
        proto = _read_model_proto(model)
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
        self._sp = _graph_tokenizer(proto)
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
    ) -> "SubwordTokenizer":
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
        sentences = _sample_sentences(_iter_training_text(texts_or_files), max_sentences, seed)
        if not sentences:
            raise ValueError("no training text: every input line was empty")
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
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        tmp.write_bytes(self._proto)
        os.replace(tmp, path)
        vocab = path.with_suffix(".vocab")
        lines = [
            f"{self._processor.id_to_piece(i)}\t{self._processor.get_score(i):g}\n"
            for i in range(self.vocab_size)
        ]
        tmp = vocab.with_name(f"{vocab.name}.tmp-{os.getpid()}")
        tmp.write_text("".join(lines), encoding="utf-8")
        os.replace(tmp, vocab)
        return str(path)

    def save(self, path: PathLike) -> str:
        """Save as a self-contained SavedModel folder (plus ``assets.extra/sentencepiece.model``).

        ``tf.saved_model.load(path)`` gives an object with ``tokenize``, ``detokenize``, ``pieces``
        and ``get_vocab_size``; :meth:`load` gives back a full ``SubwordTokenizer``.
        """
        path = pathlib.Path(path)
        tf.saved_model.save(self, str(path))
        extra = path / _EXTRA_MODEL_FILE
        extra.parent.mkdir(parents=True, exist_ok=True)
        extra.write_bytes(self._proto)
        return str(path)

    @classmethod
    def load(cls, path: PathLike) -> "SubwordTokenizer":
        """Load from a folder written by :meth:`save` (or any SavedModel embedding one tokenizer),
        or from a ``.model`` file.

        Example::

            tok = SubwordTokenizer.load("runs/tok/saved")
        """
        tokenizer = cls(_read_model_proto(path))
        if pathlib.Path(path).is_file():
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

    @tf.function(reduce_retracing=True)
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
