# Writing the tokenized TFRecord shards of one split (the record format is
# keras_transformer.data.records): in parallel, each shard complete or absent.
"""Tokenize one split and write its TFRecord shards: pair ``i`` goes to shard ``i % N``.

Each worker reads the corpus, keeps every N-th pair (``Dataset.shard``), tokenizes in batches,
applies the training filter (``keras_transformer.data.tokenized.drop_reasons``) and writes its
shard under a temporary name. Only when every shard of the split is complete are they renamed
into place, so readers (which match ``*.tfrecord``) never see a partial split.

Example::

    result = write_split(spec, tokenizer, pathlib.Path("runs/prep"), num_shards=2,
                         max_sentence_length=256, workers=2, executor="thread")
    result["kept"], result["dropped"]     # 29000, {"empty": 0, "too_long": 0}
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import pathlib

from pipelines import storage
from pipelines.inputs import open_pairs
from pipelines.manifest import remove_stale_temporaries, tmp_name

__all__ = ["shard_names", "write_shard", "write_split", "split_is_current"]


def shard_names(split: str, num_shards: int) -> list:
    """``["<split>-00000-of-0000N.tfrecord", ...]``."""
    return [f"{split}-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]


def _kept_pairs(spec: dict, tokenizer, index: int, num_shards: int, max_sentence_length: int):
    """Batches of (source ids, row splits, target ids, row splits, reason codes) of one shard."""
    import tensorflow as tf

    from keras_transformer.data.tokenized import batched_ids, drop_reasons

    pairs = open_pairs(spec).shard(num_shards, index)

    def flatten(source, target):
        reasons = drop_reasons(source, target, max_sentence_length)
        return source.values, source.row_splits, target.values, target.row_splits, reasons

    return batched_ids(pairs, tokenizer, deterministic=True).map(
        flatten, num_parallel_calls=tf.data.AUTOTUNE
    )


def write_shard(
    spec: dict, tokenizer, index: int, num_shards: int, path: str, max_sentence_length: int
) -> dict:
    """Tokenize every ``num_shards``-th pair from ``index`` and write one shard atomically.

    ``tokenizer`` is a ``SubwordTokenizer`` or its serialized model (for process workers).
    Returns counts: pairs read, kept, dropped by reason, tokens, kept pairs by length
    (``pipelines.manifest.count_length``), and the temporary file.
    """
    import tensorflow as tf

    from keras_transformer import data  # data.serialize_pair: looked up per call (tests patch it)
    from keras_transformer.data.segments import count_length
    from keras_transformer.text.tokenizer import SubwordTokenizer

    if isinstance(tokenizer, (bytes, bytearray)):
        tokenizer = SubwordTokenizer(tokenizer)
    batches = _kept_pairs(spec, tokenizer, index, num_shards, max_sentence_length)
    counts = {reason: 0 for reason in data.DROP_REASONS}
    tokens = {"source": 0, "target": 0}
    kept_by_length: list = []
    final = pathlib.Path(path)
    tmp = tmp_name(final)
    try:
        with tf.io.TFRecordWriter(str(tmp)) as writer:
            for s_ids, s_splits, t_ids, t_splits, reasons in batches.as_numpy_iterator():
                for row, reason in enumerate(reasons):
                    counts[data.DROP_REASONS[reason]] += 1
                    if reason:
                        continue
                    source = s_ids[s_splits[row] : s_splits[row + 1]]
                    target = t_ids[t_splits[row] : t_splits[row + 1]]
                    tokens["source"] += len(source)
                    tokens["target"] += len(target)
                    count_length(kept_by_length, source, target)
                    writer.write(data.serialize_pair(source.tolist(), target.tolist()))
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return {
        "tmp": str(tmp),
        "path": str(final),
        "counts": counts,
        "tokens": tokens,
        "kept_by_length": kept_by_length,
    }


def _run_jobs(jobs: list, tokenizer, workers: int, executor: str) -> list:
    """``write_shard`` for each job: in processes, threads, or here, in job order."""
    if executor == "process" and workers > 1:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
            futures = [
                pool.submit(write_shard, job[0], tokenizer.model_proto, *job[1:]) for job in jobs
            ]
            return [f.result() for f in futures]
    if workers > 1:
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            futures = [pool.submit(write_shard, job[0], tokenizer, *job[1:]) for job in jobs]
            return [f.result() for f in futures]
    return [write_shard(job[0], tokenizer, *job[1:]) for job in jobs]


def _summary(results: list, names: list, output: pathlib.Path) -> dict:
    counts = {reason: sum(r["counts"][reason] for r in results) for reason in results[0]["counts"]}
    return {
        "shards": names,
        "shard_bytes": [os.path.getsize(output / name) for name in names],
        "num_shards": len(names),
        "pairs": sum(counts.values()),
        "kept": counts["kept"],
        "dropped": {reason: n for reason, n in counts.items() if reason != "kept"},
        "source_tokens": sum(r["tokens"]["source"] for r in results),
        "target_tokens": sum(r["tokens"]["target"] for r in results),
        "kept_by_length": [r["kept_by_length"] for r in results],  # a list a shard
    }


def write_split(
    spec: dict,
    tokenizer,
    output: pathlib.Path,
    num_shards: int,
    max_sentence_length: int,
    workers: int,
    executor: str,
) -> dict:
    """Write all shards of ``spec["split"]``, then move them into place; return its summary.

    Shards of an older layout (another shard count) are removed once the new ones are in place.
    """
    split = spec["split"]
    names = shard_names(split, num_shards)
    jobs = [
        (spec, i, num_shards, str(output / name), max_sentence_length)
        for i, name in enumerate(names)
    ]
    try:
        results = _run_jobs(jobs, tokenizer, workers, executor)
    except BaseException:
        remove_stale_temporaries(output)  # the temporaries of shards that did finish
        raise
    for result in results:
        os.replace(result["tmp"], result["path"])
    for old in output.glob(f"{split}-*-of-*.tfrecord"):
        if old.name not in names:
            old.unlink()
    return _summary(results, names, output)


def split_is_current(entry: dict | None, fingerprint: str, output) -> bool:
    """Whether a manifest entry has this fingerprint and all its shards, at their sizes
    (``output``: a ``pathlib.Path``, or a remote folder's ``scheme://...`` string)."""
    if not entry or entry.get("fingerprint") != fingerprint:
        return False
    for name, size in zip(entry.get("shards", []), entry.get("shard_bytes", []), strict=False):
        if storage.is_remote(output):
            path = storage.join(output, name)
            if not storage.exists(path) or storage.size(path) != size:
                return False
            continue
        path = output / name
        if not path.is_file() or path.stat().st_size != size:
            return False
    return bool(entry.get("shards"))
