# Input pipeline (paper section 5.1: "Sentence pairs were batched together by approximate sequence
# length. Each training batch contained a set of sentence pairs containing approximately 25000
# source tokens and 25000 target tokens").
#
# raw text (line-aligned files, TSV, TFDS) or tokenized TFRecord shards -> tf.data pipeline that
# tokenizes in batches, drops empty / over-long pairs, buckets by length under a token budget and
# yields ({"source", "target"}, labels) for teacher-forced training.
"""tf.data input pipeline: read parallel corpora, tokenize, batch by token budget.

Model batches are ``({"source": int32[B, S], "target": int32[B, T]}, labels int32[B, T])``::

    source = ids(source sentence) + [EOS]
    target = [BOS] + ids(target sentence)        (decoder input, shifted right)
    labels = ids(target sentence) + [EOS]
    padding = PAD_ID (0) everywhere

Example::

    from keras_transformer import data
    from keras_transformer.tokenization import SubwordTokenizer

    tok = SubwordTokenizer.load("runs/tok/saved")
    pairs = data.read_parallel_text("multi30k/train.en", "multi30k/train.de")
    train = data.make_dataset(pairs, tok, tokens_per_batch=4096, seed=1)
    model.fit(train, ...)
"""

from __future__ import annotations

import glob
import gzip
import json
import os
from typing import Iterable, Sequence, Union

import tensorflow as tf

from keras_transformer.tokenization import BOS_ID, EOS_ID, PAD_ID

__all__ = [
    "DataError",
    "MissingDataError",
    "validate_parallel_files",
    "read_parallel_text",
    "read_tsv",
    "load_tfds",
    "tokenize_pairs",
    "count_pairs",
    "make_dataset",
    "make_fixed_batch_dataset",
    "bucket_boundaries",
    "padding_efficiency",
    "serialize_pair",
    "parse_pairs",
    "read_tfrecord_shards",
    "shard_files",
    "DROP_REASONS",
]

AUTOTUNE = tf.data.AUTOTUNE
PathLike = Union[str, os.PathLike]

#: Why ``count_pairs`` / the pipeline drop a pair; index = reason code used internally.
DROP_REASONS = ("kept", "empty", "too_long")

#: Sentences tokenized per SentencePiece call (batch -> tokenize -> unbatch is far faster than
#: tokenizing one example at a time).
TOKENIZE_BATCH = 1024

#: Shards read at the same time by ``read_tfrecord_shards``.
MAX_OPEN_SHARDS = 64

#: TFRecord shard features: token ids without BOS/EOS (added by ``make_dataset``).
TFRECORD_FEATURES = {
    "source": tf.io.RaggedFeature(tf.int64),
    "target": tf.io.RaggedFeature(tf.int64),
}


class DataError(ValueError):
    """A corpus that cannot be read as asked (misaligned, not UTF-8, wrong columns, ...)."""


class MissingDataError(DataError, FileNotFoundError):
    """A corpus file, split or shard set that does not exist; the message names the path."""


# ---------------------------------------------------------------------------- reading corpora


def _compression(path: str) -> str:
    return "GZIP" if path.endswith(".gz") else ""


def _open_binary(path: str):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def _require_file(path: PathLike, what: str = "corpus file") -> str:
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise MissingDataError(f"{what} not found: {path}")
    return path


def _scan_text_file(path: str, min_columns: int = 0) -> int:
    """Count lines like ``TextLineDataset`` does; check UTF-8 (and TSV columns). Returns count."""
    count = 0
    with _open_binary(path) as handle:
        for count, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(
                    f"{path}, line {count}: not valid UTF-8 ({err.reason} at byte {err.start}: "
                    f"{raw[max(0, err.start - 10):err.start + 10]!r})"
                ) from None
            if min_columns:
                columns = line.rstrip("\r\n").count("\t") + 1
                if columns < min_columns:
                    raise DataError(
                        f"{path}, line {count}: {columns} tab-separated column(s), "
                        f"need at least {min_columns}"
                    )
    return count


def validate_parallel_files(source_path: PathLike, target_path: PathLike) -> int:
    """Check that two line-aligned files exist, are UTF-8 and have equal line counts.

    Returns the number of lines (pairs). Raises ``MissingDataError`` naming a missing path, or
    ``DataError`` naming both files and both counts, or the file and line of a non-UTF-8 line.

    Example::

        validate_parallel_files("multi30k/train.en", "multi30k/train.de")   # 29000
    """
    source_path = _require_file(source_path, "source file")
    target_path = _require_file(target_path, "target file")
    source_lines = _scan_text_file(source_path)
    target_lines = _scan_text_file(target_path)
    if source_lines != target_lines:
        raise DataError(
            f"parallel files differ in line count: {source_path} has {source_lines} lines, "
            f"{target_path} has {target_lines} lines"
        )
    return source_lines


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
        _scan_text_file(path, min_columns=max(source_column, target_column) + 1)
    lines = tf.data.TextLineDataset(path, compression_type=_compression(path))
    if skip_header:
        lines = lines.skip(1)

    def split(line):
        fields = tf.strings.split(line, "\t")
        return fields[source_column], fields[target_column]

    return lines.map(split, num_parallel_calls=AUTOTUNE)


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


# ---------------------------------------------------------------------------- tokenized pairs


def _is_text(pairs: tf.data.Dataset) -> bool:
    specs = pairs.element_spec
    if not (isinstance(specs, tuple) and len(specs) == 2):
        raise TypeError(f"expected a dataset of (source, target) pairs, got {specs}")
    dtypes = {spec.dtype for spec in specs}
    if dtypes == {tf.string}:
        return True
    if all(d.is_integer for d in dtypes):
        return False
    raise TypeError(f"pairs must be two strings or two int id sequences, got {specs}")


def _batched_ids(pairs, tokenizer, deterministic, batch_size=TOKENIZE_BATCH):
    """(source, target) strings or id vectors -> batches of ragged int32 id pairs."""
    if _is_text(pairs):
        if tokenizer is None:
            raise ValueError("text pairs need a tokenizer")

        def tokenize(source, target):
            return tokenizer.tokenize(source), tokenizer.tokenize(target)

        return pairs.batch(batch_size).map(
            tokenize, num_parallel_calls=AUTOTUNE, deterministic=deterministic
        )

    def to_int32(source, target):
        return (
            tf.cast(tf.RaggedTensor.from_tensor(source) if isinstance(source, tf.Tensor)
                    else source, tf.int32),
            tf.cast(tf.RaggedTensor.from_tensor(target) if isinstance(target, tf.Tensor)
                    else target, tf.int32),
        )

    return pairs.ragged_batch(batch_size).map(
        to_int32, num_parallel_calls=AUTOTUNE, deterministic=deterministic
    )


def _reasons(source, target, max_length):
    """Reason codes (index into DROP_REASONS) for a batch of ragged id pairs."""
    source_length = source.row_lengths()
    target_length = target.row_lengths()
    empty = (source_length == 0) | (target_length == 0)
    too_long = (source_length + 1 > max_length) | (target_length + 1 > max_length)
    return tf.where(empty, 1, tf.where(too_long, 2, 0))


def tokenize_pairs(
    pairs: tf.data.Dataset, tokenizer, *, deterministic: bool | None = None
) -> tf.data.Dataset:
    """String pairs -> (source_ids, target_ids) int32 vectors, no BOS/EOS, nothing dropped.

    Tokenizes in batches of ``TOKENIZE_BATCH`` sentences in parallel. Id pairs pass through
    (cast to int32).

    Example::

        ids = tokenize_pairs(read_parallel_text("train.en", "train.de"), tok)
    """
    return _batched_ids(pairs, tokenizer, deterministic).unbatch().map(
        lambda s, t: (_as_dense(s), _as_dense(t))
    )


def _as_dense(x):
    return x.to_tensor() if isinstance(x, tf.RaggedTensor) else x


def count_pairs(pairs: tf.data.Dataset, tokenizer=None, max_length: int = 256) -> dict:
    """Count the pairs that ``make_dataset`` keeps and drops, by reason.

    Returns ``{"total", "kept", "empty", "too_long", "source_tokens", "target_tokens"}`` (token
    counts of kept pairs, without EOS/BOS). ``empty``: either side has no tokens; ``too_long``:
    either side needs more than ``max_length`` positions with its EOS/BOS.

    Example::

        count_pairs(read_parallel_text("train.en", "train.de"), tok, max_length=128)
    """

    def counts(source, target):
        reason = _reasons(source, target, max_length)
        kept = reason == 0
        by_reason = tf.math.bincount(
            tf.cast(reason, tf.int32), minlength=len(DROP_REASONS), maxlength=len(DROP_REASONS),
            dtype=tf.int64,
        )
        tokens = tf.stack([
            tf.reduce_sum(tf.where(kept, source.row_lengths(), 0)),
            tf.reduce_sum(tf.where(kept, target.row_lengths(), 0)),
        ])
        return tf.concat([by_reason, tf.cast(tokens, tf.int64)], axis=0)

    batches = _batched_ids(pairs, tokenizer, deterministic=False).map(
        counts, num_parallel_calls=AUTOTUNE, deterministic=False
    )
    total = batches.reduce(tf.zeros([len(DROP_REASONS) + 2], tf.int64), lambda a, b: a + b)
    values = [int(v) for v in total.numpy()]
    result = dict(zip(DROP_REASONS, values))
    result["total"] = sum(values[: len(DROP_REASONS)])
    result["source_tokens"], result["target_tokens"] = values[len(DROP_REASONS):]
    return result


def _model_sequences(pairs, tokenizer, max_length, deterministic):
    """Pairs -> kept examples (source + EOS, target + EOS) as int32 vectors."""
    eos = tf.constant([[EOS_ID]], tf.int32)

    def add_eos_and_filter(source, target):
        keep = _reasons(source, target, max_length) == 0
        source = tf.ragged.boolean_mask(source, keep)
        target = tf.ragged.boolean_mask(target, keep)
        column = tf.RaggedTensor.from_tensor(tf.tile(eos, [source.nrows(), 1]))
        return tf.concat([source, column], axis=1), tf.concat([target, column], axis=1)

    batches = _batched_ids(pairs, tokenizer, deterministic).map(
        add_eos_and_filter, num_parallel_calls=AUTOTUNE, deterministic=deterministic
    )
    return batches.unbatch().map(lambda s, t: (_as_dense(s), _as_dense(t)))


def _to_model_batch(source, labels):
    """Padded (source + EOS, target + EOS) -> ({"source", "target"}, labels)."""
    batch = tf.shape(labels)[0]
    shifted = tf.concat([tf.fill([batch, 1], BOS_ID), labels[:, :-1]], axis=1)
    target = tf.where(shifted == EOS_ID, PAD_ID, shifted)  # the EOS moved right becomes padding
    return {"source": source, "target": target}, labels


def bucket_boundaries(max_length: int = 256, growth: float = 1.1, start: int = 2) -> list:
    """Length bucket boundaries: every length up to ~20, then ~10 % apart, all < max_length.

    Example::

        bucket_boundaries(32)   # [2, 3, 4, ..., 20, 22, 24, 26, 28, 30]
    """
    boundaries, bound = [], start
    while bound < max_length:
        boundaries.append(bound)
        bound = max(bound + 1, int(bound * growth))
    return boundaries


def _prepare(pairs, tokenizer, max_length, shuffle, shuffle_buffer, seed, deterministic, repeat,
             cache):
    if max_length < 2:
        raise ValueError(f"max_length={max_length} leaves no room for a token and EOS")
    if deterministic is None:
        deterministic = seed is not None or not shuffle
    examples = _model_sequences(pairs, tokenizer, max_length, deterministic)
    if cache:
        examples = examples.cache() if cache is True else examples.cache(os.fspath(cache))
    if shuffle:
        examples = examples.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        examples = examples.repeat(None if repeat is True else int(repeat))
    return examples, deterministic


def _finish(batches, deterministic):
    batches = batches.map(_to_model_batch, num_parallel_calls=AUTOTUNE,
                          deterministic=deterministic)
    options = tf.data.Options()
    options.deterministic = bool(deterministic)
    return batches.with_options(options).prefetch(AUTOTUNE)


def make_dataset(
    pairs: tf.data.Dataset,
    tokenizer=None,
    tokens_per_batch: int = 4096,
    max_length: int = 256,
    *,
    shuffle: bool = True,
    shuffle_buffer: int = 16384,
    seed: int | None = None,
    deterministic: bool | None = None,
    repeat: bool | int = False,
    drop_remainder: bool = False,
    boundaries: Sequence[int] | None = None,
    cache: bool | str = False,
) -> tf.data.Dataset:
    """Token-budget batches grouped by length, ready for ``model.fit``.

    Args:
      pairs: dataset of (source, target) strings (``read_parallel_text``, ``read_tsv``,
        ``load_tfds``) or of int id vectors without BOS/EOS (``read_tfrecord_shards``).
      tokenizer: a ``SubwordTokenizer`` (needed for text pairs).
      tokens_per_batch: budget per batch, counted as ``batch * max(S, T)`` padded slots of the
        longer side (the paper used ~25000; 4096 suits a CPU).
      max_length: pairs whose source + EOS or BOS + target exceed it are dropped, as are pairs
        with an empty side (see ``count_pairs`` for the numbers).
      shuffle / shuffle_buffer / seed: example shuffle before bucketing, reshuffled each epoch;
        the same seed gives the same batches in the same order.
      deterministic: keep element order through parallel maps; default: True when ``seed`` is
        given or ``shuffle`` is off.
      repeat: True (forever) or a number of epochs, applied before batching so batches cross
        epoch boundaries (use ``steps_per_epoch`` in ``fit``).
      drop_remainder: drop each bucket's last partial batch.
      boundaries: length bucket boundaries; default ``bucket_boundaries(max_length)``. A bucket
        ``[lo, hi)`` gets ``tokens_per_batch // (hi - 1)`` pairs per batch.
      cache: True caches tokenized examples in memory (good for Multi30k-sized corpora), a
        path caches them on disk.

    Returns:
      ``({"source": int32[B, S], "target": int32[B, T]}, labels int32[B, T])`` batches.

    Example::

        train = make_dataset(read_parallel_text("train.en", "train.de"), tok, 4096, seed=7)
        (inputs, labels), = train.take(1)
        inputs["source"].shape, inputs["target"].shape, labels.shape  # (B, S), (B, T), (B, T)
    """
    if tokens_per_batch < max_length:
        raise ValueError(
            f"tokens_per_batch={tokens_per_batch} must be >= max_length={max_length} so the "
            "longest pair fits in a batch"
        )
    examples, deterministic = _prepare(pairs, tokenizer, max_length, shuffle, shuffle_buffer,
                                       seed, deterministic, repeat, cache)
    bounds = sorted(set(int(b) for b in (boundaries or bucket_boundaries(max_length))))
    bounds = [b for b in bounds if 1 < b <= max_length]
    if not bounds:
        raise ValueError(f"no bucket boundary in (1, {max_length}]")
    longest = [b - 1 for b in bounds] + [max_length]
    batch_sizes = [max(1, tokens_per_batch // length) for length in longest]

    def length(source, labels):
        return tf.maximum(tf.shape(source)[0], tf.shape(labels)[0])

    batches = examples.bucket_by_sequence_length(
        length,
        bucket_boundaries=bounds,
        bucket_batch_sizes=batch_sizes,
        padded_shapes=([None], [None]),
        padding_values=(PAD_ID, PAD_ID),
        drop_remainder=drop_remainder,
    )
    return _finish(batches, deterministic)


def make_fixed_batch_dataset(
    pairs: tf.data.Dataset,
    tokenizer=None,
    batch_size: int = 64,
    max_length: int = 256,
    *,
    shuffle: bool = True,
    shuffle_buffer: int = 16384,
    seed: int | None = None,
    deterministic: bool | None = None,
    repeat: bool | int = False,
    drop_remainder: bool = False,
    cache: bool | str = False,
) -> tf.data.Dataset:
    """Fixed ``batch_size`` pairs per batch, padded to the longest: the baseline for bucketing.

    Same arguments and output structure as ``make_dataset``.

    Example::

        baseline = make_fixed_batch_dataset(pairs, tok, batch_size=64, seed=7)
        padding_efficiency(baseline)
    """
    examples, deterministic = _prepare(pairs, tokenizer, max_length, shuffle, shuffle_buffer,
                                       seed, deterministic, repeat, cache)
    batches = examples.padded_batch(
        batch_size, padded_shapes=([None], [None]), padding_values=(PAD_ID, PAD_ID),
        drop_remainder=drop_remainder,
    )
    return _finish(batches, deterministic)


def padding_efficiency(dataset: tf.data.Dataset, max_batches: int | None = None) -> float:
    """Real tokens / all token slots of source and target over a batched dataset.

    Real tokens are non-PAD ids of ``inputs["source"]`` and ``inputs["target"]``; slots are their
    sizes (``B*S + B*T``). 1.0 means no padding at all.

    Example::

        padding_efficiency(make_dataset(pairs, tok))   # ~0.9 on Multi30k
    """
    if max_batches is not None:
        dataset = dataset.take(max_batches)

    def counts(inputs, labels):
        del labels
        real = tf.zeros([], tf.int64)
        slots = tf.zeros([], tf.int64)
        for key in ("source", "target"):
            real += tf.math.count_nonzero(inputs[key] != PAD_ID, dtype=tf.int64)
            slots += tf.size(inputs[key], out_type=tf.int64)
        return tf.stack([real, slots])

    totals = dataset.map(counts).reduce(tf.zeros([2], tf.int64), lambda a, b: a + b).numpy()
    if totals[1] == 0:
        raise ValueError("padding_efficiency: the dataset has no tokens")
    return float(totals[0] / totals[1])


# ---------------------------------------------------------------------------- TFRecord shards


def serialize_pair(source_ids: Iterable[int], target_ids: Iterable[int]) -> bytes:
    """One shard record: a ``tf.train.Example`` with int64 lists "source" and "target".

    Example::

        record = serialize_pair([17, 5, 9], [23, 8])
    """
    feature = {
        "source": tf.train.Feature(int64_list=tf.train.Int64List(value=list(source_ids))),
        "target": tf.train.Feature(int64_list=tf.train.Int64List(value=list(target_ids))),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def parse_pairs(records: tf.Tensor):
    """Batch of serialized records -> (source, target) ragged int32 ``[B, (n)]``."""
    parsed = tf.io.parse_example(records, TFRECORD_FEATURES)
    return tf.cast(parsed["source"], tf.int32), tf.cast(parsed["target"], tf.int32)


def shard_files(pattern_or_dir: PathLike | Sequence[PathLike], split: str | None = None) -> list:
    """Resolve shard files: a folder (optionally one ``split`` in it), a glob, or a file list.

    For a folder written by ``pipelines.prepare``, ``manifest.json`` lists the complete shards of
    each split; files named ``*.tfrecord.tmp-*`` (unfinished writes) are never matched.
    """
    if isinstance(pattern_or_dir, (list, tuple)):
        files = [os.fspath(p) for p in pattern_or_dir]
        for path in files:
            _require_file(path, "TFRecord shard")
        return files
    path = os.fspath(pattern_or_dir)
    if os.path.isdir(path):
        manifest_path = os.path.join(path, "manifest.json")
        if os.path.isfile(manifest_path):
            with open(manifest_path, encoding="utf-8") as handle:
                splits = json.load(handle).get("splits", {})
            if split is None and len(splits) == 1:
                split = next(iter(splits))
            if split is not None:
                if split not in splits:
                    raise MissingDataError(
                        f"split {split!r} not in {manifest_path} (splits: {sorted(splits)})"
                    )
                files = [os.path.join(path, name) for name in splits[split]["shards"]]
                for file in files:
                    _require_file(file, f"shard listed in {manifest_path}")
                return files
        pattern = os.path.join(path, f"{split}-*.tfrecord" if split else "*.tfrecord")
    else:
        pattern = path
    files = sorted(glob.glob(pattern))
    if not files:
        raise MissingDataError(f"no TFRecord shards match {pattern}")
    return files


def read_tfrecord_shards(
    pattern_or_dir: PathLike | Sequence[PathLike],
    split: str | None = None,
    *,
    shuffle_files: bool = False,
    seed: int | None = None,
    deterministic: bool = True,
) -> tf.data.Dataset:
    """Tokenized shards from ``pipelines.prepare`` -> dataset of (source_ids, target_ids) int32.

    The ids carry no BOS/EOS, so the result feeds ``make_dataset(ids, None, ...)`` exactly like
    text pairs feed ``make_dataset(pairs, tokenizer, ...)``. Shards are read in parallel, one
    record from each in turn; as ``pipelines.prepare`` puts pair ``i`` in shard ``i % N``, this
    gives back the corpus order (for up to ``MAX_OPEN_SHARDS`` shards, without ``shuffle_files``).

    Example::

        ids = read_tfrecord_shards("runs/multi30k_prepared", split="train")
        train = make_dataset(ids, None, tokens_per_batch=4096, seed=1)
    """
    files = shard_files(pattern_or_dir, split)
    names = tf.data.Dataset.from_tensor_slices(files)
    if shuffle_files:
        names = names.shuffle(len(files), seed=seed)
    records = names.interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(len(files), MAX_OPEN_SHARDS),
        num_parallel_calls=AUTOTUNE,
        deterministic=deterministic,
    )
    batches = records.batch(TOKENIZE_BATCH).map(
        parse_pairs, num_parallel_calls=AUTOTUNE, deterministic=deterministic
    )
    return batches.unbatch().map(lambda s, t: (_as_dense(s), _as_dense(t)))
