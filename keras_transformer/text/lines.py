# The one reader of UTF-8 text files in the library: corpora, tokenizer training text, references.
"""Strict UTF-8 line reading (plain or ``.gz``) with errors that name the file and line.

Lines are split on ``"\\n"`` only, as ``tf.data.TextLineDataset`` splits them, so a file gives
the same number of lines here as in a ``tf.data`` pipeline; trailing ``"\\r"``/``"\\n"`` are
stripped (CRLF files read like LF files).

Example::

    from keras_transformer.text.lines import iter_lines, read_lines

    for line in iter_lines("multi30k/train.en.gz"):
        ...
    first_ten = read_lines("multi30k/val.de", limit=10)
"""

from __future__ import annotations

import gzip
import itertools
import os
from collections.abc import Iterator

__all__ = ["PathLike", "DataError", "MissingDataError", "iter_lines", "read_lines"]

#: A file path as the readers take it.
PathLike = str | os.PathLike

#: Bytes shown on each side of an undecodable byte in a ``DataError`` message.
_CONTEXT_BYTES = 10


class DataError(ValueError):
    """A corpus that cannot be read as asked (misaligned, not UTF-8, wrong columns, ...)."""


class MissingDataError(DataError, FileNotFoundError):
    """A corpus file, split or shard set that does not exist; the message names the path."""


def _open_binary(path: str):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def _decode(raw: bytes, path: str, line_number: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        context = raw[max(0, err.start - _CONTEXT_BYTES) : err.start + _CONTEXT_BYTES]
        raise DataError(
            f"{path}, line {line_number}: not valid UTF-8 ({err.reason} at byte {err.start}: "
            f"{context!r})"
        ) from None


def _lines(path: str) -> Iterator[str]:
    with _open_binary(path) as handle:
        for line_number, raw in enumerate(handle, start=1):
            yield _decode(raw, path, line_number).rstrip("\r\n")


def iter_lines(path: PathLike, *, what: str = "text file") -> Iterator[str]:
    """The lines of a UTF-8 text file (``.gz`` read as gzip), without their line endings.

    Raises ``MissingDataError`` ("<what> not found: <path>") at once when the file does not
    exist, and ``DataError`` naming the file and the 1-based line of the first line that is not
    valid UTF-8 when iteration reaches it.

    Example::

        sum(1 for _ in iter_lines("multi30k/val.en"))   # 1014
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise MissingDataError(f"{what} not found: {path}")
    return _lines(path)


def read_lines(path: PathLike, limit: int | None = None, *, what: str = "text file") -> list:
    """The first ``limit`` lines (all when None) of a UTF-8 text file, as ``iter_lines`` reads.

    Example::

        read_lines("multi30k/test_2016_flickr.en", limit=2)   # ["A man in an orange hat ...", ...]
    """
    lines = iter_lines(path, what=what)
    if limit is None:
        return list(lines)
    if limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    try:
        return list(itertools.islice(lines, limit))
    finally:
        lines.close()  # closes the file when the limit stopped short of its end
