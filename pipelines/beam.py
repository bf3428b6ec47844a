# The tokenize-and-write step of pipelines.prepare (paper section 5.1) as an Apache Beam pipeline,
# so that a corpus too big for one machine is tokenized on Dataflow, Flink or Spark.
"""Write one split's TFRecord shards with Apache Beam (``keras-transformer prepare --runner beam``).

The driver (the process that runs ``prepare``) validates the corpus with the same checks and
errors as the process-pool path (``pipelines.inputs.describe_inputs``: missing file, line
counts, non-UTF-8 line), trains or loads the tokenizer, and cuts the corpus into chunks of
``CHUNK_LINES`` line-aligned pairs, each given by its first line number and the byte offset of
that line in every input file (``plan_chunks``). Chunk ``c`` goes to shard ``c % N``
(``plan_shards``). The pipeline::

    Create(shard plans) | Reshuffle | ParDo(write one shard: for each of its chunks, read its
    lines from each file at the offsets, so line i of the source stays paired with line i of the
    target; SentencePiece; drop and count empty / too-long pairs; append the records to the
    shard's file)
        -> counts | CombineGlobally(sum) | WriteToText(counts.json)

Only the plans (line numbers and offsets) and the counts pass between the pipeline's steps; the
records go straight from the tokenizer to their shard file. A pipeline that passed the records to
a sharded write (``WriteToTFRecord(num_shards=N)``) would group them all by shard first, and
Beam's local runner holds such a group in memory: its memory grew with the corpus
(``results/scale.md``). Parallelism is one shard a worker at a time: give at least as many shards
as workers.

Everything is written into a temporary folder ``<output>/<split>.tmp-<pid>-<hex>`` (Beam's own
temporary files included); when the pipeline has finished, the driver renames the shards into
place and then records them in the manifest, so a killed job leaves nothing a reader takes for
complete and the next run removes the folder. Every file access (reading the corpus, offsets,
the temporary folder, counts, renames, sizes, removals) goes through Beam's ``FileSystems``
(``pipelines.storage``), so inputs and output may be ``gs://``, ``s3://`` or ``hdfs://`` URLs
(Dataflow) as well as local paths; on object stores a rename is a copy then delete of one
file, and the shard appears whole or not at all. The split's shards hold the same examples as
the process pool's, in other shards (whole chunks, not every N-th pair); training shuffles anyway.

Example::

    summary = write_split_beam(spec, tokenizer, pathlib.Path("runs/m30k"), num_shards=2,
                               max_sentence_length=256, beam_options="", workers=2)
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import tempfile

from pipelines import storage
from pipelines.manifest import tmp_name

__all__ = [
    "CHUNK_LINES",
    "LOCAL_RUNNER",
    "pipeline_options",
    "plan_chunks",
    "plan_shards",
    "read_chunk",
    "tokenize_chunk",
    "write_split_beam",
]

#: Line-aligned pairs per Beam element (one tokenizer call per ``TOKENIZE_BATCH`` of them).
CHUNK_LINES = 4096
#: The runner used when ``--beam-options`` names none: Beam's own default (Prism) downloads a
#: binary at run time, which fails offline.
LOCAL_RUNNER = "FnApiRunner"


def pipeline_options(beam_options: str | None, workers: int | None):
    """``PipelineOptions`` from a command-line string; the local runner unless one is named.

    Without ``--runner`` the pipeline runs on ``FnApiRunner`` with ``workers`` worker processes
    (``direct_running_mode=multi_processing``; one worker runs in this process).
    """
    from apache_beam.options.pipeline_options import PipelineOptions

    # "runner=X" reads as "--runner=X" (a string that starts with "--" needs "--beam-options=")
    flags = [
        f"--{flag}" if "=" in flag and not flag.startswith("-") else flag
        for flag in shlex.split(beam_options or "")
    ]
    if not any(flag == "--runner" or flag.startswith("--runner=") for flag in flags):
        workers = max(1, workers or 1)
        mode = "multi_processing" if workers > 1 else "in_memory"
        flags += [
            f"--runner={LOCAL_RUNNER}",
            f"--direct_num_workers={workers}",
            f"--direct_running_mode={mode}",
            "--default_sdk_harness_log_level=WARNING",
        ]
    return PipelineOptions(flags)


def _input_files(spec: dict) -> list:
    if spec["kind"] == "files":
        return [spec["source"], spec["target"]]
    if spec["kind"] == "tsv":
        return [spec["path"]]
    from pipelines.inputs import PrepareError

    raise PrepareError(
        f"split {spec['split']!r}: --runner beam reads text files and TSV, not {spec['kind']!r} "
        "inputs (prepare TFDS corpora with the process pool, or through a TFDS Beam builder)"
    )


def _line_offsets(path: str, chunk_lines: int) -> list:
    """Byte offset of every ``chunk_lines``-th line start; none for gzip files (read from the
    start and skipped: gzip cannot seek)."""
    if path.endswith(".gz"):
        return []
    offsets, position = [], 0
    with storage.open_read(path, decompress=False) as handle:
        for number, raw in enumerate(iter(handle.readline, b"")):
            if number % chunk_lines == 0:
                offsets.append(position)
            position += len(raw)
    return offsets


def plan_chunks(spec: dict, count: int, chunk_lines: int = CHUNK_LINES) -> list:
    """Chunks of a validated input: ``{"start", "lines", "offsets"}`` (one offset per file)."""
    files = _input_files(spec)
    offsets = [_line_offsets(path, chunk_lines) for path in files]
    chunks = []
    for index, start in enumerate(range(0, count, chunk_lines)):
        chunks.append(
            {
                "start": start,
                "lines": min(chunk_lines, count - start),
                "offsets": [o[index] if o else None for o in offsets],
            }
        )
    return chunks


def plan_shards(chunks: list, num_shards: int) -> list:
    """``{"index": i, "chunks": [...]}`` for each shard: chunk ``c`` goes to shard ``c % N``."""
    return [{"index": i, "chunks": chunks[i::num_shards]} for i in range(num_shards)]


def _strip(raw: bytes, path: str, number: int) -> str:
    """A line as ``tf.data.TextLineDataset`` gives it ("\\n", then one "\\r", removed)."""
    from keras_transformer.text.lines import DataError

    raw = raw[:-1] if raw.endswith(b"\n") else raw
    raw = raw[:-1] if raw.endswith(b"\r") else raw
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}, line {number}: not valid UTF-8 ({err.reason})") from None


def _chunk_lines(path: str, start: int, lines: int, offset: int | None) -> list:
    from keras_transformer.text.lines import DataError

    with storage.open_read(path) as handle:  # .gz: decompressed, read from the start
        if offset is None:
            for _ in range(start):
                handle.readline()
        else:
            handle.seek(offset)
        found = []
        for number in range(start + 1, start + lines + 1):
            raw = handle.readline()
            if not raw:
                raise DataError(f"{path}: shorter than when validated (no line {number})")
            found.append(_strip(raw, path, number))
    return found


def read_chunk(spec: dict, chunk: dict) -> tuple[list, list]:
    """The chunk's (sources, targets): line ``start + i`` of one file with the same of the other."""
    files = _input_files(spec)
    texts = [
        _chunk_lines(path, chunk["start"], chunk["lines"], offset)
        for path, offset in zip(files, chunk["offsets"], strict=True)
    ]
    if spec["kind"] == "files":
        return texts[0], texts[1]
    rows = [line.split("\t") for line in texts[0]]
    return [r[spec["source_column"]] for r in rows], [r[spec["target_column"]] for r in rows]


def tokenize_chunk(spec: dict, chunk: dict, tokenizer, max_sentence_length: int):
    """(serialized records of the kept pairs, counts by reason and tokens) of one chunk.

    The filter is ``data.tokenized.drop_reasons``'s: empty when a side has no subwords, too long
    when a side needs more than ``max_sentence_length`` positions with its EOS.
    """
    import tensorflow as tf

    from keras_transformer import data
    from keras_transformer.data.segments import count_length

    sources, targets = read_chunk(spec, chunk)
    counts = {reason: 0 for reason in data.DROP_REASONS}
    counts.update(source_tokens=0, target_tokens=0, kept_by_length=[])
    records = []
    for begin in range(0, len(sources), data.TOKENIZE_BATCH):
        end = begin + data.TOKENIZE_BATCH
        source_ids = tokenizer.tokenize(tf.constant(sources[begin:end])).to_list()
        target_ids = tokenizer.tokenize(tf.constant(targets[begin:end])).to_list()
        for source, target in zip(source_ids, target_ids, strict=True):
            if not source or not target:
                counts["empty"] += 1
            elif max(len(source), len(target)) + 1 > max_sentence_length:
                counts["too_long"] += 1
            else:
                counts["kept"] += 1
                counts["source_tokens"] += len(source)
                counts["target_tokens"] += len(target)
                count_length(counts["kept_by_length"], source, target)
                records.append(data.serialize_pair(source, target))
    return records, counts


def _add_counts(all_counts) -> dict:
    """Counts summed; ``kept_by_length`` lists added element-wise, ``shard_kept_by_length``
    (one list a shard, by shard index) joined."""
    from keras_transformer.data.segments import add_length_counts

    total: dict = {"kept_by_length": [], "shard_kept_by_length": {}}
    for counts in all_counts:
        for key, value in counts.items():
            if key == "kept_by_length":
                total[key] = add_length_counts(total[key], value)
            elif key == "shard_kept_by_length":
                total[key] = {**total[key], **value}
            else:
                total[key] = total.get(key, 0) + value
    return total


@contextlib.contextmanager
def _record_writer(path: str):
    """A ``tf.io.TFRecordWriter`` for ``path``: straight to a local path, else to a temporary
    local file streamed to ``path`` through Beam's ``FileSystems`` when it is complete."""
    import tensorflow as tf

    if not storage.is_remote(path):
        with tf.io.TFRecordWriter(path) as writer:
            yield writer
        return
    with tempfile.TemporaryDirectory(prefix="kt-shard-") as folder:
        local = os.path.join(folder, "shard.tfrecord")
        with tf.io.TFRecordWriter(local) as writer:
            yield writer
        with open(local, "rb") as handle, storage.open_write(path) as out:
            for block in iter(lambda: handle.read(1 << 20), b""):
                out.write(block)


def _write_shard_fn(model_proto: bytes, spec: dict, folder: str, names: list, max_length: int):
    """The pipeline's shard-writing DoFn (built here so that ``apache_beam`` loads only when
    used): tokenizes a shard's chunks in order, writes their records, yields the counts."""
    import apache_beam as beam

    class WriteShard(beam.DoFn):
        def setup(self):
            from keras_transformer.text.tokenizer import SubwordTokenizer

            self.tokenizer = SubwordTokenizer(model_proto)

        def process(self, plan):
            all_counts = []
            with _record_writer(storage.join(folder, names[plan["index"]])) as writer:
                for chunk in plan["chunks"]:
                    records, counts = tokenize_chunk(spec, chunk, self.tokenizer, max_length)
                    for record in records:
                        writer.write(record)
                    all_counts.append(counts)
            shard = _add_counts(all_counts)
            shard["shard_kept_by_length"] = {str(plan["index"]): shard.pop("kept_by_length")}
            yield shard

    return WriteShard()


@contextlib.contextmanager
def _local_worker_plugins(options):
    """Give the local runner's worker processes the ``--beam_plugins`` (their file systems).

    ``FnApiRunner`` in ``multi_processing`` mode starts ``sdk_worker_main`` processes without
    the pipeline options (Dataflow, Flink and Spark send them), so a plugin named there would be
    imported by the driver but not by those workers; ``sdk_worker_main`` reads options from the
    file named by ``PIPELINE_OPTIONS_FILE`` when set, which the workers inherit from here.
    """
    from apache_beam.options.pipeline_options import DirectOptions, SetupOptions, StandardOptions

    plugins = options.view_as(SetupOptions).beam_plugins
    local = options.view_as(StandardOptions).runner == LOCAL_RUNNER
    if not (
        plugins and local and options.view_as(DirectOptions).direct_running_mode != "in_memory"
    ):
        yield
        return
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="kt-beam-options-") as handle:
        json.dump({"options": options.get_all_options(drop_default=True)}, handle)
        handle.flush()
        previous = os.environ.get("PIPELINE_OPTIONS_FILE")
        os.environ["PIPELINE_OPTIONS_FILE"] = handle.name
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop("PIPELINE_OPTIONS_FILE", None)
            else:
                os.environ["PIPELINE_OPTIONS_FILE"] = previous


def _run_pipeline(spec, plans, model_proto, folder, names, max_sentence_length, options):
    import apache_beam as beam

    with _local_worker_plugins(options), beam.Pipeline(options=options) as pipeline:
        _ = (
            pipeline
            | "Plans" >> beam.Create(plans)
            | "Spread" >> beam.Reshuffle()
            | "Shards"
            >> beam.ParDo(_write_shard_fn(model_proto, spec, folder, names, max_sentence_length))
            | "Sum" >> beam.CombineGlobally(_add_counts)
            | "Json" >> beam.Map(json.dumps)
            | "Counts"
            >> beam.io.WriteToText(storage.join(folder, "counts"), shard_name_template="")
        )


def _summary(counts: dict, names: list, output: str) -> dict:
    from keras_transformer import data

    by_reason = {reason: counts.get(reason, 0) for reason in data.DROP_REASONS}
    return {
        "shards": names,
        "shard_bytes": [storage.size(storage.join(output, name)) for name in names],
        "num_shards": len(names),
        "pairs": sum(by_reason.values()),
        "kept": by_reason["kept"],
        "dropped": {reason: n for reason, n in by_reason.items() if reason != "kept"},
        "source_tokens": counts.get("source_tokens", 0),
        "target_tokens": counts.get("target_tokens", 0),
        "kept_by_length": [  # a list a shard (a shard that got no chunk: [])
            counts["shard_kept_by_length"].get(str(i), []) for i in range(len(names))
        ],
        "runner": "beam",
    }


def _move_into_place(folder: str, output: str, split: str, names: list) -> dict:
    """Rename the finished shards from ``folder`` into ``output`` (every shard has its file, an
    empty one when it got no chunk), remove another layout's shards and the folder; the
    pipeline's counts."""
    counts = json.loads(storage.read_bytes(storage.join(folder, "counts")).decode("utf-8"))
    for name in names:
        storage.rename(storage.join(folder, name), storage.join(output, name))
    old = storage.glob(storage.join(output, f"{split}-*-of-*.tfrecord"))
    storage.delete([path for path in old if path.rsplit("/", 1)[-1] not in names])
    storage.remove_tree(folder)
    return counts


def write_split_beam(
    spec: dict,
    tokenizer,
    output,
    num_shards: int,
    max_sentence_length: int,
    *,
    count: int,
    beam_options: str | None = None,
    workers: int | None = None,
) -> dict:
    """Write all shards of ``spec["split"]`` with Beam, then move them into place; its summary.

    ``count`` is the validated number of pairs (``describe_inputs``). Shards of an older layout
    (another shard count) are removed once the new ones are in place. ``output`` and the inputs
    may be local or remote (``gs://...``): every file is reached through Beam's ``FileSystems``.
    """
    from pipelines.shards import shard_names

    output = str(output)
    split = spec["split"]
    names = shard_names(split, num_shards)
    plans = plan_shards(plan_chunks(spec, count), num_shards)
    folder = str(tmp_name(storage.join(output, split)))
    storage.mkdirs(folder)
    options = pipeline_options(beam_options, workers)
    try:
        _run_pipeline(
            spec, plans, tokenizer.model_proto, folder, names, max_sentence_length, options
        )
    except BaseException:
        try:  # a SIGKILL leaves it: the next run removes it
            storage.remove_tree(folder)
        except Exception:  # noqa: BLE001 - the pipeline's error is the one to report
            pass
        raise
    counts = _move_into_place(folder, output, split, names)
    return _summary(counts, names, output)
