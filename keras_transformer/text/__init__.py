# Paper section 5.1: a shared source-target vocabulary of byte-pair encodings.
"""Text before the model: the tokenizer and the files it reads and writes.

* ``tokenizer.py``: :class:`SubwordTokenizer`, the shared SentencePiece BPE as a ``tf.Module``,
  and ``with_eos``; ``sentencepiece_model.py`` (training and the TF ops) and
  ``sentencepiece_file.py`` (reading a model proto, no TensorFlow);
* ``vocabulary.py``: the reserved ids PAD 0, UNK 1, BOS 2, EOS 3 and their pieces (no TensorFlow);
* ``lines.py``: the one UTF-8 line reader, errors naming the file and line;
* ``urlpath.py``: ``gs://`` and other URLs as a small ``pathlib``-like path over ``tf.io.gfile``;
* ``files.py``: the one atomic write (files and folders, renamed into place).

The names load on first use (``keras_transformer.lazy``): ``vocabulary``, ``lines`` and
``files`` import no TensorFlow.
"""

from keras_transformer.lazy import lazy_names

__all__, __getattr__, __dir__ = lazy_names(
    __name__,
    {
        "tokenizer": ("SubwordTokenizer", "with_eos"),
        "vocabulary": ("BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID", "TOKENIZER_DIR"),
        "lines": ("DataError", "iter_lines", "read_lines"),
        "files": ("atomic_folder", "atomic_path", "atomic_write_bytes", "atomic_write_text"),
    },
)
