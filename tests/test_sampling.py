"""Sampling (top-k, top-p, temperature, seeded per sentence) as a strategy of the one search.

The references are independent: the model called directly on ``[BOS]`` gives the first-token
distribution, filtered in numpy; the draws of many seeds must follow it.
"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.inference.sampling import sentence_seeds
from keras_transformer.inference.saved_model import SETTINGS_FILE, Translator
from keras_transformer.inference.search import Searcher
from keras_transformer.inference.settings import SearchSettings
from keras_transformer.text.tokenizer import BOS_ID, PAD_ID
from tests.conftest import searchers_of

VOCAB = 24
DRAWS = 4000


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(11)
    return build_transformer(TransformerConfig.tiny(vocab_size=VOCAB, dropout=0.0))


@pytest.fixture(scope="module")
def source():
    return tf.constant(np.random.RandomState(4).randint(4, VOCAB, size=(5, 6)), tf.int32)


@pytest.fixture(scope="module")
def searcher(model):
    """``searcher(**settings)``: the module's one Searcher per settings (a search traced once
    serves every test that asks for the same settings)."""
    return searchers_of(model)


def _first_token_probs(model, source_row, temperature):
    """The model's first-token distribution for one source, PAD and BOS removed, in numpy."""
    logits = model({"source": source_row[None], "target": tf.constant([[BOS_ID]])})[0, 0]
    logits = np.asarray(logits, np.float64)
    log_probs = logits - np.logaddexp.reduce(logits)
    log_probs[[PAD_ID, BOS_ID]] = -np.inf
    scaled = log_probs / temperature
    return np.exp(scaled - np.logaddexp.reduce(scaled))


def _filtered(probs, topk, topp):
    """``probs`` kept to the top-k, then to the smallest nucleus reaching ``topp``."""
    order = np.argsort(-probs, kind="stable")
    keep = np.zeros_like(probs, bool)
    keep[order[: topk or len(probs)]] = True
    kept = np.where(keep, probs, 0.0) / probs[keep].sum()
    before = np.cumsum(kept[order]) - kept[order]
    nucleus = np.zeros_like(keep)
    nucleus[order[(before < topp) & keep[order]]] = True
    nucleus[order[0]] = True
    final = np.where(nucleus, probs, 0.0)
    return final / final.sum()


@pytest.mark.parametrize(
    "topk, topp, temperature", [(0, 1.0, 1.0), (4, 1.0, 1.0), (0, 0.6, 1.0), (6, 0.8, 0.7)]
)
def test_first_tokens_follow_the_filtered_distribution(
    model, searcher, source, topk, topp, temperature
):
    """4,000 seeds of one source: the first tokens drawn follow the model's distribution at
    that temperature, cut to top-k and top-p (total variation under 0.035; tokens outside the
    cut never drawn)."""
    first = searcher(beam_size=1, max_extra_length=1, max_output_length=1)
    rows = tf.repeat(source[:1], DRAWS, axis=0)
    seeds = tf.constant(sentence_seeds(1, DRAWS))
    fill = lambda value: tf.fill([DRAWS], value)  # noqa: E731
    ids, _ = first.sample(rows, seeds, fill(topk), fill(topp), fill(temperature))
    counts = np.bincount(ids.numpy()[:, 0], minlength=VOCAB) / DRAWS
    want = _filtered(_first_token_probs(model, source[0], temperature), topk, topp)
    assert counts[want == 0].sum() == 0, "a token outside top-k / top-p was drawn"
    assert 0.5 * np.abs(counts - want).sum() < 0.035


def test_scores_are_the_models_log_probabilities_of_the_drawn_tokens(model, searcher, source):
    """A sample's score is the sum of the model's log-probabilities (before temperature) of its
    tokens, EOS included, as a teacher-forced pass computes them."""
    rows = tf.shape(source)[:1]
    seeds = tf.constant(sentence_seeds(3, 5))
    ids, scores = searcher(beam_size=1, max_extra_length=8).sample(
        source, seeds, tf.fill(rows, 0), tf.fill(rows, 1.0), tf.fill(rows, 1.7)
    )
    for row in range(5):
        tokens = [t for t in ids[row].numpy() if t != PAD_ID]
        target = tf.constant([[BOS_ID] + tokens[:-1]])
        logits = model({"source": source[row : row + 1], "target": target})[0].numpy()
        log_probs = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
        want = sum(log_probs[i, t] for i, t in enumerate(tokens))
        assert scores[row].numpy() == pytest.approx(want, abs=1e-3)


def test_top_k_one_and_a_cold_temperature_are_greedy_search(searcher, source):
    search = searcher(beam_size=1, max_extra_length=8)
    rows = tf.shape(source)[:1]
    greedy_ids, greedy_scores = search.greedy(source)
    seeds = tf.constant(sentence_seeds(9, 5))
    for topk, temperature in ((1, 1.0), (0, 1e-4)):
        ids, scores = search.sample(
            source, seeds, tf.fill(rows, topk), tf.fill(rows, 1.0), tf.fill(rows, temperature)
        )
        np.testing.assert_array_equal(ids, greedy_ids)
        np.testing.assert_allclose(scores, greedy_scores, atol=1e-4)


def test_a_sample_depends_on_its_seed_not_on_its_batch_or_the_loop(searcher, source):
    """The same seeds give the same samples alone or in a batch, with finished sentences
    dropped or kept, and compiled by XLA; other seeds give other samples."""
    seeds = tf.constant(sentence_seeds(5, 5))
    rows = tf.shape(source)[:1]
    options = (tf.fill(rows, 0), tf.fill(rows, 1.0), tf.fill(rows, 1.0))
    sampler = searcher(beam_size=1, max_extra_length=10)
    batch, _ = sampler.sample(source, seeds, *options)
    for settings in ({"drop_finished": False}, {"jit_compile": True}):
        again, _ = searcher(beam_size=1, max_extra_length=10, **settings).sample(
            source, seeds, *options
        )
        np.testing.assert_array_equal(again, batch)
    for row in range(5):
        one = [option[row : row + 1] for option in options]
        alone, _ = sampler.sample(source[row : row + 1], seeds[row : row + 1], *one)
        np.testing.assert_array_equal(alone[0], batch[row][: alone.shape[1]])
    other, _ = sampler.sample(source, tf.constant(sentence_seeds(6, 5)), *options)
    assert not np.array_equal(other.numpy(), batch.numpy())


def test_sentence_seeds_differ_by_line_and_sample_and_repeat_with_the_seed():
    seeds = sentence_seeds(7, 100, 3)
    assert seeds.dtype == np.int64 and len(set(seeds.tolist())) == 300 and (seeds >= 0).all()
    np.testing.assert_array_equal(seeds, sentence_seeds(7, 100, 3))
    assert not set(seeds.tolist()) & set(sentence_seeds(8, 100, 3).tolist())


def test_settings_refuse_sampling_that_would_not_run():
    for changes, words in (
        ({"sampling_topk": 5}, "beam_size=4"),
        ({"beam_size": 1, "sampling_topp": 0.5}, "sampling_topk=1"),
        ({"beam_size": 1, "sampling_topk": 0, "sampling_topp": 1.5}, "(0, 1]"),
        ({"beam_size": 1, "sampling_topk": 0, "sampling_temperature": 0}, "> 0"),
    ):
        with pytest.raises(ValueError, match=words.replace("(", r"\(").replace("]", r"\]")):
            SearchSettings(**changes)


def test_the_saved_models_sampling_signature_serves_the_searchers_samples(
    model, toy_tokenizer, tmp_path
):
    """``translate_sampled`` of a SavedModel loaded back gives the in-memory translator's
    samples, and an export whose settings sample serves samples from ``serving_default``."""
    from tests.conftest import toy_sentences

    keras.utils.set_random_seed(5)
    toy = build_transformer(TransformerConfig.tiny(toy_tokenizer.vocab_size, dropout=0.0))
    translator = Translator(
        toy, toy_tokenizer, beam_size=1, sampling_topk=0, seed=4, max_extra_length=6
    )
    translator.save(tmp_path / "export")
    texts = tf.constant(toy_sentences(6, seed=2) + [""])
    inputs = dict(
        text=texts,
        seed=tf.constant(sentence_seeds(2, 7)),
        topk=tf.fill([7], 5),
        topp=tf.fill([7], 0.9),
        temperature=tf.fill([7], 1.2),
    )
    loaded = tf.saved_model.load(str(tmp_path / "export"))
    got = loaded.signatures["translate_sampled"](**inputs)
    want = translator.translate_sampled(*inputs.values())
    np.testing.assert_array_equal(got["translation"], want["translation"])
    np.testing.assert_allclose(got["score"], want["score"], atol=1e-5)
    assert want["translation"][-1] == b"" and want["score"][-1] == 0.0
    served = loaded.signatures["serving_default"](text=texts)["translation"]
    greedy_translator = Translator(toy, toy_tokenizer, beam_size=1, max_extra_length=6)
    greedy = greedy_translator.translate(texts)  # (a tf.function holds its module weakly)
    assert not np.array_equal(served.numpy(), greedy["translation"].numpy())  # it samples
    record = json.loads((tmp_path / "export" / SETTINGS_FILE).read_text())["translator"]
    assert (record["sampling_topk"], record["seed"]) == (0, 4)
    with pytest.raises(tf.errors.InvalidArgumentError, match="temperature"):
        loaded.signatures["translate_sampled"](**{**inputs, "temperature": tf.fill([7], 0.0)})


def test_a_search_that_samples_by_its_settings_gives_a_sentence_one_sample_in_any_batch(model):
    """Without seeds (``serving_default`` of an export that samples) a row's seed comes from
    ``settings.seed`` and its ids, not its padding: the same sentence draws the same sample
    alone and in a wider batch."""
    searcher = Searcher(model, beam_size=1, sampling_topk=0, seed=3, max_extra_length=8)
    alone, _ = searcher.search(tf.constant([[5, 6, 7, 3]]))
    batch, _ = searcher.search(tf.constant([[5, 6, 7, 3, 0, 0], [8, 9, 10, 11, 12, 3]]))
    np.testing.assert_array_equal(batch[0][: alone.shape[1]], alone[0])
    assert not np.any(batch[0][alone.shape[1] :])
