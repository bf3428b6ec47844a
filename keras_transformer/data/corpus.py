# Paper section 5.1, "Training Data and Batching": the sentence pairs before tokenization. Three
# sources, one output: a tf.data.Dataset of (source, target) strings, checked before use.
"""Read parallel corpora: line-aligned files, TSV files, tensorflow-datasets; validate them.

Every reader returns a ``tf.data.Dataset`` of ``(source, target)`` ``tf.string`` pairs and
fails early with an error that names the file (and line): ``MissingDataError`` for a path,
split or dataset that does not exist, ``DataError`` for misaligned files, a line that is not
UTF-8 or a TSV line with too few columns.

Example::

    pairs = read_parallel_text("multi30k/train.en", "multi30k/train.de")
    pairs = read_tsv("spa-eng.tsv", source_column=0, target_column=1)
    pairs = load_tfds("ted_hrlr_translate/pt_to_en", "validation", "pt", "en")
"""

from __future__ import annotations

import os

import tensorflow as tf

from keras_transformer.text.lines import DataError, MissingDataError, PathLike, iter_lines
from keras_transformer.text.urlpath import as_path

__all__ = [
    "MULTI30K_SPLITS",
    "validate_parallel_files",
    "validate_tsv_file",
    "read_parallel_text",
    "read_tsv",
    "load_tfds",
]

AUTOTUNE = tf.data.AUTOTUNE

#: Multi30k task 1 (Elliott et al. 2016): split name -> file stem (``<stem>.en``, ``<stem>.de``).
MULTI30K_SPLITS = {"train": "train", "validation": "val", "test": "test_2016_flickr"}


def _compression(path: str) -> str:
    return "GZIP" if path.endswith(".gz") else ""


def _require_file(path: PathLike, what: str = "corpus file") -> str:
    path = os.fspath(path)
    if not as_path(path).is_file():  # a URL (gs://...) through tf.io.gfile
        raise MissingDataError(f"{what} not found: {path}")
    return path


def _count_lines(path: str, what: str) -> int:
    """Lines of a UTF-8 file, counted as ``TextLineDataset`` counts them."""
    return sum(1 for _ in iter_lines(path, what=what))


def validate_parallel_files(source_path: PathLike, target_path: PathLike) -> int:
    """Check that two line-aligned files exist, are UTF-8 and have equal line counts.

    Returns the number of lines (pairs). Raises ``MissingDataError`` naming a missing path, or
    ``DataError`` naming both files and both counts, or the file and line of a non-UTF-8 line.

    Example::

        validate_parallel_files("multi30k/train.en", "multi30k/train.de")   # 29000
    """
    source_path = _require_file(source_path, "source file")
    target_path = _require_file(target_path, "target file")
    source_lines = _count_lines(source_path, "source file")
    target_lines = _count_lines(target_path, "target file")
    if source_lines != target_lines:
        raise DataError(
            f"parallel files differ in line count: {source_path} has {source_lines} lines, "
            f"{target_path} has {target_lines} lines"
        )
    return source_lines


def validate_tsv_file(path: PathLike, source_column: int = 0, target_column: int = 1) -> int:
    """Check that a TSV file is UTF-8 with both columns on every line; return its line count.

    Raises ``MissingDataError`` naming a missing path, or ``DataError`` naming the file and line
    of a non-UTF-8 line or of a line with too few tab-separated columns.

    Example::

        validate_tsv_file("spa-eng.tsv", 0, 1)
    """
    path = _require_file(path, "TSV file")
    min_columns = max(source_column, target_column) + 1
    count = 0
    for count, line in enumerate(iter_lines(path, what="TSV file"), start=1):
        columns = line.count("\t") + 1
        if columns < min_columns:
            raise DataError(
                f"{path}, line {count}: {columns} tab-separated column(s), "
                f"need at least {min_columns}"
            )
    return count


def read_parallel_text(
    source_path: PathLike, target_path: PathLike, *, validate: bool = True
) -> tf.data.Dataset:
    """Line-aligned source and target files (plain or ``.gz``) -> dataset of string pairs.

    With ``validate`` (default) both files are read once first: a ``DataError`` names both files
    and both line counts when they differ, or the file and line number of a non-UTF-8 line;
    ``MissingDataError`` names a missing path.

    Example::

        pairs = read_parallel_text("multi30k/train.en", "multi30k/train.de")
        next(iter(pairs))   # (b"Two young, White males are outside near many bushes.", b"Zwei ...")
    """
    source_path = _require_file(source_path, "source file")
    target_path = _require_file(target_path, "target file")
    if validate:
        validate_parallel_files(source_path, target_path)
    source = tf.data.TextLineDataset(source_path, compression_type=_compression(source_path))
    target = tf.data.TextLineDataset(target_path, compression_type=_compression(target_path))
    return tf.data.Dataset.zip((source, target))


def read_tsv(
    path: PathLike,
    source_column: int = 0,
    target_column: int = 1,
    *,
    skip_header: bool = False,
    validate: bool = True,
) -> tf.data.Dataset:
    """Tab-separated file (plain or ``.gz``) -> dataset of (source, target) string pairs.

    With ``validate`` a ``DataError`` names the file and line of a non-UTF-8 line or a line
    with too few columns.

    Example::

        pairs = read_tsv("spa-eng.tsv", source_column=0, target_column=1)
    """
    path = _require_file(path, "TSV file")
    if source_column < 0 or target_column < 0:
        raise ValueError("column indices must be >= 0")
    if validate:
        validate_tsv_file(path, source_column, target_column)
    lines = tf.data.TextLineDataset(path, compression_type=_compression(path))
    if skip_header:
        lines = lines.skip(1)

    def split(line):
        fields = tf.strings.split(line, "\t")
        return fields[source_column], fields[target_column]

    return lines.map(split, num_parallel_calls=AUTOTUNE)


def _tfds_builder(name: str, data_dir: PathLike | None, source_lang: str, target_lang: str):
    """The ``tfds`` builder of ``name``, checked to hold both languages."""
    import tensorflow_datasets as tfds

    try:
        builder = tfds.builder(name, data_dir=None if data_dir is None else os.fspath(data_dir))
    except Exception as err:  # DatasetNotFoundError and friends
        raise MissingDataError(f"unknown tensorflow-datasets dataset {name!r}: {err}") from err
    languages = sorted(builder.info.features.keys())
    for lang in (source_lang, target_lang):
        if lang not in languages:
            raise DataError(f"{name} has languages {languages}, not {lang!r}")
    if source_lang == target_lang:
        raise DataError(f"source and target language are both {source_lang!r}")
    return builder


def load_tfds(
    name: str,
    split: str,
    source_lang: str,
    target_lang: str,
    data_dir: PathLike | None = None,
    download: bool = False,
    *,
    shuffle_files: bool = False,
) -> tf.data.Dataset:
    """A tensorflow-datasets translation dataset -> dataset of (source, target) string pairs.

    The direction is the caller's choice: ``wmt14_translate/de-en`` with ``source_lang="en"``,
    ``target_lang="de"`` gives English -> German. Without ``download`` the data must already be
    prepared under ``data_dir``; a ``MissingDataError`` names the folder otherwise.

    Example::

        pairs = load_tfds("ted_hrlr_translate/pt_to_en", "validation", "pt", "en")
    """
    builder = _tfds_builder(name, data_dir, source_lang, target_lang)
    if download:
        builder.download_and_prepare()
    try:
        examples = builder.as_dataset(split=split, shuffle_files=shuffle_files)
    except AssertionError as err:
        raise MissingDataError(
            f"{name}: no prepared data in {builder.data_dir}; run with download=True on a machine "
            f"with internet access or point data_dir at a prepared copy ({err})"
        ) from err
    except (KeyError, ValueError) as err:
        known = sorted(builder.info.splits.keys()) if builder.info.splits else "unknown"
        raise MissingDataError(
            f"{name}: split {split!r} not found (splits: {known}): {err}"
        ) from err
    return examples.map(
        lambda example: (example[source_lang], example[target_lang]), num_parallel_calls=AUTOTUNE
    )
