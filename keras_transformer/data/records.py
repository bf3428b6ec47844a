# Tokenized corpora on disk: the TFRecord record format written by pipelines.prepare, and the
# reader that gives the ids back in corpus order, so training skips re-tokenizing each epoch.
"""TFRecord shards of tokenized pairs: record format, shard lookup, reading.

A record is a ``tf.train.Example`` with int64 lists ``"source"`` and ``"target"``: subword ids
without BOS/EOS (``make_dataset`` adds them, as for text). Shards are named
``<split>-00000-of-00004.tfrecord``; pair ``i`` of a split lives in shard ``i % N``.

Example::

    record = serialize_pair([17, 5, 9], [23, 8])
    ids = read_tfrecord_shards("runs/multi30k_prepared", split="train")
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterable, Sequence

import tensorflow as tf

from keras_transformer.data.corpus import _require_file
from keras_transformer.data.tokenized import TOKENIZE_BATCH, as_dense
from keras_transformer.text.lines import MissingDataError, PathLike
from keras_transformer.text.urlpath import as_path, is_url

__all__ = [
    "MAX_OPEN_SHARDS",
    "TFRECORD_FEATURES",
    "serialize_pair",
    "parse_pairs",
    "shard_files",
    "read_tfrecord_shards",
]

AUTOTUNE = tf.data.AUTOTUNE

#: Shards read at the same time by ``read_tfrecord_shards``.
MAX_OPEN_SHARDS = 64

#: TFRecord shard features: token ids without BOS/EOS (added by ``make_dataset``).
TFRECORD_FEATURES = {
    "source": tf.io.RaggedFeature(tf.int64),
    "target": tf.io.RaggedFeature(tf.int64),
}


def serialize_pair(source_ids: Iterable[int], target_ids: Iterable[int]) -> bytes:
    """One shard record: a ``tf.train.Example`` with int64 lists "source" and "target".

    Example::

        record = serialize_pair([17, 5, 9], [23, 8])
    """
    feature = {
        "source": tf.train.Feature(int64_list=tf.train.Int64List(value=list(source_ids))),
        "target": tf.train.Feature(int64_list=tf.train.Int64List(value=list(target_ids))),
    }
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    # deterministic: map entries in key order, so the same ids give the same bytes in every
    # process (protobuf's default map order varies between processes).
    return example.SerializeToString(deterministic=True)


def parse_pairs(records: tf.Tensor):
    """Batch of serialized records -> (source, target) ragged int32 ``[B, (n)]``."""
    parsed = tf.io.parse_example(records, TFRECORD_FEATURES)
    return tf.cast(parsed["source"], tf.int32), tf.cast(parsed["target"], tf.int32)


def _manifest_shards(folder: str, split: str | None) -> list | None:
    """Shards of ``split`` listed in ``folder/manifest.json``; None without a manifest/split."""
    manifest_path = _join(folder, "manifest.json")
    if not as_path(manifest_path).is_file():
        return None
    splits = json.loads(as_path(manifest_path).read_text(encoding="utf-8")).get("splits", {})
    if split is None and len(splits) == 1:
        split = next(iter(splits))
    if split is None:
        return None
    if split not in splits:
        raise MissingDataError(f"split {split!r} not in {manifest_path} (splits: {sorted(splits)})")
    files = [_join(folder, name) for name in splits[split]["shards"]]
    for file in files:
        _require_file(file, f"shard listed in {manifest_path}")
    return files


def _join(folder: str, name: str) -> str:
    return f"{folder.rstrip('/')}/{name}" if is_url(folder) else os.path.join(folder, name)


def shard_files(pattern_or_dir: PathLike | Sequence[PathLike], split: str | None = None) -> list:
    """Resolve shard files: a folder (optionally one ``split`` in it), a glob, or a file list.

    For a folder written by ``pipelines.prepare``, ``manifest.json`` lists the complete shards of
    each split; files named ``*.tfrecord.tmp-*`` (unfinished writes) are never matched. A URL
    (``gs://bucket/prep``) is looked up through ``tf.io.gfile``; ``tf.data`` reads it in place.

    Example::

        shard_files("runs/m30k", "train")   # [".../train-00000-of-00002.tfrecord", ...]
    """
    if isinstance(pattern_or_dir, (list, tuple)):
        files = [os.fspath(p) for p in pattern_or_dir]
        for path in files:
            _require_file(path, "TFRecord shard")
        return files
    path = os.fspath(pattern_or_dir)
    if as_path(path).is_dir():
        files = _manifest_shards(path, split)
        if files is not None:
            return files
        pattern = _join(path, f"{split}-*.tfrecord" if split else "*.tfrecord")
    else:
        pattern = path
    files = sorted(tf.io.gfile.glob(pattern) if is_url(pattern) else glob.glob(pattern))
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
    return batches.unbatch().map(lambda s, t: (as_dense(s), as_dense(t)))
