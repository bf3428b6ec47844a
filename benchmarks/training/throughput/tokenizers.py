"""Trains the tokenizers of both systems once and keeps them in ``--cache-dir``."""

from __future__ import annotations

import os
import pathlib
import time

from benchmarks.training.throughput.settings import (
    BASE_VOCAB,
    WORDPIECE_RESERVED,
    corpus,
    sp_model_path,
    wordpiece_paths,
)


def prepare_tokenizers(args) -> dict:
    """Trains (or finds in --cache-dir) the SentencePiece model and the WordPiece vocabularies."""
    from keras_transformer.text.tokenizer import SubwordTokenizer

    info = {}
    src, tgt = corpus(args)
    pathlib.Path(args.cache_dir).mkdir(parents=True, exist_ok=True)
    sp_path = sp_model_path(args)
    start = time.perf_counter()
    if not sp_path.exists():
        tokenizer = SubwordTokenizer.train([src, tgt], vocab_size=args.vocab_size)
        tokenizer.write_model(sp_path)
    info["sentencepiece"] = {"path": str(sp_path), "seconds": time.perf_counter() - start}
    if args.baseline_tokenizer == "wordpiece":
        for path, text in zip(wordpiece_paths(args), (src, tgt), strict=True):
            start = time.perf_counter()
            if not path.exists():
                _write_wordpiece_vocabulary(text, path)
            size = sum(1 for _ in open(path, encoding="utf-8"))
            info[f"wordpiece_{text.suffix[1:]}"] = {
                "path": str(path),
                "vocab_size": size,
                "seconds": time.perf_counter() - start,
            }
    return info


def _write_wordpiece_vocabulary(text: pathlib.Path, path: pathlib.Path) -> None:
    """The keras.io recipe's cased WordPiece vocabulary of one side, written atomically."""
    import keras_hub

    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    keras_hub.tokenizers.compute_word_piece_vocabulary(
        [str(text)],
        vocabulary_size=BASE_VOCAB,
        lowercase=False,
        reserved_tokens=WORDPIECE_RESERVED,
        vocabulary_output_file=str(tmp),
    )
    os.replace(tmp, path)
