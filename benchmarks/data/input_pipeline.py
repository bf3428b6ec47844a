# Input pipeline throughput (paper section 5.1: batches of ~25000 source + 25000 target tokens):
# is tf.data fast enough to keep the model fed? Prints tokens/s of the pipeline alone, the training
# step's token rate for comparison, and padding efficiency of token-budget buckets vs fixed 64.
"""Benchmark the input pipeline on Multi30k train.

Usage::

    python -m benchmarks.data.input_pipeline          # data: $KT_DATA_DIR or ../shared/data
    python -m benchmarks.data.input_pipeline --batches 100 --tokens-per-batch 8192 --model-steps 0
    # also read pipelines.prepare shards
    python -m benchmarks.data.input_pipeline --shards runs/m30k

"tokens" are real (non-padding) source + target tokens, EOS/BOS included; "slots" count padding.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]

from keras_transformer import data  # noqa: E402
from keras_transformer.text.tokenizer import PAD_ID, SubwordTokenizer  # noqa: E402
from tests.oracles.fixed_batches import make_fixed_batch_dataset, padding_efficiency  # noqa: E402


def _count(inputs, labels):
    real = tf.math.count_nonzero(inputs["source"] != PAD_ID) + tf.math.count_nonzero(
        inputs["target"] != PAD_ID
    )
    slots = tf.size(inputs["source"], tf.int64) + tf.size(inputs["target"], tf.int64)
    return real, slots


def time_pipeline(dataset, batches=None):
    """Iterate (at most ``batches``) batches; return (seconds, batches, real tokens, slots)."""
    if batches:
        dataset = dataset.take(batches)
    start = time.perf_counter()
    n = real = slots = 0
    for inputs, labels in dataset:
        r, s = _count(inputs, labels)
        n, real, slots = n + 1, real + int(r), slots + int(s)
    return time.perf_counter() - start, n, real, slots


def report(name, seconds, n, real, slots):
    print(
        f"{name:<38} {n:5d} batches {seconds:7.2f} s  {real / seconds:10,.0f} tokens/s  "
        f"{n / seconds:7.1f} batches/s  (padding efficiency {real / max(slots, 1):.3f})"
    )


def model_rate(tokenizer, dataset, preset, steps):
    """Token rate of ``train_on_batch`` on a small model, or None with the reason it was skipped."""
    try:
        import keras

        from keras_transformer import TransformerConfig, build_transformer
    except Exception as err:  # the model may not exist yet
        return None, f"keras_transformer.build_transformer not importable ({err})"
    try:
        config = TransformerConfig.preset(preset, tokenizer.vocab_size)
        model = build_transformer(config)
        model.compile(
            optimizer=keras.optimizers.Adam(1e-4),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD_ID),
            jit_compile=False,
        )
        batches = list(dataset.take(steps + 2))
        model.train_on_batch(*batches[0])  # build and trace
        model.train_on_batch(*batches[1])
        start = time.perf_counter()
        tokens = 0
        for inputs, labels in batches[2:]:
            model.train_on_batch(inputs, labels)
            tokens += int(_count(inputs, labels)[0])
        seconds = time.perf_counter() - start
        return (tokens / seconds, len(batches) - 2), None
    except Exception as err:
        return None, f"{type(err).__name__}: {err}"


def _parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir", default=os.environ.get("KT_DATA_DIR", str(REPO.parent / "shared" / "data"))
    )
    parser.add_argument("--tokenizer", help="saved tokenizer (default: train one, vocab 8000)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--tokens-per-batch", type=int, default=4096)
    parser.add_argument(
        "--max-sentence-length",
        "--max-length",
        type=int,
        default=256,
        help="subwords per side, EOS included (longer pairs are dropped)",
    )
    parser.add_argument("--batches", type=int, help="batches per timing (default: one epoch)")
    parser.add_argument("--shards", help="a pipelines.prepare output folder to time as well")
    parser.add_argument("--preset", default="small", help="TransformerConfig preset for the step")
    parser.add_argument("--model-steps", type=int, default=10)
    return parser


def main(argv=None):
    args = _parser().parse_args(argv)

    corpus = pathlib.Path(args.data_dir) / "multi30k"
    source, target = corpus / "train.en", corpus / "train.de"
    start = time.perf_counter()
    if args.tokenizer:
        tokenizer = SubwordTokenizer.load(args.tokenizer)
    else:
        tokenizer = SubwordTokenizer.train(
            [source, target], args.vocab_size, output_dir=tempfile.mkdtemp(prefix="kt_bench_")
        )
    print(f"tokenizer: vocab {tokenizer.vocab_size}, ready in {time.perf_counter() - start:.1f} s")
    pairs = data.read_parallel_text(source, target)
    counts = data.count_pairs(pairs, tokenizer, args.max_sentence_length)
    print(
        f"Multi30k train: {counts['total']} pairs, {counts['kept']} kept, mean tokens per "
        f"sentence {counts['source_tokens'] / counts['kept']:.1f} (en) "
        f"{counts['target_tokens'] / counts['kept']:.1f} (de)"
    )
    print(f"CPU threads visible to TF: {os.cpu_count()}; tokens_per_batch={args.tokens_per_batch}")

    batch_args = dict(
        tokens_per_batch=args.tokens_per_batch, max_sentence_length=args.max_sentence_length, seed=1
    )
    cached = data.make_dataset(pairs, tokenizer, cache=True, **batch_args)
    report("text -> batches (tokenize, epoch 1)", *time_pipeline(cached, args.batches))
    report("cached tokens -> batches (epoch 2)", *time_pipeline(cached, args.batches))
    fixed = make_fixed_batch_dataset(
        pairs, tokenizer, 64, max_sentence_length=args.max_sentence_length, seed=1
    )
    report("fixed 64 pairs per batch", *time_pipeline(fixed, args.batches))
    if args.shards:
        ids = data.read_tfrecord_shards(args.shards, split="train")
        report(
            "TFRecord shards -> batches",
            *time_pipeline(data.make_dataset(ids, None, **batch_args), args.batches),
        )

    ours = padding_efficiency(data.make_dataset(pairs, tokenizer, **batch_args))
    baseline = padding_efficiency(fixed)
    print(f"padding efficiency: token-budget buckets {ours:.3f} vs fixed 64 pairs {baseline:.3f}")

    if args.model_steps > 0:
        rate, skipped = model_rate(tokenizer, cached, args.preset, args.model_steps)
        if rate is None:
            print(f"training step: skipped ({skipped})")
        else:
            print(
                f"training step ({args.preset} preset, train_on_batch, {rate[1]} steps): "
                f"{rate[0]:,.0f} tokens/s"
            )


if __name__ == "__main__":
    main()
