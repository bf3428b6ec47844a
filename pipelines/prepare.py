# Preprocessing job (paper section 5.1, "Training Data and Batching"): trains the shared subword
# vocabulary on the training split, tokenizes every split once and stores the ids as TFRecord
# shards, so training reads ids instead of re-tokenizing text every epoch.
"""Corpus -> tokenizer + tokenized TFRecord shards + manifest.json.

Usage::

    # line-aligned files, one split
    python -m pipelines.prepare --source train.en --target train.de --output runs/prep \\
        --vocab-size 8000 --num-shards 4

    # several splits: repeat --source/--target/--split in the same order
    python -m pipelines.prepare --output runs/prep \\
        --source train.en --target train.de --split train \\
        --source val.en --target val.de --split validation

    # the local Multi30k copy (train, validation, test), English -> German
    python -m pipelines.prepare --dataset multi30k --data-dir ../shared/data --output runs/m30k

    # a tensorflow-datasets corpus (prepared under --tfds-data-dir, or --download)
    python -m pipelines.prepare --tfds wmt14_translate/de-en --source-lang en --target-lang de \\
        --splits train,validation,test --output runs/wmt14 --num-shards 64

    # reuse a tokenizer from an earlier run (same ids for a new corpus)
    python -m pipelines.prepare ... --tokenizer runs/m30k/tokenizer

Output folder::

    manifest.json                    counts, dropped pairs by reason, vocab size, sha256 of inputs
    tokenizer/                       SubwordTokenizer SavedModel (SubwordTokenizer.load)
    sentencepiece.model / .vocab     the same model for tools outside TensorFlow
    train-00000-of-00004.tfrecord    tf.train.Example {"source": int64 list, "target": int64 list}
    ...                              ids without BOS/EOS; read with data.read_tfrecord_shards

Re-running with the same inputs and options reuses the tokenizer and every split whose
fingerprint (sha256 of inputs, tokenizer model, max length, shard count) matches the manifest.
Shards, the tokenizer folder and the manifest are written under temporary names and renamed into
place, so a killed job leaves no half-written shard that a reader would take for complete (readers
match ``*.tfrecord`` and the manifest lists only finished shards). Do not run two jobs on one
output folder at the same time.

Shards are written in parallel (``--workers`` threads, or processes with
``--executor process``); each worker reads the corpus, keeps every N-th pair
(``Dataset.shard``), tokenizes in batches and writes its shard.

Huge corpora: the Apache Beam path
----------------------------------
This job runs on one machine, fine up to tens of millions of pairs. For bigger corpora, or to use a
cluster, run the same steps on Beam through tensorflow-datasets:

1. Train the tokenizer once on a sample (``SubwordTokenizer.train`` with ``max_sentences``) and
   copy ``sentencepiece.model`` where the workers can read it.
2. Write a TFDS builder like ``pipelines/multi30k`` whose ``_generate_examples`` returns a Beam
   ``PTransform`` instead of a generator (``beam.Create(files) | beam.FlatMap(read_pairs) |
   beam.Map(tokenize_with_sentencepiece_processor)``), producing ``{"source": ids, "target": ids}``
   with ``tfds.features.Sequence(tf.int64)`` features; drop empty / over-long pairs there and count
   them with ``beam.metrics.Metrics.counter``.
3. Build it with ``tfds build path/to/builder --data_dir gs://... --beam_pipeline_options=
   "runner=DataflowRunner,project=...,region=...,num_workers=64"``; TFDS shards and writes the
   records and the split statistics.
4. Read with ``tfds.load(...)`` mapped to ``(ex["source"], ex["target"])`` and feed
   ``data.make_dataset(ids, None, ...)``: the same batching as shards from this job.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import math
import multiprocessing
import os
import pathlib
import shutil
import sys
import time
import uuid
from typing import Sequence

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TOKENIZER_DIR = "tokenizer"
MODEL_FILE = "sentencepiece.model"

#: Local Multi30k layout (``<data-dir>/multi30k``): split -> file stem.
MULTI30K_SPLITS = {"train": "train", "validation": "val", "test": "test_2016_flickr"}


class PrepareError(RuntimeError):
    """A job that cannot run as configured (message says why)."""


# ---------------------------------------------------------------------------- small helpers


def sha256_file(path, chunk: int = 1 << 20) -> str:
    """sha256 hex digest of a file, streamed."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _sha256_json(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()


def _tmp_name(path: pathlib.Path) -> pathlib.Path:
    return path.with_name(f"{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def _write_json_atomic(path: pathlib.Path, value) -> None:
    tmp = _tmp_name(path)
    tmp.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_manifest(output_dir) -> dict:
    """The manifest of an output folder, or an empty one."""
    path = pathlib.Path(output_dir) / MANIFEST
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return {}


def _remove_stale_temporaries(output: pathlib.Path) -> None:
    for stale in output.glob("*.tmp-*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


# ---------------------------------------------------------------------------- inputs


def _input_spec_files(split, source, target) -> dict:
    for path in (source, target):
        if not os.path.isfile(path):
            raise PrepareError(f"split {split!r}: input file not found: {path}")
    return {"split": split, "kind": "files", "source": os.path.abspath(source),
            "target": os.path.abspath(target)}


def _open_pairs(spec: dict):
    """Dataset of (source, target) strings for an input spec (picklable dict)."""
    from keras_transformer import data

    if spec["kind"] == "files":
        return data.read_parallel_text(spec["source"], spec["target"], validate=False)
    if spec["kind"] == "tsv":
        return data.read_tsv(spec["path"], spec["source_column"], spec["target_column"],
                             validate=False)
    if spec["kind"] == "tfds":
        return data.load_tfds(spec["name"], spec["tfds_split"], spec["source_lang"],
                              spec["target_lang"], data_dir=spec["data_dir"], download=False)
    raise PrepareError(f"unknown input kind {spec['kind']!r}")


def _describe_inputs(spec: dict) -> tuple[list, int | None]:
    """(inputs with sha256 for the manifest, number of pairs if known). Validates text files."""
    from keras_transformer import data

    if spec["kind"] == "files":
        count = data.validate_parallel_files(spec["source"], spec["target"])
        inputs = [{"path": spec[key], "sha256": sha256_file(spec[key]),
                   "bytes": os.path.getsize(spec[key])} for key in ("source", "target")]
        return inputs, count
    if spec["kind"] == "tsv":
        count = data._scan_text_file(
            spec["path"], min_columns=max(spec["source_column"], spec["target_column"]) + 1)
        inputs = [{"path": spec["path"], "sha256": sha256_file(spec["path"]),
                   "bytes": os.path.getsize(spec["path"]),
                   "columns": [spec["source_column"], spec["target_column"]]}]
        return inputs, count
    if spec["kind"] == "tfds":
        import tensorflow_datasets as tfds

        builder = tfds.builder(spec["name"], data_dir=spec["data_dir"])
        if spec.get("download"):
            builder.download_and_prepare()
        count = None
        try:
            count = builder.info.splits[spec["tfds_split"]].num_examples
        except (KeyError, ValueError):
            pass
        identity = {"tfds": spec["name"], "version": str(builder.info.version),
                    "split": spec["tfds_split"], "languages": [spec["source_lang"],
                                                               spec["target_lang"]]}
        return [{**identity, "sha256": _sha256_json(identity)}], count
    raise PrepareError(f"unknown input kind {spec['kind']!r}")


def _training_text(spec: dict):
    """What the tokenizer trains on: file paths, or an iterator of strings for TFDS/TSV."""
    if spec["kind"] == "files":
        return [pathlib.Path(spec["source"]), pathlib.Path(spec["target"])]
    pairs = _open_pairs(spec)

    def sentences():
        for source, target in pairs.as_numpy_iterator():
            yield source.decode("utf-8")
            yield target.decode("utf-8")

    return sentences()


# ---------------------------------------------------------------------------- shard writing


def _write_shard(spec: dict, tokenizer, index: int, num_shards: int, path: str,
                 max_length: int) -> dict:
    """Tokenize every ``num_shards``-th pair from ``index`` and write one shard atomically.

    ``tokenizer`` is a ``SubwordTokenizer`` or its serialized model (for process workers).
    Returns counts: pairs read, kept, dropped by reason, tokens, bytes.
    """
    import tensorflow as tf

    from keras_transformer import data
    from keras_transformer.tokenization import SubwordTokenizer

    if isinstance(tokenizer, (bytes, bytearray)):
        tokenizer = SubwordTokenizer(tokenizer)
    pairs = _open_pairs(spec).shard(num_shards, index)

    def flatten(source, target):
        reasons = data._reasons(source, target, max_length)
        return source.values, source.row_splits, target.values, target.row_splits, reasons

    batches = data._batched_ids(pairs, tokenizer, deterministic=True).map(
        flatten, num_parallel_calls=tf.data.AUTOTUNE
    )
    counts = {reason: 0 for reason in data.DROP_REASONS}
    tokens = {"source": 0, "target": 0}
    final = pathlib.Path(path)
    tmp = _tmp_name(final)
    try:
        with tf.io.TFRecordWriter(str(tmp)) as writer:
            for s_ids, s_splits, t_ids, t_splits, reasons in batches.as_numpy_iterator():
                for row, reason in enumerate(reasons):
                    counts[data.DROP_REASONS[reason]] += 1
                    if reason:
                        continue
                    source = s_ids[s_splits[row]:s_splits[row + 1]]
                    target = t_ids[t_splits[row]:t_splits[row + 1]]
                    tokens["source"] += len(source)
                    tokens["target"] += len(target)
                    writer.write(data.serialize_pair(source.tolist(), target.tolist()))
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return {"tmp": str(tmp), "path": str(final), "counts": counts, "tokens": tokens}


def _write_split(spec, tokenizer, output: pathlib.Path, num_shards: int, max_length: int,
                 workers: int, executor: str) -> dict:
    split = spec["split"]
    names = [f"{split}-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]
    jobs = [(spec, i, num_shards, str(output / name), max_length) for i, name in enumerate(names)]
    results = []
    try:
        if executor == "process" and workers > 1:
            context = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
                futures = [pool.submit(_write_shard, job[0], tokenizer.model_proto, *job[1:])
                           for job in jobs]
                results = [f.result() for f in futures]
        elif workers > 1:
            with concurrent.futures.ThreadPoolExecutor(workers) as pool:
                futures = [pool.submit(_write_shard, job[0], tokenizer, *job[1:]) for job in jobs]
                results = [f.result() for f in futures]
        else:
            results = [_write_shard(job[0], tokenizer, *job[1:]) for job in jobs]
    except BaseException:
        for result in results:
            pathlib.Path(result["tmp"]).unlink(missing_ok=True)
        _remove_stale_temporaries(output)
        raise
    # Every shard is complete: move them into place, then drop shards of an older layout.
    for result in results:
        os.replace(result["tmp"], result["path"])
    for old in output.glob(f"{split}-*-of-*.tfrecord"):
        if old.name not in names:
            old.unlink()
    counts = {reason: sum(r["counts"][reason] for r in results) for reason in results[0]["counts"]}
    return {
        "shards": names,
        "shard_bytes": [os.path.getsize(output / name) for name in names],
        "num_shards": num_shards,
        "pairs": sum(counts.values()),
        "kept": counts["kept"],
        "dropped": {reason: n for reason, n in counts.items() if reason != "kept"},
        "source_tokens": sum(r["tokens"]["source"] for r in results),
        "target_tokens": sum(r["tokens"]["target"] for r in results),
    }


def _split_is_current(entry: dict | None, fingerprint: str, output: pathlib.Path) -> bool:
    if not entry or entry.get("fingerprint") != fingerprint:
        return False
    for name, size in zip(entry.get("shards", []), entry.get("shard_bytes", [])):
        path = output / name
        if not path.is_file() or path.stat().st_size != size:
            return False
    return bool(entry.get("shards"))


# ---------------------------------------------------------------------------- the job


def prepare(
    inputs: Sequence[dict],
    output_dir,
    *,
    vocab_size: int = 8000,
    tokenizer_dir=None,
    num_shards: int | None = None,
    max_length: int = 256,
    model_type: str = "bpe",
    max_sentences: int = 2_000_000,
    seed: int = 0,
    workers: int | None = None,
    executor: str = "thread",
    force: bool = False,
    log=print,
) -> dict:
    """Run the job for input specs (see ``main`` for building them); returns the manifest.

    Example::

        spec = {"split": "train", "kind": "files", "source": "train.en", "target": "train.de"}
        manifest = prepare([spec], "runs/prep", vocab_size=8000, num_shards=2)
        manifest["splits"]["train"]["kept"]
    """
    from keras_transformer.tokenization import SubwordTokenizer

    if not inputs:
        raise PrepareError("nothing to prepare: give --source/--target, --tsv, --dataset or --tfds")
    split_names = [spec["split"] for spec in inputs]
    if len(set(split_names)) != len(split_names):
        raise PrepareError(f"split names must be unique, got {split_names}")
    output = pathlib.Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(output)
    manifest = {} if force else read_manifest(output)
    if manifest.get("format_version") not in (None, FORMAT_VERSION):
        manifest = {}
    started = time.time()

    described = {spec["split"]: _describe_inputs(spec) for spec in inputs}

    # --- tokenizer: reuse the given one, or the one in the output folder if it was trained on
    # the same inputs with the same options, else train on the "train" split (or the first).
    train_spec = next((s for s in inputs if s["split"] == "train"), inputs[0])
    options = {"vocab_size": vocab_size, "model_type": model_type, "seed": seed,
               "max_sentences": max_sentences,
               "trained_on": [i["sha256"] for i in described[train_spec["split"]][0]]}
    previous = manifest.get("tokenizer", {})
    if tokenizer_dir is not None:
        tokenizer = SubwordTokenizer.load(tokenizer_dir)
        origin = {"reused_from": os.path.abspath(tokenizer_dir)}
        log(f"tokenizer: reusing {tokenizer_dir} (vocab {tokenizer.vocab_size})")
    elif (previous.get("fingerprint") == _sha256_json(options)
          and (output / TOKENIZER_DIR).is_dir()):
        tokenizer = SubwordTokenizer.load(output / TOKENIZER_DIR)
        origin = {"trained_on_split": train_spec["split"], "options": options}
        log(f"tokenizer: up to date in {output / TOKENIZER_DIR}")
    else:
        log(f"tokenizer: training {model_type} vocab {vocab_size} on split "
            f"{train_spec['split']!r}")
        tokenizer = SubwordTokenizer.train(_training_text(train_spec), vocab_size,
                                           model_type=model_type, max_sentences=max_sentences,
                                           seed=seed)
        origin = {"trained_on_split": train_spec["split"], "options": options}
    model_sha = hashlib.sha256(tokenizer.model_proto).hexdigest()
    if previous.get("model_sha256") != model_sha or not (output / TOKENIZER_DIR).is_dir():
        tmp = _tmp_name(output / TOKENIZER_DIR)
        tokenizer.save(tmp)
        if (output / TOKENIZER_DIR).exists():
            shutil.rmtree(output / TOKENIZER_DIR)
        os.replace(tmp, output / TOKENIZER_DIR)
    tokenizer.write_model(output / MODEL_FILE)
    manifest.update({
        "format_version": FORMAT_VERSION,
        "created_by": "pipelines.prepare",
        "max_length": max_length,
        "reserved_ids": {"pad": 0, "unk": 1, "bos": 2, "eos": 3},
        "tokenizer": {"path": TOKENIZER_DIR, "model_file": MODEL_FILE,
                      "vocab_size": tokenizer.vocab_size, "model_sha256": model_sha,
                      "fingerprint": (_sha256_json(options) if tokenizer_dir is None
                                      else "reused:" + model_sha), **origin},
    })
    manifest.setdefault("splits", {})
    _write_json_atomic(output / MANIFEST, manifest)

    # --- splits
    for spec in inputs:
        split = spec["split"]
        inputs_meta, count = described[split]
        shards = num_shards or max(1, min(1024, math.ceil((count or 1) / 200_000)))
        fingerprint = _sha256_json({"inputs": [i["sha256"] for i in inputs_meta],
                                    "model_sha256": model_sha, "max_length": max_length,
                                    "num_shards": shards, "format_version": FORMAT_VERSION})
        entry = manifest["splits"].get(split)
        if _split_is_current(entry, fingerprint, output):
            log(f"{split}: up to date ({entry['kept']} pairs in {entry['num_shards']} shards)")
            entry["reused"] = True
            continue
        split_started = time.time()
        n_workers = max(1, min(shards, workers or os.cpu_count() or 1))
        result = _write_split(spec, tokenizer, output, shards, max_length, n_workers, executor)
        manifest["splits"][split] = {"fingerprint": fingerprint, "inputs": inputs_meta,
                                     "seconds": round(time.time() - split_started, 2),
                                     "reused": False, **result}
        _write_json_atomic(output / MANIFEST, manifest)
        log(f"{split}: {result['kept']} of {result['pairs']} pairs kept "
            f"(dropped {result['dropped']}) in {shards} shard(s)")
    manifest["seconds"] = round(time.time() - started, 2)
    _write_json_atomic(output / MANIFEST, manifest)
    return manifest


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.prepare",
        description="Train or reuse the shared tokenizer and write tokenized TFRecord shards.",
    )
    parser.add_argument("--output", required=True, help="output folder")
    text = parser.add_argument_group("line-aligned files (repeat for several splits)")
    text.add_argument("--source", action="append", default=[], help="source-language file")
    text.add_argument("--target", action="append", default=[], help="target-language file")
    text.add_argument("--split", action="append", default=[],
                      help="split name of the matching --source/--target (default: train)")
    tsv = parser.add_argument_group("tab-separated file")
    tsv.add_argument("--tsv", help="TSV file with source and target columns")
    tsv.add_argument("--source-column", type=int, default=0)
    tsv.add_argument("--target-column", type=int, default=1)
    known = parser.add_argument_group("known corpora")
    known.add_argument("--dataset", choices=["multi30k"], help="a corpus under --data-dir")
    known.add_argument("--data-dir", help="folder of the corpora (default $KT_DATA_DIR)")
    known.add_argument("--tfds", metavar="NAME", help="tensorflow-datasets name, e.g. "
                       "wmt14_translate/de-en")
    known.add_argument("--tfds-data-dir", help="tensorflow-datasets data_dir")
    known.add_argument("--download", action="store_true", help="let TFDS download and prepare")
    known.add_argument("--splits", help="comma-separated splits for --dataset/--tfds "
                       "(default: train,validation,test)")
    known.add_argument("--source-lang", default="en")
    known.add_argument("--target-lang", default="de")
    job = parser.add_argument_group("job")
    job.add_argument("--vocab-size", type=int, default=8000)
    job.add_argument("--model-type", choices=["bpe", "unigram"], default="bpe")
    job.add_argument("--tokenizer", help="reuse this tokenizer (folder or .model) instead of "
                     "training one")
    job.add_argument("--max-sentences", type=int, default=2_000_000,
                     help="tokenizer training sample size")
    job.add_argument("--num-shards", type=int, help="shards per split (default: one per 200k "
                     "pairs)")
    job.add_argument("--max-length", type=int, default=256,
                     help="drop pairs needing more positions (with EOS/BOS)")
    job.add_argument("--workers", type=int, help="parallel shard writers (default: CPU count)")
    job.add_argument("--executor", choices=["thread", "process"], default="thread")
    job.add_argument("--seed", type=int, default=0)
    job.add_argument("--force", action="store_true", help="ignore the manifest, redo everything")
    return parser


def _input_specs(args, parser) -> list:
    specs = []
    if args.source or args.target:
        if len(args.source) != len(args.target):
            parser.error(f"{len(args.source)} --source but {len(args.target)} --target")
        splits = args.split or (["train"] if len(args.source) == 1 else [])
        if len(splits) != len(args.source):
            parser.error("give one --split per --source/--target pair")
        specs += [_input_spec_files(split, source, target)
                  for split, source, target in zip(splits, args.source, args.target)]
    if args.tsv:
        if not os.path.isfile(args.tsv):
            raise PrepareError(f"TSV file not found: {args.tsv}")
        specs.append({"split": (args.split or ["train"])[0], "kind": "tsv",
                      "path": os.path.abspath(args.tsv), "source_column": args.source_column,
                      "target_column": args.target_column})
    wanted = (args.splits or "train,validation,test").split(",")
    if args.dataset == "multi30k":
        data_dir = args.data_dir or os.environ.get("KT_DATA_DIR")
        if not data_dir:
            parser.error("--dataset needs --data-dir (or KT_DATA_DIR)")
        folder = pathlib.Path(data_dir) / "multi30k"
        for split in wanted:
            if split not in MULTI30K_SPLITS:
                parser.error(f"multi30k has splits {sorted(MULTI30K_SPLITS)}, not {split!r}")
            stem = folder / MULTI30K_SPLITS[split]
            specs.append(_input_spec_files(split, f"{stem}.{args.source_lang}",
                                           f"{stem}.{args.target_lang}"))
    if args.tfds:
        for split in wanted:
            specs.append({"split": split, "kind": "tfds", "name": args.tfds, "tfds_split": split,
                          "source_lang": args.source_lang, "target_lang": args.target_lang,
                          "data_dir": args.tfds_data_dir, "download": args.download})
    return specs


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 on success, 2 on bad input)."""
    parser = _parser()
    args = parser.parse_args(argv)
    from keras_transformer.data import DataError

    try:
        specs = _input_specs(args, parser)
        if not specs:
            parser.error("no input: give --source/--target, --tsv, --dataset or --tfds")
        manifest = prepare(
            specs, args.output, vocab_size=args.vocab_size, tokenizer_dir=args.tokenizer,
            num_shards=args.num_shards, max_length=args.max_length, model_type=args.model_type,
            max_sentences=args.max_sentences, seed=args.seed, workers=args.workers,
            executor=args.executor, force=args.force,
        )
    except (PrepareError, DataError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.output}/{MANIFEST} (vocab {manifest['tokenizer']['vocab_size']}, "
          f"{sum(s['kept'] for s in manifest['splits'].values())} pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
