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
fingerprint (sha256 of inputs, tokenizer model, max sentence length, shard count) matches the
manifest.
Shards, the tokenizer folder and the manifest are written under temporary names and renamed into
place, so a killed job leaves no half-written shard that a reader would take for complete (readers
match ``*.tfrecord`` and the manifest lists only finished shards). Do not run two jobs on one
output folder at the same time.

Shards are written in parallel (``--workers`` threads, or processes with
``--executor process``); each worker reads the corpus, keeps every N-th pair
(``Dataset.shard``), tokenizes in batches and writes its shard.

Modules: ``pipelines.inputs`` (input specs: files, TSV, TFDS), ``pipelines.job`` (the job,
``prepare``), ``pipelines.shards`` (writing one split's shards), ``pipelines.manifest`` (manifest,
fingerprints, atomic writes); this module is the command line (``build_parser``,
``add_arguments``, ``run``, ``main``) and re-exports ``prepare``.

Huge corpora: the Apache Beam runner
------------------------------------
``--runner beam`` (the ``[beam]`` extra: ``pip install -e ".[beam]"``) writes the shards with an
Apache Beam pipeline instead of the local pool (``pipelines.beam``): same validation and
errors, same tokenizer, same filter, same shard names and manifest; the split holds the same
examples as the pool's, in other shards (whole 4,096-pair chunks; each worker writes one shard
at a time, so give at least as many shards as workers). Beam's options go in one string after
``--beam-options=`` (with the ``=``: the string starts with ``--``; ``runner=X`` works too).
Without ``--beam-options`` it runs on Beam's local ``FnApiRunner`` with ``--workers``
processes (named explicitly: Beam's default local runner, Prism, downloads a binary at run
time)::

    keras-transformer prepare --runner beam --workers 4 --dataset multi30k \\
        --data-dir ../shared/data --output runs/m30k_beam

The driver (this process) validates the inputs, trains or loads the tokenizer and writes
``tokenizer/`` and the manifest; Beam's workers read line ranges of the inputs and write the
shards. So the inputs and ``--output`` must be paths that the driver and every worker see alike:
a file system mounted at the same path everywhere, or a URL of one Beam has installed
(``gs://`` with ``apache-beam[gcp]``, ``s3://`` with ``apache-beam[aws]``, ``hdfs://``, or a
plugin module named by ``--beam_plugins``, which the driver imports too): with ``--runner beam``
every file of the job (inputs, the temporary shard folder, renames, manifest, tokenizer) goes
through Beam's ``FileSystems`` (``pipelines.storage``, ``pipelines.remote``). The workers need
this package and TensorFlow: on Flink and Spark, run Beam's worker pool next to each task
manager / executor in a venv with ``pip install "keras-transformer[beam]"``
(``python -m apache_beam.runners.worker.worker_pool_main --service_port=50000``); on Dataflow,
ship a wheel (``pip wheel --no-deps -w dist .``). The same pipeline on a cluster, by options
alone (not run here: no cluster; the Flink and Spark runners fetch Beam's job-server jar unless
``--flink_job_server_jar`` / ``--spark_job_server_jar`` names a local copy)::

    # Flink session cluster
    keras-transformer prepare --runner beam --source /shared/wmt/train.en \\
        --target /shared/wmt/train.de --output /shared/prep/wmt14 --num-shards 64 \\
        --beam-options="--runner=FlinkRunner --flink_master=flink-jm:8081 --parallelism=64 \\
            --environment_type=EXTERNAL --environment_config=localhost:50000"

    # Spark standalone cluster
    keras-transformer prepare --runner beam ...same inputs... \\
        --beam-options="--runner=SparkRunner --spark_master_url=spark://spark-master:7077 \\
            --environment_type=EXTERNAL --environment_config=localhost:50000"

    # Dataflow (pip install "apache-beam[gcp]"): inputs and output on GCS
    keras-transformer prepare --runner beam --source gs://my-bucket/wmt/train.en \\
        --target gs://my-bucket/wmt/train.de --output gs://my-bucket/prep/wmt14 --num-shards 64 \\
        --beam-options="--runner=DataflowRunner --project=my-project --region=europe-west4 \\
            --temp_location=gs://my-bucket/tmp --num_workers=32 \\
            --extra_package=dist/keras_transformer-0.1.0-py3-none-any.whl"

The tokenizer trains on the same seeded sample of ``--max-sentences`` lines whether the corpus
is local or remote (streamed into memory; SentencePiece trains from memory, so no local copy and
no ``--tokenizer`` is needed); ``--tokenizer`` may be remote too. Remote paths are tested with a
test-only file system (``tests/test_beam_remote.py``), not on GCS. The process pool reads and
writes local paths only and refuses a remote one, naming the argument.

TFDS corpora (``--tfds``) are prepared by the pool only.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import shutil
import sys
from collections.abc import Sequence

from pipelines import storage
from pipelines.inputs import PrepareError, files_spec, tfds_spec, tsv_spec
from pipelines.job import RUNNERS, prepare
from pipelines.manifest import FORMAT_VERSION, MANIFEST, MODEL_FILE, read_manifest, sha256_file

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST",
    "MODEL_FILE",
    "PrepareError",
    "prepare",
    "read_manifest",
    "sha256_file",
    "add_arguments",
    "build_parser",
    "run",
    "main",
]


def _add_input_arguments(parser: argparse.ArgumentParser) -> None:
    text = parser.add_argument_group("line-aligned files (repeat for several splits)")
    text.add_argument("--source", action="append", default=[], help="source-language file")
    text.add_argument("--target", action="append", default=[], help="target-language file")
    text.add_argument(
        "--split",
        action="append",
        default=[],
        help="split name of the matching --source/--target (default: train)",
    )
    tsv = parser.add_argument_group("tab-separated file")
    tsv.add_argument("--tsv", help="TSV file with source and target columns")
    tsv.add_argument("--source-column", type=int, default=0)
    tsv.add_argument("--target-column", type=int, default=1)
    known = parser.add_argument_group("known corpora")
    known.add_argument("--dataset", choices=["multi30k"], help="a corpus under --data-dir")
    known.add_argument("--data-dir", help="folder of the corpora (default $KT_DATA_DIR)")
    known.add_argument(
        "--tfds", metavar="NAME", help="tensorflow-datasets name, e.g. wmt14_translate/de-en"
    )
    known.add_argument("--tfds-data-dir", help="tensorflow-datasets data_dir")
    known.add_argument("--download", action="store_true", help="let TFDS download and prepare")
    known.add_argument(
        "--splits",
        help="comma-separated splits for --dataset/--tfds (default: train,validation,test)",
    )
    known.add_argument("--source-lang", default="en")
    known.add_argument("--target-lang", default="de")


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add this job's options to ``parser`` (a fresh parser or a CLI subcommand); return it."""
    parser.add_argument("--output", required=True, help="output folder")
    _add_input_arguments(parser)
    job = parser.add_argument_group("job")
    job.add_argument("--vocab-size", type=int, default=8000)
    job.add_argument("--model-type", choices=["bpe", "unigram"], default="bpe")
    job.add_argument(
        "--tokenizer", help="reuse this tokenizer (folder or .model) instead of training one"
    )
    job.add_argument(
        "--max-sentences", type=int, default=2_000_000, help="tokenizer training sample size"
    )
    job.add_argument(
        "--num-shards", type=int, help="shards per split (default: one per 200k pairs)"
    )
    job.add_argument(
        "--max-sentence-length",
        "--max-length",
        dest="max_sentence_length",
        type=int,
        default=256,
        help="drop pairs with a side of more subwords than this, EOS included",
    )
    job.add_argument("--workers", type=int, help="parallel shard writers (default: CPU count)")
    job.add_argument("--executor", choices=["thread", "process"], default="thread")
    job.add_argument(
        "--runner",
        choices=list(RUNNERS),
        default="pool",
        help="write shards with a local pool (--workers, --executor) or an Apache Beam pipeline "
        "(needs the [beam] extra)",
    )
    job.add_argument(
        "--beam-options",
        default=None,
        metavar="OPTIONS",
        help="Beam pipeline options as one string (default: the local FnApiRunner with --workers "
        "processes), e.g. --beam-options='--runner=FlinkRunner --flink_master=host:8081'",
    )
    job.add_argument("--seed", type=int, default=0)
    job.add_argument("--force", action="store_true", help="ignore the manifest, redo everything")
    return parser


def build_parser(prog: str = "python -m pipelines.prepare") -> argparse.ArgumentParser:
    """The job's argument parser (``main`` parses with it)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Train or reuse the shared tokenizer and write tokenized TFRecord shards.",
    )
    return add_arguments(parser)


def _file_specs(args, parser) -> list:
    if len(args.source) != len(args.target):
        parser.error(f"{len(args.source)} --source but {len(args.target)} --target")
    splits = args.split or (["train"] if len(args.source) == 1 else [])
    if len(splits) != len(args.source):
        parser.error("give one --split per --source/--target pair")
    return [
        files_spec(split, source, target)
        for split, source, target in zip(splits, args.source, args.target, strict=True)
    ]


def _multi30k_specs(args, parser, wanted) -> list:
    from keras_transformer.data.corpus import MULTI30K_SPLITS

    data_dir = args.data_dir or os.environ.get("KT_DATA_DIR")
    if not data_dir:
        parser.error("--dataset needs --data-dir (or KT_DATA_DIR)")
    folder = storage.join(
        data_dir if storage.is_remote(data_dir) else pathlib.Path(data_dir), "multi30k"
    )
    specs = []
    for split in wanted:
        if split not in MULTI30K_SPLITS:
            parser.error(f"multi30k has splits {sorted(MULTI30K_SPLITS)}, not {split!r}")
        stem = storage.join(folder, MULTI30K_SPLITS[split])
        specs.append(files_spec(split, f"{stem}.{args.source_lang}", f"{stem}.{args.target_lang}"))
    return specs


def _input_specs(args, parser) -> list:
    specs = []
    if args.source or args.target:
        specs += _file_specs(args, parser)
    if args.tsv:
        specs.append(
            tsv_spec((args.split or ["train"])[0], args.tsv, args.source_column, args.target_column)
        )
    wanted = (args.splits or "train,validation,test").split(",")
    if args.dataset == "multi30k":
        specs += _multi30k_specs(args, parser, wanted)
    if args.tfds:
        specs += [
            tfds_spec(
                split,
                args.tfds,
                args.source_lang,
                args.target_lang,
                args.tfds_data_dir,
                args.download,
            )
            for split in wanted
        ]
    return specs


#: The arguments that name files or folders (a remote path needs --runner beam).
PATH_ARGUMENTS = ("source", "target", "tsv", "data_dir", "tokenizer", "output")


def _remote_arguments(args) -> list:
    """``[(--name, path)]`` of the path arguments given as ``scheme://...``."""
    found = []
    for name in PATH_ARGUMENTS:
        values = getattr(args, name, None)
        for value in values if isinstance(values, list) else [values]:
            if storage.is_remote(value):
                found.append(("--" + name.replace("_", "-"), value))
    return found


def _check_remote(args) -> bool:
    """Whether the output is remote. Remote paths need ``--runner beam``; with it, the
    ``--beam_plugins`` of ``--beam-options`` are imported here too (their file systems)."""
    remote = _remote_arguments(args)
    if remote and args.runner != "beam":
        name, value = remote[0]
        raise PrepareError(
            f"{name} {value}: the process pool (--runner pool) reads and writes local paths "
            "only; use --runner beam for remote (scheme://) paths"
        )
    if args.runner == "beam":
        if importlib.util.find_spec("apache_beam") is None:
            raise PrepareError(
                '--runner beam needs Apache Beam: pip install "keras-transformer[beam]"'
            )
        try:
            storage.load_plugins(args.beam_options)
        except ImportError as err:
            raise PrepareError(
                f"--beam-options: cannot import a --beam_plugins module ({err})"
            ) from None
    for name, value in remote:
        if not storage.has_filesystem(value):
            raise PrepareError(
                f"{name} {value}: Beam has no file system for {value.split(':', 1)[0]}:// here "
                '(gs://: pip install "apache-beam[gcp]"; s3://: "apache-beam[aws]"; others: '
                "--beam-options=--beam_plugins=MODULE)"
            )
    return storage.is_remote(args.output)


def _output_exists(output: str, remote_output: bool) -> bool:
    if remote_output:
        return bool(storage.glob(storage.join(output, "**")))
    return os.path.exists(output)


def _remove_output(output: str, remote_output: bool) -> None:
    if remote_output:
        storage.remove_tree(output)
    else:
        shutil.rmtree(output, ignore_errors=True)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> int:
    """Run the job for parsed arguments (``add_arguments``); returns the exit status.

    ``parser`` reports usage errors (exit status 2); default: ``build_parser()``.
    """
    from keras_transformer.data import DataError

    parser = parser or build_parser()
    if args.beam_options and args.runner != "beam":
        parser.error("--beam-options needs --runner beam")
    try:
        remote_output = _check_remote(args)
    except PrepareError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    existed = _output_exists(args.output, remote_output)
    try:
        specs = _input_specs(args, parser)
        if not specs:
            parser.error("no input: give --source/--target, --tsv, --dataset or --tfds")
        manifest = prepare(
            specs,
            args.output,
            vocab_size=args.vocab_size,
            tokenizer_dir=args.tokenizer,
            num_shards=args.num_shards,
            max_sentence_length=args.max_sentence_length,
            model_type=args.model_type,
            max_sentences=args.max_sentences,
            seed=args.seed,
            workers=args.workers,
            executor=args.executor,
            force=args.force,
            runner=args.runner,
            beam_options=args.beam_options,
        )
    except (PrepareError, DataError, FileNotFoundError) as err:
        if not existed:  # a bad input writes nothing
            _remove_output(args.output, remote_output)
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(
        f"wrote {args.output}/{MANIFEST} (vocab {manifest['tokenizer']['vocab_size']}, "
        f"{sum(s['kept'] for s in manifest['splits'].values())} pairs)"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 on success, 2 on bad input)."""
    from keras_transformer.quiet import import_library, is_command_line, quiet_start

    argv = list(sys.argv[1:] if argv is None else argv)
    if is_command_line():  # as keras-transformer does: quiet, and TensorFlow after parsing
        quiet_start("--verbose" in argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    import_library()
    return run(args, parser)


if __name__ == "__main__":
    sys.exit(main())
