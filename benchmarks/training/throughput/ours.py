"""Our system: ``build_transformer`` + ``compile_model``, fed by ``make_dataset`` token budgets."""

from __future__ import annotations

from benchmarks.training.throughput.settings import (
    D_FF,
    D_MODEL,
    DROPOUT,
    NUM_HEADS,
    NUM_LAYERS,
    OURS_MAX_POSITIONS,
    OURS_MAX_SENTENCE_LENGTH,
    OURS_TOKENS_PER_BATCH,
    corpus,
    sp_model_path,
)


def ours_dataset(args):
    """``make_dataset`` token-budget batches of Multi30k train, and what the model needs to know.

    Returns ``(dataset, info)``: the dataset yields ``({"source", "target"}, labels)`` batches;
    ``info`` holds the vocabulary sizes and the tokenizer's name.
    """
    from keras_transformer import data
    from keras_transformer.text.tokenizer import SubwordTokenizer

    tokenizer = SubwordTokenizer(str(sp_model_path(args)))
    pairs = data.read_parallel_text(*corpus(args))
    dataset = data.make_dataset(
        pairs,
        tokenizer,
        tokens_per_batch=OURS_TOKENS_PER_BATCH,
        max_sentence_length=OURS_MAX_SENTENCE_LENGTH,
        seed=args.seed,
    )
    info = {
        "source_vocab": tokenizer.vocab_size,
        "target_vocab": tokenizer.vocab_size,
        "tokenizer": f"SentencePiece BPE {tokenizer.vocab_size}, shared",
    }
    return dataset, info


def build_ours(source_vocab, jit):
    """The ``small`` preset at the benchmark's sizes, compiled as training compiles it."""
    from keras_transformer import TransformerConfig, build_transformer
    from keras_transformer.training import TrainingSettings, compile_model

    config = TransformerConfig.small(
        vocab_size=source_vocab,
        num_layers=NUM_LAYERS,
        d_model=D_MODEL,
        num_heads=NUM_HEADS,
        d_ff=D_FF,
        dropout=DROPOUT,
        max_positions=OURS_MAX_POSITIONS,
    )
    model = build_transformer(config)
    compile_model(model, TrainingSettings(jit_compile=jit))
    return model
