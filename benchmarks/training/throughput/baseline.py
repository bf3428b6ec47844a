"""The baseline: keras.io's "English-to-Spanish translation with KerasHub" recipe on Multi30k.

``TokenAndPositionEmbedding`` + ``TransformerEncoder``/``TransformerDecoder`` (``mask_zero=True``),
separate cased WordPiece vocabularies (or, with ``--baseline-tokenizer sentencepiece``, our BPE for
both sides with separate embedding tables), every sentence packed/padded to 40 by
``StartEndPacker``, 64 pairs per batch, Dropout(0.5) + Dense(vocab) + float32 softmax, rmsprop,
``SparseCategoricalCrossentropy(ignore_class=0)``, accuracy.
"""

from __future__ import annotations

from benchmarks.training.throughput.settings import (
    BASE_SEQUENCE_LENGTH,
    D_FF,
    D_MODEL,
    DROPOUT,
    NUM_HEADS,
    NUM_LAYERS,
    baseline_batch,
    corpus,
    sp_model_path,
    wordpiece_paths,
)


def _tokenizers(args):
    """``(source tokenizer, target tokenizer, (pad, start, end) ids, vocabulary sizes, name)``."""
    import keras_hub

    from keras_transformer.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, SubwordTokenizer

    if args.baseline_tokenizer == "wordpiece":
        vocabs = [
            [line.rstrip("\n") for line in open(p, encoding="utf-8")] for p in wordpiece_paths(args)
        ]
        src_tok, tgt_tok = (
            keras_hub.tokenizers.WordPieceTokenizer(
                vocabulary=v, lowercase=False, oov_token="[UNK]"
            )
            for v in vocabs
        )
        ids = tuple(tgt_tok.token_to_id(t) for t in ("[PAD]", "[START]", "[END]"))
        sizes = [len(v) for v in vocabs]
        name = f"WordPiece cased, separate: en {sizes[0]}, de {sizes[1]}"
        return src_tok, tgt_tok, ids, sizes, name
    sp = SubwordTokenizer(str(sp_model_path(args)))
    sizes = [sp.vocab_size, sp.vocab_size]
    name = f"SentencePiece BPE {sp.vocab_size} (ours) for both, separate embedding tables"

    def tokenize(text, sp=sp):  # holds `sp`: its tokenize method keeps only a weak reference
        return sp.tokenize(text)

    return tokenize, tokenize, (PAD_ID, BOS_ID, EOS_ID), sizes, name


def baseline_dataset(args):
    """The keras.io KerasHub recipe's pipeline: tokenize, pack to 40 (target 41), batch 64.

    Returns ``(dataset, info)``: the dataset yields ``(source, decoder input, labels)`` batches.
    """
    import keras_hub
    import tensorflow as tf

    from keras_transformer import data

    src_tok, tgt_tok, (pad, start, end), sizes, name = _tokenizers(args)
    if pad != 0:
        raise ValueError(f"baseline padding id is {pad}, expected 0")
    src_packer = keras_hub.layers.StartEndPacker(
        sequence_length=BASE_SEQUENCE_LENGTH, pad_value=pad
    )
    tgt_packer = keras_hub.layers.StartEndPacker(
        sequence_length=BASE_SEQUENCE_LENGTH + 1, start_value=start, end_value=end, pad_value=pad
    )

    def preprocess(source, target):
        source = src_packer(src_tok(source))
        target = tgt_packer(tgt_tok(target))
        return (
            tf.cast(source, tf.int32),
            tf.cast(target[:, :-1], tf.int32),
            tf.cast(target[:, 1:], tf.int32),
        )

    pairs = data.read_parallel_text(*corpus(args))
    pairs = pairs.shuffle(30000, seed=args.seed)
    dataset = pairs.batch(baseline_batch(args))
    dataset = dataset.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset, {"source_vocab": sizes[0], "target_vocab": sizes[1], "tokenizer": name}


def build_baseline(source_vocab, target_vocab, jit, optimizer="rmsprop"):
    """The recipe's model at the benchmark's sizes, compiled as the recipe compiles it."""
    import keras
    import keras_hub

    def embedding(vocabulary_size):
        return keras_hub.layers.TokenAndPositionEmbedding(
            vocabulary_size=vocabulary_size,
            sequence_length=BASE_SEQUENCE_LENGTH,
            embedding_dim=D_MODEL,
            mask_zero=True,
        )

    encoder_inputs = keras.Input(shape=(None,), dtype="int32", name="encoder_inputs")
    x = embedding(source_vocab)(encoder_inputs)
    for _ in range(NUM_LAYERS):
        x = keras_hub.layers.TransformerEncoder(
            intermediate_dim=D_FF, num_heads=NUM_HEADS, dropout=DROPOUT
        )(inputs=x)
    decoder_inputs = keras.Input(shape=(None,), dtype="int32", name="decoder_inputs")
    y = embedding(target_vocab)(decoder_inputs)
    for _ in range(NUM_LAYERS):
        y = keras_hub.layers.TransformerDecoder(
            intermediate_dim=D_FF, num_heads=NUM_HEADS, dropout=DROPOUT
        )(decoder_sequence=y, encoder_sequence=x)
    y = keras.layers.Dropout(0.5)(y)
    logits = keras.layers.Dense(target_vocab)(y)
    # The recipe's Dense(activation="softmax"), with the softmax in float32 as the Keras mixed
    # precision guide asks (identical in fp32).
    probabilities = keras.layers.Activation("softmax", dtype="float32")(logits)
    model = keras.Model([encoder_inputs, decoder_inputs], probabilities, name="keras_hub_baseline")
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(ignore_class=0),
        metrics=["accuracy"],
        jit_compile=jit,
    )
    return model
