"""Ensembles in the one search: members' next-token distributions combined at every step.

The reference is independent of the search: full model calls of every member per step, their
log-softmaxes combined in numpy.
"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.inference.saved_model import SETTINGS_FILE, Translator
from keras_transformer.inference.search import Searcher
from keras_transformer.text.tokenizer import BOS_ID, PAD_ID
from tests.oracles.reference_decoding import full_model_call, greedy_by_full_calls

VOCAB = 40
EXTRA = 12


@pytest.fixture(scope="module")
def members():
    keras.utils.set_random_seed(7)
    return [build_transformer(TransformerConfig.tiny(vocab_size=VOCAB, dropout=0.0)) for _ in "abc"]


@pytest.fixture(scope="module")
def source():
    return tf.constant(np.random.RandomState(1).randint(4, VOCAB, size=(5, 6)), tf.int32)


def _log_softmax(x):
    return x - np.logaddexp.reduce(x, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def full_calls(members):
    """Each member's full forward pass (its own call, one ``tf.function`` each)."""
    return [full_model_call(m) for m in members]


def _ensemble_greedy_reference(full_calls, source, length, average):
    """Greedy search over the members' combined distribution, every row of ``source`` at once,
    full model calls per step: ``[(ids, score)]`` per row."""

    def next_log_probs(emitted):
        target = tf.constant([[BOS_ID] + row for row in emitted], tf.int32)
        log_probs = np.stack(
            [_log_softmax(np.asarray(call(source, target)[:, -1], float)) for call in full_calls]
        )
        if average == "probs":
            combined = np.logaddexp.reduce(log_probs, axis=0) - np.log(len(full_calls))
        else:
            combined = _log_softmax(log_probs.mean(axis=0))  # renormalized geometric mean
        combined[:, [PAD_ID, BOS_ID]] = -np.inf
        return combined

    return greedy_by_full_calls(next_log_probs, [length] * source.shape[0])


@pytest.mark.parametrize("average", ["log_probs", "probs"])
def test_ensemble_greedy_search_equals_the_plain_reference(members, full_calls, source, average):
    searcher = Searcher(
        members[0], beam_size=1, max_extra_length=EXTRA, ensemble=members[1:],
        ensemble_average=average,
    )  # fmt: skip
    ids, scores = searcher.search(source)
    reference = _ensemble_greedy_reference(full_calls, source, 6 + EXTRA, average)
    for row, (want, want_score) in enumerate(reference):
        assert [t for t in ids[row].numpy().tolist() if t != PAD_ID] == want
        assert scores[row].numpy() == pytest.approx(want_score, abs=1e-3)


@pytest.fixture(scope="module")
def alone(members, source):
    """Each member's own beam search (beam 4): ``(ids, scores)`` per member."""
    return [Searcher(m, max_extra_length=EXTRA).search(source) for m in members]


def test_an_ensemble_differs_from_each_member_and_its_loops_agree(members, source, alone):
    """Beam 4: the 3-model ensemble translates otherwise than each member alone; finished
    sentences dropped or kept and XLA give the same ids; n-best's first is beam search's."""
    found = []
    for settings in ({}, {"drop_finished": False}, {"jit_compile": True}):
        searcher = Searcher(members[0], max_extra_length=EXTRA, ensemble=members[1:], **settings)
        found.append(searcher.search(source))
    ids = found[0][0].numpy()
    assert all(not np.array_equal(ids, own_ids) for own_ids, _ in alone)
    for other_ids, other_scores in found[1:]:
        np.testing.assert_array_equal(other_ids, ids)
        np.testing.assert_allclose(other_scores, found[0][1], atol=1e-4)
    nbest, _ = searcher.nbest(source)
    np.testing.assert_array_equal(nbest.numpy()[:, 0, : ids.shape[1]], ids)


@pytest.mark.parametrize("average", ["log_probs", "probs"])
def test_a_model_ensembled_with_itself_is_the_model(members, source, alone, average):
    plain = alone[0]  # the model's own beam search
    doubled = Searcher(
        members[0], max_extra_length=EXTRA, ensemble=[members[0]], ensemble_average=average
    ).search(source)
    np.testing.assert_array_equal(doubled[0], plain[0])
    np.testing.assert_allclose(doubled[1], plain[1], atol=1e-5)


def test_members_of_another_vocabulary_are_refused(members):
    other = build_transformer(TransformerConfig.tiny(vocab_size=VOCAB + 1))
    with pytest.raises(ValueError, match="ensemble member 1 has source_vocab_size=41"):
        Searcher(members[0], ensemble=[other])


def test_an_ensemble_saved_model_serves_the_in_memory_ensemble(toy_tokenizer, tmp_path):
    """One SavedModel holds every member: loaded back it translates as the in-memory
    translator (every signature that searches), and translator.json says how many models."""
    from tests.conftest import toy_sentences
    from tests.test_export import assert_signatures_serve_alike

    keras.utils.set_random_seed(2)
    config = TransformerConfig.tiny(toy_tokenizer.vocab_size, dropout=0.0)
    models = [build_transformer(config) for _ in range(2)]
    translator = Translator(
        models[0], toy_tokenizer, ensemble=models[1:], beam_size=2, max_extra_length=6
    )
    single = Translator(models[0], toy_tokenizer, beam_size=2, max_extra_length=6)
    translator.save(tmp_path / "export")
    texts = tf.constant(toy_sentences(6, seed=3))
    loaded = tf.saved_model.load(str(tmp_path / "export"))
    assert_signatures_serve_alike(loaded, translator, texts)
    ensembled = loaded.signatures["serving_default"](text=texts)["score"].numpy()
    assert not np.allclose(ensembled, single.translate(texts)["score"].numpy())
    record = json.loads((tmp_path / "export" / SETTINGS_FILE).read_text())["translator"]
    assert record["models"] == 2 and record["ensemble_average"] == "log_probs"
