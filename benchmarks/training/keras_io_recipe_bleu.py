"""The keras.io recipe's Multi30k BLEU, trained and scored on this machine.

"English-to-Spanish translation with KerasHub" (keras.io, last modified 2024/04/30) as published,
with three changes and nothing else:

* the data: Multi30k en->de train (29,000 pairs; val for ``fit``'s validation), lowercased as the
  recipe lowercases its pairs;
* the length of training: a wall-clock budget (``--minutes``, default 40, as our recipe's
  40-minute report) instead of ``EPOCHS``; whole epochs are run until the budget is spent inside
  one, which is then stopped at the step that crosses it;
* decoding: the recipe's ``decode_sequences`` (``GreedySampler``, the source padded to 40, a
  40-id ``[START] [PAD] ...`` prompt, the whole model re-run each step) on batches of 64 sentences
  instead of one: the recipe has no padding mask, every source is padded to 40 and the prompt is
  causal, so a sentence's output does not depend on the others in its batch.

Everything else is the recipe's: WordPiece vocabularies of 15,000 per side computed on the
training text, sequences packed to 40, batches of 64 (``shuffle(2048)`` of batches, then
``cache()``), one ``TransformerEncoder`` and one ``TransformerDecoder`` (d_model 256, d_ff 2048,
8 heads), ``Dropout(0.5)`` and a softmax ``Dense``, rmsprop, plain sparse categorical
cross-entropy, float32. The outputs are lowercase, so the score a user compares with ours is the
case-insensitive sacreBLEU (``-lc``), given beside the cased one.

    python -m benchmarks.training.keras_io_recipe_bleu --output /tmp/keras_io_recipe \\
        --results results/keras_io_recipe_multi30k.json

``benchmarks/training/throughput/baseline.py`` is the same recipe at our model's sizes, for speed.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time

# The recipe's BATCH_SIZE, MAX_SEQUENCE_LENGTH, ENG_VOCAB_SIZE = SPA_VOCAB_SIZE and reserved
# tokens, shared with its speed benchmark (throughput/baseline.py)
from benchmarks.training.throughput.settings import (
    BASE_BATCH,
    BASE_SEQUENCE_LENGTH,
    BASE_VOCAB,
    WORDPIECE_RESERVED,
)

EMBED_DIM, INTERMEDIATE_DIM, NUM_HEADS = 256, 2048, 8
DECODE_BATCH = 64


def read_lower(path):
    """The lines of ``path``, lowercased as the recipe lowercases its pairs."""
    return [line.rstrip("\n").lower() for line in open(path, encoding="utf-8")]


def word_piece_vocabulary(lines, cache):
    """The recipe's ``train_word_piece``, cached in ``cache`` (a text file, one piece a line)."""
    import keras_hub
    import tensorflow as tf

    if not cache.exists():
        vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
            tf.data.Dataset.from_tensor_slices(lines).batch(1000).prefetch(2),
            vocabulary_size=BASE_VOCAB,
            reserved_tokens=WORDPIECE_RESERVED,
        )
        cache.write_text("\n".join(vocabulary) + "\n", encoding="utf-8")
    return cache.read_text(encoding="utf-8").splitlines()


def make_dataset(source_lines, target_lines, source_tokenizer, target_tokenizer):
    """The recipe's ``make_dataset`` and ``preprocess_batch``."""
    import keras_hub
    import tensorflow as tf

    source_packer = keras_hub.layers.StartEndPacker(
        sequence_length=BASE_SEQUENCE_LENGTH, pad_value=source_tokenizer.token_to_id("[PAD]")
    )
    target_packer = keras_hub.layers.StartEndPacker(
        sequence_length=BASE_SEQUENCE_LENGTH + 1,
        start_value=target_tokenizer.token_to_id("[START]"),
        end_value=target_tokenizer.token_to_id("[END]"),
        pad_value=target_tokenizer.token_to_id("[PAD]"),
    )

    def preprocess_batch(source, target):
        source = source_packer(source_tokenizer(source))
        target = target_packer(target_tokenizer(target))
        return {"encoder_inputs": source, "decoder_inputs": target[:, :-1]}, target[:, 1:]

    dataset = tf.data.Dataset.from_tensor_slices((source_lines, target_lines)).batch(BASE_BATCH)
    dataset = dataset.map(preprocess_batch, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.shuffle(2048).prefetch(16).cache()


def build_transformer():
    """The recipe's model: an encoder model and a decoder model chained, compiled as published."""
    import keras
    import keras_hub

    encoder_inputs = keras.Input(shape=(None,), name="encoder_inputs")
    x = keras_hub.layers.TokenAndPositionEmbedding(
        vocabulary_size=BASE_VOCAB, sequence_length=BASE_SEQUENCE_LENGTH, embedding_dim=EMBED_DIM
    )(encoder_inputs)
    encoder_outputs = keras_hub.layers.TransformerEncoder(
        intermediate_dim=INTERMEDIATE_DIM, num_heads=NUM_HEADS
    )(inputs=x)
    encoder = keras.Model(encoder_inputs, encoder_outputs)

    decoder_inputs = keras.Input(shape=(None,), name="decoder_inputs")
    encoded = keras.Input(shape=(None, EMBED_DIM), name="decoder_state_inputs")
    x = keras_hub.layers.TokenAndPositionEmbedding(
        vocabulary_size=BASE_VOCAB, sequence_length=BASE_SEQUENCE_LENGTH, embedding_dim=EMBED_DIM
    )(decoder_inputs)
    x = keras_hub.layers.TransformerDecoder(intermediate_dim=INTERMEDIATE_DIM, num_heads=NUM_HEADS)(
        decoder_sequence=x, encoder_sequence=encoded
    )
    x = keras.layers.Dropout(0.5)(x)
    decoder = keras.Model(
        [decoder_inputs, encoded], keras.layers.Dense(BASE_VOCAB, activation="softmax")(x)
    )
    transformer = keras.Model(
        [encoder_inputs, decoder_inputs],
        decoder([decoder_inputs, encoder.output]),
        name="transformer",
    )
    transformer.compile("rmsprop", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return transformer


def wall_clock_budget(minutes, started):
    """A callback that stops ``fit`` at the first step ending after ``minutes`` from ``started``."""
    import keras

    class WallClockBudget(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.steps = 0

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            if time.monotonic() - started >= 60 * minutes:
                self.model.stop_training = True

    return WallClockBudget()


def decode_sequences(transformer, source_tokenizer, target_tokenizer, sentences):
    """The recipe's ``decode_sequences`` and post-processing, on one batch of ``sentences``."""
    import keras_hub
    import tensorflow as tf
    from keras import ops

    tokens = tf.ragged.constant(source_tokenizer(sentences), dtype=tf.int32)  # lists in eager
    tokens = tokens.to_tensor(shape=[None, BASE_SEQUENCE_LENGTH])  # padded (cut) to 40 with 0

    def next(prompt, cache, index):
        logits = transformer([tokens, prompt])[:, index - 1, :]
        return logits, None, cache

    batch = len(sentences)
    start = ops.full((batch, 1), target_tokenizer.token_to_id("[START]"))
    pad = ops.full((batch, BASE_SEQUENCE_LENGTH - 1), target_tokenizer.token_to_id("[PAD]"))
    generated = keras_hub.samplers.GreedySampler()(
        next,
        ops.concatenate((start, pad), axis=-1),
        stop_token_ids=[target_tokenizer.token_to_id("[END]")],
        index=1,
    )
    outputs = []
    generated = ops.convert_to_numpy(generated).astype("int32")  # ops.full made floats
    for text in target_tokenizer.detokenize(generated):
        text = text.decode("utf-8") if isinstance(text, bytes) else str(text)
        # The recipe removes the special tokens; text after [END] is dropped as well, since a
        # sampler that stops when every sentence has ended leaves the others' later steps filled.
        text = text.split("[END]")[0]
        outputs.append(text.replace("[PAD]", "").replace("[START]", "").strip())
    return outputs


def translate_file(transformer, source_tokenizer, target_tokenizer, lines):
    """Greedy translations of ``lines`` (lowercased), ``DECODE_BATCH`` at a time, and seconds."""
    started = time.monotonic()
    outputs = []
    for begin in range(0, len(lines), DECODE_BATCH):
        batch = lines[begin : begin + DECODE_BATCH]
        outputs += decode_sequences(transformer, source_tokenizer, target_tokenizer, batch)
    return outputs, time.monotonic() - started


def scores(hypotheses, reference_path):
    """Cased and case-insensitive sacreBLEU (13a) and chrF against the raw reference file."""
    from keras_transformer.evaluation import score_translations

    references = [line.rstrip("\n") for line in open(reference_path, encoding="utf-8")]
    found = score_translations(hypotheses, references[: len(hypotheses)], lowercase=True)
    return {name: round(found[name].score, 2) for name in ("bleu", "bleu_lowercase", "chrf")}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data-dir", default=os.environ.get("KT_DATA_DIR", "../shared/data"), help="corpora"
    )
    parser.add_argument("--output", required=True, help="folder for vocabularies, weights, text")
    parser.add_argument("--results", help="write the JSON record here as well")
    parser.add_argument("--minutes", type=float, default=40.0, help="training wall-clock budget")
    parser.add_argument("--seed", type=int, default=0, help="keras.utils.set_random_seed")
    parser.add_argument("--sentences", type=int, help="score the first N of each set")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import keras
    import keras_hub

    from keras_transformer.machine import machine_record

    keras.utils.set_random_seed(args.seed)
    root = pathlib.Path(args.data_dir) / "multi30k"
    output = pathlib.Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    train = [read_lower(root / f"train.{side}") for side in ("en", "de")]
    val = [read_lower(root / f"val.{side}") for side in ("en", "de")]
    tokenizers = [
        keras_hub.tokenizers.WordPieceTokenizer(
            vocabulary=word_piece_vocabulary(lines, output / f"vocab.{side}.txt"), lowercase=False
        )
        for lines, side in zip(train, ("en", "de"))
    ]
    vocabulary_seconds = time.monotonic() - started
    transformer = build_transformer()
    train_started = time.monotonic()
    budget = wall_clock_budget(args.minutes, train_started)
    history = transformer.fit(
        make_dataset(*train, *tokenizers),
        epochs=10_000,
        validation_data=make_dataset(*val, *tokenizers),
        callbacks=[budget],
        verbose=2,
    )
    train_minutes = (time.monotonic() - train_started) / 60
    transformer.save_weights(output / "transformer.weights.h5")
    record = {
        "what": "the keras.io KerasHub translation recipe as published, on Multi30k en->de",
        "command": "python -m benchmarks.training.keras_io_recipe_bleu "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v),
        "trained": machine_record(),
        "budget_minutes": args.minutes,
        "train_minutes": round(train_minutes, 2),
        "vocabulary_seconds": round(vocabulary_seconds, 1),
        "updates": budget.steps,
        "epochs_started": len(history.history["loss"]),
        "history": {k: [round(float(v), 4) for v in vs] for k, vs in history.history.items()},
        "parameters": transformer.count_params(),
        "decoding": "greedy (the recipe's GreedySampler), batches of 64, sources cut at 40",
        "sets": {},
    }
    for name in ("val", "test_2016_flickr"):
        lines = read_lower(root / f"{name}.en")[: args.sentences]
        hypotheses, seconds = translate_file(transformer, *tokenizers, lines)
        (output / f"{name}.hyp.de").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
        record["sets"][name] = {"sentences": len(lines), "decode_seconds": round(seconds, 1)}
        record["sets"][name].update(scores(hypotheses, root / f"{name}.de"))
        print(name, record["sets"][name], flush=True)
    text = json.dumps(record, indent=2) + "\n"
    (output / "result.json").write_text(text)
    if args.results:
        pathlib.Path(args.results).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
