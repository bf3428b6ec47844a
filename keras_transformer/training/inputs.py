"""The run's input: checking the configured paths, then the training and validation batches
(from text, TFDS or prepared shards; the training stream rebuilt for every ``fit``)."""

from __future__ import annotations

import pathlib

from keras_transformer.text.lines import DataError, iter_lines
from keras_transformer.text.urlpath import is_url
from keras_transformer.training import shards, workers
from keras_transformer.training.run_config import DataSettings, TrainingConfig, data_path

__all__ = ["check_inputs", "train_input", "validation_input"]


def check_inputs(config: TrainingConfig) -> None:
    """Refuses a model that cannot be built and missing corpus or tokenizer paths, before
    anything is written or trained."""
    data = config.data
    if config.training.init_from:
        _check_init_from(config)
    else:
        config.model_config(config.model.source_vocab_size or data.vocab_size)  # validates
    named = {"data.tokenizer": data.tokenizer}
    if data.shards:
        shards.read_prepared(data.shards)  # the manifest, its shards and tokenizer
    elif not data.tfds:
        for side in ("train_source", "train_target", "validation_source", "validation_target"):
            named[f"data.{side}"] = getattr(data, side)
        if not (data.train_source and data.train_target):
            raise ValueError("data.train_source and data.train_target: both are needed")
        for i, corpus in enumerate(data.mix or ()):
            for side in ("source", "target"):
                named[f"data.mix[{i}].{side}"] = corpus[side]
    if data.mix and (data.shards or data.tfds):
        raise ValueError("data.mix: more corpora mix into text corpora only, not shards or TFDS")
    for key, value in named.items():
        if value and key != "data.tokenizer" and is_url(value):
            raise DataError(
                f"{key}={value}: text corpora are read from local files only; prepare shards "
                "from it (keras-transformer prepare --runner beam --output URL) and train with "
                "data.shards=URL"
            )
        if value and not _exists(key, data_path(value)):
            raise FileNotFoundError(f"{key}={value}: no such file or folder ({data_path(value)})")
        if value and key != "data.tokenizer" and not _has_text(data_path(value)):
            raise DataError(f"{key}={value}: the file holds no text ({data_path(value)})")


def _exists(key: str, path) -> bool:
    try:
        return path.exists()
    except FileNotFoundError as error:  # a URL of a file system TensorFlow does not have
        raise FileNotFoundError(f"{key}={error}") from None


def _check_init_from(config: TrainingConfig) -> None:
    """The model to start from exists, has a tokenizer, and has the configured model's shape."""
    from keras_transformer.text.sentencepiece_file import read_model_proto
    from keras_transformer.training.init_from import check_same_shape, resolve_init_from

    source = resolve_init_from(config.training.init_from)
    named = config.data.tokenizer
    # Another tokenizer than the model's: the vocabulary is updated (training/vocab_update.py).
    updated = named and read_model_proto(data_path(named)) != read_model_proto(source.tokenizer_dir)
    check_same_shape(
        source,
        config.model_config(source.model_config.source_vocab_size),
        vocabulary_may_change=bool(updated),
    )


def _has_text(path: pathlib.Path) -> bool:
    """Whether a corpus file has a non-blank line (read up to the first one)."""
    return any(line.strip() for line in iter_lines(path))


def _load_pairs(data: DataSettings, split: str):
    """The (source, target) pairs of a split: ids from ``data.shards``, else text pairs."""
    return _pairs_and_count(data, split)[0]


def _pairs_and_count(data: DataSettings, split: str):
    """``(pairs, number of pairs)`` of a split, ``(None, 0)`` without one; the number is None
    for an endless ``data.mix`` stream and negative where tf.data does not know it (TFDS)."""
    from keras_transformer import data as kt_data
    from keras_transformer.data.corpus import validate_parallel_files

    if data.shards:
        manifest = shards.read_prepared(data.shards)
        name = "train" if split == "train" else shards.validation_split(manifest)
        if name is None:
            return None, 0
        pairs = kt_data.read_tfrecord_shards(data_path(data.shards), name)
        return pairs, manifest["splits"][name]["kept"]
    if data.tfds:
        tfds_split = {"train": "train", "validation": "validation"}[split]
        pairs = kt_data.load_tfds(
            data.tfds,
            tfds_split,
            data.tfds_source_lang,
            data.tfds_target_lang,
            download=data.tfds_download,
        )
        return pairs, int(pairs.cardinality())
    source = data.train_source if split == "train" else data.validation_source
    target = data.train_target if split == "train" else data.validation_target
    if source is None or target is None:
        return None, 0
    if split == "train" and data.mix:
        return _mixed_pairs(data), None
    count = validate_parallel_files(data_path(source), data_path(target))
    return kt_data.read_parallel_text(data_path(source), data_path(target), validate=False), count


def _mixed_pairs(data: DataSettings, seed=None):
    """The main corpus and ``data.mix``'s, each repeated, each pair drawn with probability in
    proportion to its corpus's ``weight`` (the main corpus's is 1), seeded (``seed``, default
    ``data.shuffle_seed``: the same stream in every run, as exact resume needs); a corpus's
    ``tag`` goes before each of its sources."""
    import tensorflow as tf

    from keras_transformer import data as kt_data
    from keras_transformer.data.corpus import validate_parallel_files

    corpora = [{"source": data.train_source, "target": data.train_target}, *data.mix]
    streams, weights = [], []
    for corpus in corpora:
        source, target = data_path(corpus["source"]), data_path(corpus["target"])
        pairs = validate_parallel_files(source, target)
        stream = kt_data.read_parallel_text(source, target, validate=False)
        if corpus.get("tag"):
            tag = tf.constant(f"{str(corpus['tag']).strip()} ")
            stream = stream.map(lambda s, t, tag=tag: (tf.strings.join([tag, s]), t))
        streams.append(stream.repeat())
        weights.append(pairs * float(corpus.get("weight", 1.0)))
    total = sum(weights)
    return tf.data.Dataset.sample_from_datasets(
        streams, [w / total for w in weights], seed=data.shuffle_seed if seed is None else seed
    )


def train_input(data: DataSettings, tokenizer, skip: int = 0):
    """The endless, shuffled training batches after the first ``skip`` (a resumed run's).

    The stream is cut into segments of whole passes over the corpus
    (``keras_transformer.data.segments``): a
    resumed run starts in the segment of its next batch, so the cost of a restart does not grow
    with the batches trained. Built afresh for every ``fit``. An endless ``data.mix`` stream has
    no passes: its segments are so many batches (``segments.mixture_stream``). With
    ``data.service`` naming a dispatcher (``keras-transformer data-service``) the tf.data service
    produces the batches.
    """
    from keras_transformer import data as kt_data
    from keras_transformer.data.segments import mixture_stream

    pairs, corpus_pairs = _pairs_and_count(data, "train")
    if corpus_pairs is not None and corpus_pairs < 0:
        corpus_pairs = _count(pairs)
    if corpus_pairs is None:  # data.mix: an endless draw, in segments of so many batches
        train_ds = mixture_stream(
            lambda seed: _mixed_pairs(data, seed),
            tokenizer,
            tokens_per_batch=data.tokens_per_batch,
            max_sentence_length=data.max_sentence_length,
            seed=data.shuffle_seed,
            skip=skip,
        )
    else:
        train_ds = kt_data.training_stream(
            (data.shards and _shard_parts(data)) or pairs,
            tokenizer,
            corpus_pairs=corpus_pairs,
            tokens_per_batch=data.tokens_per_batch,
            max_sentence_length=data.max_sentence_length,
            seed=data.shuffle_seed,
            skip=skip,
        )
    train_ds = workers.shard_by_data(train_ds)  # across workers: slices of each global batch
    if data.service:
        from keras_transformer.data import service

        train_ds = service.distribute(train_ds, data.service, job_name=data.service_job)
    return train_ds


def _shard_parts(data: DataSettings):
    """The prepared training shards in parts of about a million pairs (whole shards), each with
    its kept pairs by length from the manifest; None for a manifest of an older ``prepare``
    (without them: the corpus is then one part, counted by reading it)."""
    from keras_transformer import data as kt_data
    from keras_transformer.data import segments

    lengths = shards.read_prepared(data.shards)["splits"]["train"].get("kept_by_length")
    if not lengths or not isinstance(lengths[0], list):
        return None
    files = kt_data.shard_files(data_path(data.shards), "train")  # the manifest's order
    groups = segments.group_shards([sum(c) for c in lengths], segments.SEGMENT_PAIRS)
    return [
        segments.CorpusPart(
            kt_data.read_tfrecord_shards([files[i] for i in group]),
            sum(sum(lengths[i]) for i in group),
            segments.add_length_counts(*(lengths[i] for i in group)),
        )
        for group in groups
    ]


def validation_input(data: DataSettings, tokenizer):
    """The validation batches, or None without a validation split."""
    from keras_transformer import data as kt_data

    validation_pairs = _load_pairs(data, "validation")
    if validation_pairs is None:
        return None
    validation_ds = kt_data.make_dataset(
        validation_pairs,
        tokenizer,
        tokens_per_batch=data.tokens_per_batch,
        max_sentence_length=data.max_sentence_length,
        shuffle=False,
    )
    return workers.shard_by_data(_with_known_length(validation_ds))


def _with_known_length(dataset):
    """``dataset`` with its number of batches attached (one pass to count them).

    Length buckets leave the length unknown, and Keras then ends each validation pass with a
    misleading "Your input ran out of data" warning; the batches are the same.
    """
    import tensorflow as tf

    return dataset.apply(tf.data.experimental.assert_cardinality(_count(dataset)))


def _count(dataset) -> int:
    """A dataset's number of elements, by reading it once."""
    import tensorflow as tf

    return int(dataset.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1))
