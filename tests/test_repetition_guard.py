"""``no_repeat_ngram_size``: no translation repeats an n-gram of that size (fairseq's and
CTranslate2's guard against the loops of bad input).

An untrained model loops (the same token again and again), so every search below would repeat
without the guard. The greedy reference is independent of the search: a full model call per
step (all rows at once) and the banned ids found in plain Python.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.text.tokenizer import BOS_ID, EOS_ID, PAD_ID
from tests.conftest import searchers_of
from tests.oracles.reference_decoding import full_model_call, greedy_by_full_calls

VOCAB = 40
EXTRA = 20


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(3)
    return build_transformer(TransformerConfig.tiny(vocab_size=VOCAB, dropout=0.0))


@pytest.fixture(scope="module")
def source():
    return tf.constant(np.random.RandomState(0).randint(4, VOCAB, size=(6, 7)), tf.int32)


def _repeats(row, n):
    """How many n-grams of ``row`` (without PAD/EOS) occur a second time."""
    row = [t for t in row if t not in (PAD_ID, EOS_ID)]
    grams = [tuple(row[j : j + n]) for j in range(len(row) - n + 1)]
    return len(grams) - len(set(grams))


def _guarded_greedy_reference(full_call, source, n, lengths):
    """Greedy search with full model calls (every row of ``source`` at once), banning in Python
    every id that would end an n-gram already emitted: ``[(ids, summed log-probability)]``."""

    def next_log_probs(emitted):
        target = tf.constant([[BOS_ID] + row for row in emitted], tf.int32)
        logits = np.asarray(full_call(source, target)[:, -1], float)
        log_probs = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
        for row, ids in enumerate(emitted):
            banned = {PAD_ID, BOS_ID}
            prefix = tuple(ids[len(ids) - n + 1 :]) if n > 1 else ()
            for j in range(len(ids) - n + 1):
                if tuple(ids[j : j + n - 1]) == prefix:
                    banned.add(ids[j + n - 1])
            log_probs[row, list(banned)] = -np.inf
        return log_probs

    return greedy_by_full_calls(next_log_probs, lengths)


@pytest.fixture(scope="module")
def full_call(model):
    """The model's full forward pass (its own call, one ``tf.function``)."""
    return full_model_call(model)


@pytest.fixture(scope="module")
def searcher(model):
    """``searcher(**settings)``: the module's one Searcher per settings (a search traced once
    serves every test that asks for the same settings)."""
    return searchers_of(model, max_extra_length=EXTRA)


def test_the_models_searches_loop_without_the_guard(searcher, source):
    ids, _ = searcher(beam_size=1).search(source)
    assert all(_repeats(row, 2) > 5 for row in ids.numpy())


@pytest.mark.parametrize("n", [1, 2, 3])
def test_guarded_greedy_search_equals_the_plain_reference(full_call, searcher, source, n):
    """Ids equal; scores are the model's log-probabilities of the tokens (a banned id is
    removed, the others keep their probabilities: no renormalization)."""
    ids, scores = searcher(beam_size=1, no_repeat_ngram_size=n).search(source)
    lengths = tf.reduce_sum(tf.cast(source != PAD_ID, tf.int32), axis=1) + EXTRA
    reference = _guarded_greedy_reference(full_call, source, n, lengths.numpy())
    for row, (want, want_score) in enumerate(reference):
        got = [t for t in ids[row].numpy().tolist() if t != PAD_ID]
        assert got == want
        assert scores[row].numpy() == pytest.approx(want_score, abs=1e-3)


@pytest.mark.parametrize("beam_size, n", [(1, 2), (4, 1), (4, 3)])
def test_no_search_repeats_an_ngram_of_the_guards_size(searcher, source, beam_size, n):
    """Greedy, beam and n-best, finished sentences dropped or kept, and XLA: no n-gram of
    size n twice; the loops agree with each other."""
    outputs = []
    for settings in ({}, {"drop_finished": False}, {"jit_compile": True}):
        guarded = searcher(beam_size=beam_size, no_repeat_ngram_size=n, **settings)
        ids, scores = guarded.search(source)
        assert all(_repeats(row, n) == 0 for row in ids.numpy())
        outputs.append((ids.numpy(), scores.numpy()))
        nbest, _ = guarded.nbest(source)
        assert all(_repeats(row, n) == 0 for rows in nbest.numpy() for row in rows)
    for ids, scores in outputs[1:]:
        np.testing.assert_array_equal(ids, outputs[0][0])
        np.testing.assert_allclose(scores, outputs[0][1], atol=1e-4)


def test_a_guard_longer_than_any_output_changes_nothing(searcher, source):
    """n above every output's length bans nothing: the same ids and scores as no guard."""
    for beam_size in (1, 4):
        plain = searcher(beam_size=beam_size).search(source)
        guarded = searcher(beam_size=beam_size, no_repeat_ngram_size=40).search(source)
        np.testing.assert_array_equal(guarded[0], plain[0])
        np.testing.assert_allclose(guarded[1], plain[1], atol=1e-5)
