"""Translation quality with sacreBLEU on detokenized text (the paper's Table 2 reports BLEU)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from keras_transformer.text.lines import read_lines  # noqa: F401  (re-exported: evaluation.read_lines)


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = False):
    """sacreBLEU corpus BLEU (default 13a tokenization, cased) of detokenized strings.

    Returns sacrebleu's ``BLEUScore``; ``.score`` is the number and ``format()`` includes the
    signature when called through :func:`score_translations`.
    """
    import sacrebleu

    _check_lengths(hypotheses, references)
    return sacrebleu.corpus_bleu(list(hypotheses), [list(references)], lowercase=lowercase)


def score_translations(
    hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = False
) -> dict:
    """BLEU and chrF with their sacreBLEU signatures (plus lowercased BLEU if asked)."""
    from sacrebleu.metrics import BLEU, CHRF

    _check_lengths(hypotheses, references)
    refs = [list(references)]
    bleu, chrf = BLEU(), CHRF()
    result = {
        "bleu": bleu.corpus_score(list(hypotheses), refs),
        "bleu_signature": str(bleu.get_signature()),
        "chrf": chrf.corpus_score(list(hypotheses), refs),
        "chrf_signature": str(chrf.get_signature()),
    }
    if lowercase:
        lower = BLEU(lowercase=True)
        result["bleu_lowercase"] = lower.corpus_score(list(hypotheses), refs)
        result["bleu_lowercase_signature"] = str(lower.get_signature())
    return result


def _check_lengths(hypotheses, references):
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")


def translate_sentences(
    model,
    tokenizer,
    sentences: Iterable[str],
    batch_size: int = 64,
    max_source_length: int | None = None,
    **settings,
) -> list[str]:
    """Translates raw sentences with an in-memory Keras model (greedy if ``beam_size == 1``;
    ``settings``: :class:`~keras_transformer.inference.settings.SearchSettings` fields).

    Sentences are sorted by length into batches (less padding) and returned in input order.
    """
    import tensorflow as tf

    from keras_transformer.inference.batching import length_sorted_batches
    from keras_transformer.inference.search import get_searcher
    from keras_transformer.model import model_dims
    from keras_transformer.text.tokenizer import with_eos

    sentences = list(sentences)
    ids = tokenizer.tokenize(tf.constant(sentences, tf.string)).to_list()
    ids = with_eos(ids, max_source_length or model_dims(model)["max_positions"])
    searcher = get_searcher(model, **settings)
    translations = [""] * len(sentences)
    for chunk in length_sorted_batches([len(row) for row in ids], batch_size):
        batch = np.zeros((len(chunk), max(len(ids[i]) for i in chunk)), np.int32)
        for row, i in enumerate(chunk):
            batch[row, : len(ids[i])] = ids[i]
        out, _ = searcher.search(tf.constant(batch))
        texts = tokenizer.detokenize(out).numpy()
        for row, i in enumerate(chunk):
            translations[i] = texts[row].decode("utf-8")
    return translations
