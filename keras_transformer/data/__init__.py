# Input pipeline (paper section 5.1: "Sentence pairs were batched together by approximate sequence
# length. Each training batch contained a set of sentence pairs containing approximately 25000
# source tokens and 25000 target tokens").
#
# raw text (line-aligned files, TSV, TFDS) or tokenized TFRecord shards -> tf.data pipeline that
# tokenizes in batches, drops empty / over-long pairs, buckets by length under a token budget and
# yields ({"source", "target"}, labels) for teacher-forced training.
"""tf.data input pipeline: read parallel corpora, tokenize, batch by token budget.

One job per module:

* ``corpus``: read and validate (source, target) string pairs: line-aligned files, TSV,
  tensorflow-datasets.
* ``tokenized``: tokenize pairs in batches, the empty / too-long filter and its counts.
* ``buckets``: token-budget length buckets -> model batches (``make_dataset``).
* ``segments``: the endless training stream, in segments that a resumed run starts in
  (``training_stream``).
* ``records``: the TFRecord record format and shards written by ``pipelines.prepare``.

Model batches are ``({"source": int32[B, S], "target": int32[B, T]}, labels int32[B, T])``::

    source = ids(source sentence) + [EOS]
    target = [BOS] + ids(target sentence)        (decoder input, shifted right)
    labels = ids(target sentence) + [EOS]
    padding = PAD_ID (0) everywhere

Example::

    from keras_transformer import data
    from keras_transformer.text.tokenizer import SubwordTokenizer

    tok = SubwordTokenizer.load("runs/tok/saved")
    pairs = data.read_parallel_text("multi30k/train.en", "multi30k/train.de")
    train = data.make_dataset(pairs, tok, tokens_per_batch=4096, seed=1)
    model.fit(train, ...)
"""

from keras_transformer.data.buckets import bucket_boundaries, make_dataset
from keras_transformer.data.corpus import (
    MULTI30K_SPLITS,
    load_tfds,
    read_parallel_text,
    read_tsv,
    validate_parallel_files,
    validate_tsv_file,
)
from keras_transformer.data.records import (
    MAX_OPEN_SHARDS,
    TFRECORD_FEATURES,
    parse_pairs,
    read_tfrecord_shards,
    serialize_pair,
    shard_files,
)
from keras_transformer.data.segments import training_stream
from keras_transformer.data.tokenized import (
    DROP_REASONS,
    TOKENIZE_BATCH,
    count_pairs,
    tokenize_pairs,
)
from keras_transformer.text.lines import DataError, MissingDataError

__all__ = [
    "DataError",
    "MissingDataError",
    "MULTI30K_SPLITS",
    "validate_parallel_files",
    "validate_tsv_file",
    "read_parallel_text",
    "read_tsv",
    "load_tfds",
    "tokenize_pairs",
    "count_pairs",
    "make_dataset",
    "training_stream",
    "bucket_boundaries",
    "serialize_pair",
    "parse_pairs",
    "read_tfrecord_shards",
    "shard_files",
    "DROP_REASONS",
    "TFRECORD_FEATURES",
    "TOKENIZE_BATCH",
    "MAX_OPEN_SHARDS",
]
