"""Greedy and beam search (paper section 6.1): caches, batching, length penalty, XLA."""

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.inference import (
    Searcher,
    beam_search,
    greedy_decode,
    length_penalty,
    tokens,
    trim_padding,
)
from keras_transformer.inference.tokens import block_size
from keras_transformer.text.tokenizer import BOS_ID, EOS_ID, PAD_ID
from tests.conftest import searchers_of
from tests.oracles.reference_decoding import (
    NoEosSearcher,
    greedy_decode_uncached,
    uncached_greedy_function,
)

VOCAB = 12  # 4 reserved ids + 8 symbols
MAX_SYMBOLS = 7


def _reverse_task(rng, n):
    """Source: symbols + EOS; decoder input: BOS + reversed symbols; labels: reversed + EOS."""
    width = MAX_SYMBOLS + 1
    source, target, labels = (np.zeros((n, width), np.int32) for _ in range(3))
    for row in range(n):
        length = rng.integers(1, MAX_SYMBOLS + 1)
        symbols = rng.integers(4, VOCAB, length)
        source[row, :length], source[row, length] = symbols, EOS_ID
        target[row, 0], target[row, 1 : length + 1] = BOS_ID, symbols[::-1]
        labels[row, :length], labels[row, length] = symbols[::-1], EOS_ID
    return source, target, labels


@pytest.fixture(scope="module")
def reverse_models():
    """A tiny model trained to reverse sequences: ``(after 10 steps, after 150 steps)``.

    The first is unsure (searches disagree), the second mostly right but not always (~10 s).
    """
    keras.utils.set_random_seed(0)
    config = TransformerConfig.tiny(VOCAB, dropout=0.0)
    model = build_transformer(config)
    source, target, labels = _reverse_task(np.random.default_rng(0), 64 * 150)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD_ID),
    )
    early = build_transformer(config)
    for start, stop in ((0, 10), (10, 150)):
        rows = slice(start * 64, stop * 64)
        model.fit(
            {"source": source[rows], "target": target[rows]},
            labels[rows],
            batch_size=64,
            epochs=1,
            verbose=0,
        )
        if start == 0:
            early.set_weights(model.get_weights())
    return early, model


@pytest.fixture(scope="module")
def reverse_model(reverse_models):
    return reverse_models[1]


@pytest.fixture(scope="module")
def test_sources():
    source, _, labels = _reverse_task(np.random.default_rng(1), 24)
    return source, labels


@pytest.fixture(scope="module")
def searcher(reverse_model):
    """``searcher(**settings)``: the module's one Searcher of ``reverse_model`` per settings
    (equal settings, however spelled, share it: a search traced once serves every test)."""
    return searchers_of(reverse_model)


def _rows(ids):
    """Token lists per row, padding dropped."""
    return [[int(t) for t in row if t != PAD_ID] for row in np.asarray(ids)]


def test_trained_model_output_is_non_trivial(reverse_model, test_sources):
    source, labels = test_sources
    ids, scores = greedy_decode(reverse_model, source, max_extra_length=5)
    rows = _rows(ids)
    exact = sum(row == ref for row, ref in zip(rows, _rows(labels)))
    assert exact >= len(rows) // 2, "the fixture model did not learn the task"
    assert all(row[-1] == EOS_ID and EOS_ID not in row[:-1] for row in rows)
    assert not any(BOS_ID in row for row in rows)
    assert np.all(scores.numpy() < 0)


def test_cached_greedy_equals_uncached_greedy_exactly(reverse_model, test_sources):
    source, _ = test_sources
    cached, cached_scores = greedy_decode(reverse_model, source, max_extra_length=5)
    uncached, uncached_scores = greedy_decode_uncached(reverse_model, source, max_extra_length=5)
    np.testing.assert_array_equal(cached.numpy(), uncached.numpy())
    np.testing.assert_allclose(cached_scores, uncached_scores, atol=1e-4)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_size_one_is_greedy(reverse_model, test_sources, alpha):
    source, _ = test_sources
    greedy, greedy_scores = greedy_decode(reverse_model, source, max_extra_length=5)
    beam, beam_scores = beam_search(
        reverse_model, source, beam_size=1, alpha=alpha, max_extra_length=5
    )
    np.testing.assert_array_equal(beam.numpy(), greedy.numpy())
    lengths = np.sum(greedy.numpy() != PAD_ID, axis=1)
    np.testing.assert_allclose(
        beam_scores * length_penalty(lengths, alpha), greedy_scores, atol=1e-4
    )


def test_beam_search_scores_at_least_as_well_as_greedy_on_the_whole(reverse_model, test_sources):
    source, labels = test_sources
    beam, beam_scores = beam_search(
        reverse_model, source, beam_size=4, alpha=0.0, max_extra_length=5
    )
    greedy, greedy_scores = greedy_decode(reverse_model, source, max_extra_length=5)
    # Not a theorem per sentence, but beam search must not lose on the whole.
    assert beam_scores.numpy().sum() >= greedy_scores.numpy().sum() - 1e-4
    rows = _rows(beam)
    assert all(row[-1] == EOS_ID for row in rows)


def _exhaustive_log_probs(model, source, max_length):
    """Every output the search may emit and its ``log P(y)``, by brute force: one model call."""
    allowed = [t for t in range(VOCAB) if t not in (PAD_ID, BOS_ID)]
    growing = [t for t in allowed if t != EOS_ID]
    hypotheses = [
        list(p) + [EOS_ID] for n in range(max_length) for p in itertools.product(growing, repeat=n)
    ]
    hypotheses += [list(p) for p in itertools.product(growing, repeat=max_length)]  # truncated
    target = np.array(
        [[BOS_ID] + h[:-1] + [PAD_ID] * (max_length - len(h)) for h in hypotheses], np.int32
    )
    logits = model({"source": np.repeat(source[None], len(hypotheses), 0), "target": target})
    log_probs = tf.nn.log_softmax(logits).numpy()
    log_p = np.array(
        [sum(log_probs[row, j, t] for j, t in enumerate(h)) for row, h in enumerate(hypotheses)]
    )
    return hypotheses, log_p


def _exhaustive_best(hypotheses, log_p, alpha):
    """Best ``(log P(y) / lp(|y|), y)`` over the hypotheses."""
    scores = log_p / length_penalty([len(h) for h in hypotheses], alpha).numpy()
    best = int(np.argmax(scores))
    return scores[best], hypotheses[best]


EXHAUSTIVE_SOURCES = np.array(
    [[4, 5, 6, 3, 0, 0], [6, 3, 0, 0, 0, 0], [7, 8, 9, 10, 11, 3]], np.int32
)


def test_wide_beam_finds_the_exhaustive_search_optimum(reverse_models):
    # 10 of the 12 ids can be emitted. With at most 3 tokens, 9 * 9 * 10 = 810 candidates end at
    # the last step, so a beam of 810 keeps every hypothesis and must find the optimum of
    # log P(y) / lp(y). The half-trained model is unsure, so the optimum is not the greedy output.
    model = reverse_models[0]
    greedy, _ = greedy_decode(model, EXHAUSTIVE_SOURCES, max_output_length=3)
    exhaustive = [_exhaustive_log_probs(model, source, 3) for source in EXHAUSTIVE_SOURCES]
    lengths = {}
    for alpha in (0.0, 0.6, 5.0):
        ids, scores = beam_search(
            model, EXHAUSTIVE_SOURCES, beam_size=810, alpha=alpha, max_output_length=3
        )
        for row, (hypotheses, log_p) in enumerate(exhaustive):
            best_score, best = _exhaustive_best(hypotheses, log_p, alpha)
            assert _rows(ids)[row] == best
            np.testing.assert_allclose(scores[row], best_score, atol=1e-4)
        lengths[alpha] = [len(r) for r in _rows(ids)]
    assert _rows(ids) != _rows(greedy), "the test model became too sure: search no longer matters"
    # A larger alpha never prefers a shorter optimum (lp grows with length).
    assert all(a <= b <= c for a, b, c in zip(lengths[0.0], lengths[0.6], lengths[5.0]))


def test_length_penalty_values():
    assert float(length_penalty(1, 0.6)) == 1.0
    np.testing.assert_allclose(length_penalty(10, 0.6), (15 / 6) ** 0.6, rtol=1e-6)
    assert float(length_penalty(30, 0.0)) == 1.0


def test_trim_drops_only_columns_that_are_padding_in_every_row():
    ids = tf.constant(
        [[5, PAD_ID, 7, EOS_ID, PAD_ID, PAD_ID], [6, EOS_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID]]
    )
    np.testing.assert_array_equal(
        trim_padding(ids), ids[:, :4]
    )  # the PAD inside row 0 keeps its column
    assert trim_padding(tf.fill([2, 3], PAD_ID)).shape == (2, 0)
    assert trim_padding(tf.zeros([0, 5], tf.int32)).shape == (0, 0)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_results_do_not_depend_on_the_rest_of_the_batch(searcher, test_sources, search):
    source, _ = test_sources
    source = source[:6]
    decoder = searcher(beam_size=3, alpha=0.6, max_extra_length=4)
    decode = decoder.greedy if search == "greedy" else decoder.beam_search
    together, together_scores = decode(tf.constant(source))
    together = _rows(together)
    for row in range(len(source)):
        width = int(np.sum(source[row] != PAD_ID))
        for padding in (0, 5):  # alone, tightly padded and with extra padding
            alone = np.pad(source[row : row + 1, :width], [(0, 0), (0, padding)])
            ids, scores = decode(tf.constant(alone))
            assert _rows(ids)[0] == together[row]
            np.testing.assert_allclose(scores[0], together_scores[row], atol=1e-4)
    assert decode.experimental_get_tracing_count() == 1  # shape-polymorphic: traced once


def test_xla_compiled_search_equals_graph_search(searcher, test_sources):
    source = tf.constant(test_sources[0][:8])
    plain = searcher(beam_size=3, max_extra_length=5)
    xla = searcher(beam_size=3, max_extra_length=5, jit_compile=True)
    for name in ("greedy", "beam_search"):
        ids, scores = getattr(plain, name)(source)
        xla_ids, xla_scores = getattr(xla, name)(source)
        np.testing.assert_array_equal(xla_ids.numpy(), ids.numpy())
        np.testing.assert_allclose(xla_scores, scores, atol=1e-4)


def test_maximum_length_per_sentence_and_learned_position_cap():
    keras.utils.set_random_seed(3)
    model = build_transformer(
        TransformerConfig.tiny(20, dropout=0.0, positional="learned", max_positions=12)
    )
    source = np.array([[5, 6, 7, 3], [8, 3, 0, 0]], np.int32)
    decoder = NoEosSearcher(model, beam_size=2, max_extra_length=3)
    for decode in (decoder.greedy, decoder.beam_search, uncached_greedy_function(decoder)):
        ids, _ = decode(tf.constant(source))
        assert [len(r) for r in _rows(ids)] == [4 + 3, 2 + 3]
        assert EOS_ID not in np.asarray(ids)
    capped = NoEosSearcher(model, beam_size=2, max_extra_length=50)
    long_source = np.full((1, 30), 5, np.int32)  # longer than the 12 learned positions
    ids, _ = capped.beam_search(tf.constant(long_source))
    assert ids.shape == (1, 12)
    ids, _ = NoEosSearcher(model, max_output_length=2).greedy(tf.constant(source))
    assert ids.shape == (2, 2)


def test_empty_batches_and_empty_sources(reverse_model):
    decoder = Searcher(reverse_model, beam_size=2, max_extra_length=3)
    results = []
    for decode in (decoder.greedy, decoder.beam_search, uncached_greedy_function(decoder)):
        ids, scores = decode(tf.zeros([0, 5], tf.int32))
        assert ids.shape[0] == 0 and scores.shape == (0,)
        ids, scores = decode(tf.zeros([2, 0], tf.int32))  # no source tokens at all
        ids, scores = ids.numpy(), scores.numpy()
        assert ids.shape[0] == 2 and 1 <= ids.shape[1] <= 3  # at most 0 + max_extra_length
        np.testing.assert_array_equal(ids[0], ids[1])  # two equal (empty) sentences
        assert scores[0] == scores[1] < 0  # log-probabilities of emitted tokens
        row = ids[0].tolist()
        end = row.index(EOS_ID) + 1 if EOS_ID in row else len(row)
        assert BOS_ID not in row and PAD_ID not in row[:end] and set(row[end:]) <= {PAD_ID}
        results.append((ids, scores))
    (greedy, greedy_scores), _, (uncached, uncached_scores) = results
    np.testing.assert_array_equal(greedy, uncached)
    np.testing.assert_allclose(greedy_scores, uncached_scores, atol=1e-4)


def test_invalid_settings_are_rejected(reverse_model):
    with pytest.raises(ValueError, match="beam_size"):
        Searcher(reverse_model, beam_size=0)
    with pytest.raises(ValueError, match="alpha"):
        Searcher(reverse_model, alpha=-1.0)
    with pytest.raises(ValueError, match="max_extra_length"):
        Searcher(reverse_model, max_extra_length=-1)


def test_fast_top_k_equals_log_softmax_and_top_k(reverse_models):
    """The blocked top-k (fast path) picks the same tokens with the same log-probabilities."""
    rng = np.random.default_rng(5)
    searcher = Searcher(reverse_models[0])
    plain = Searcher(reverse_models[0], fast_top_k=False)
    for vocab, k in ((12, 1), (12, 6), (37, 4), (100, 8)):  # 37: blocks need padding
        logits = tf.constant(rng.normal(size=(5, vocab)) * 3, tf.float32)
        searcher.vocab_size = plain.vocab_size = vocab
        searcher._block_size = block_size(vocab)
        fast_values, fast_ids = searcher.best_tokens(logits, k)
        values, ids = plain.best_tokens(logits, k)
        np.testing.assert_array_equal(fast_ids.numpy(), ids.numpy())
        np.testing.assert_allclose(fast_values.numpy(), values.numpy(), atol=1e-5)
        assert not np.isin(ids.numpy(), [PAD_ID, BOS_ID]).any()
        expected = tf.nn.log_softmax(logits).numpy()
        np.testing.assert_allclose(
            values.numpy(), np.take_along_axis(expected, ids.numpy(), axis=1), atol=1e-5
        )


@pytest.mark.parametrize("search", ["greedy", "beam_search"])
def test_plain_top_k_search_gives_the_same_translations(searcher, test_sources, search):
    source = tf.constant(test_sources[0][:8])
    fast = getattr(searcher(beam_size=3, max_extra_length=5), search)(source)
    plain = getattr(searcher(beam_size=3, max_extra_length=5, fast_top_k=False), search)(source)
    np.testing.assert_array_equal(plain[0].numpy(), fast[0].numpy())
    np.testing.assert_allclose(plain[1].numpy(), fast[1].numpy(), atol=1e-4)


@pytest.mark.parametrize("vocab", [37, 101, 8009])  # primes: no block divides them
def test_fast_top_k_pads_the_last_block_and_equals_tf_top_k(vocab):
    """The padded-block path of ``best_tokens_blocked``: the vocabulary is not a multiple of the
    block, so the last block is padded with -inf; the best ids sit in that last, short block
    (and banned ids score highest), and the result equals ``tf.math.top_k`` of the
    log-softmax with the banned ids removed."""
    block = block_size(vocab)
    assert vocab % block != 0  # the padded path, not the exact one
    rng = np.random.default_rng(vocab)
    logits = rng.normal(size=(6, vocab)) * 3
    last = np.arange((vocab // block) * block, vocab)  # the ids of the padded block
    logits[:, last] += 40.0  # the winners are there
    logits[:, [PAD_ID, BOS_ID]] += 80.0  # and banned ids would beat them
    logits = tf.constant(logits, tf.float32)
    log_probs = tf.nn.log_softmax(logits).numpy()
    allowed = np.delete(np.arange(vocab), [PAD_ID, BOS_ID])
    for k in (1, len(last), len(last) + 3):  # within the last block, and beyond it
        values, ids = tokens.best_tokens_blocked(logits, k, (PAD_ID, BOS_ID), vocab, block)
        expected_values, positions = tf.math.top_k(log_probs[:, allowed], k)
        np.testing.assert_array_equal(ids.numpy(), allowed[positions.numpy()])
        np.testing.assert_allclose(values.numpy(), expected_values.numpy(), rtol=1e-5, atol=1e-5)
        assert ids.numpy().max() < vocab  # never a padding position
    assert set(ids.numpy()[:, : len(last)].ravel()) <= set(last)


def test_searches_with_a_vocabulary_no_block_divides_equal_the_plain_top_k():
    """The padded blocks inside real searches: a model with 37 target ids (block 6, 7 blocks)."""
    keras.utils.set_random_seed(4)
    model = build_transformer(TransformerConfig.tiny(37, dropout=0.0))
    source = tf.constant(np.random.default_rng(4).integers(4, 37, size=(5, 6)), tf.int32)
    fast = Searcher(model, beam_size=3, max_extra_length=4)
    plain = Searcher(model, beam_size=3, max_extra_length=4, fast_top_k=False)
    assert 37 % fast._block_size != 0
    for name in ("greedy", "beam_search"):
        ids, scores = getattr(fast, name)(source)
        plain_ids, plain_scores = getattr(plain, name)(source)
        np.testing.assert_array_equal(ids.numpy(), plain_ids.numpy())
        np.testing.assert_allclose(scores.numpy(), plain_scores.numpy(), atol=1e-5)


def test_dropping_finished_sentences_equals_the_plain_loop(searcher, test_sources):
    """``drop_finished`` (the default) against the loop over every row to the end (outputs of
    many lengths): greedy and beam search, the same ids and scores for every sentence; n-best
    shares the loop (``tests/test_export.py``)."""
    source = tf.constant(test_sources[0][:12])
    fast = searcher(beam_size=3, alpha=0.6, max_extra_length=3)
    plain = searcher(beam_size=3, alpha=0.6, max_extra_length=3, drop_finished=False)
    assert fast.drop_finished and not plain.drop_finished
    lengths = set()
    for name in ("greedy", "beam_search"):
        ids, scores = getattr(fast, name)(source)
        plain_ids, plain_scores = getattr(plain, name)(source)
        np.testing.assert_array_equal(ids.numpy(), plain_ids.numpy())
        # Same tokens; the scores to float32 rounding: a smaller batch changes the matmuls'
        # blocking, so a sum of log-probabilities of -1.3 once differed by 1.4e-6 (1.1e-6 relative).
        np.testing.assert_allclose(scores.numpy(), plain_scores.numpy(), rtol=1e-5, atol=1e-6)
        lengths |= set(np.sum(ids.numpy() != PAD_ID, axis=1).tolist())
    assert len(lengths) > 2, lengths  # sentences finished at different steps
    empty = fast.beam_search(tf.zeros([0, 4], tf.int32))
    assert empty[0].shape[0] == 0 and empty[1].shape == (0,)


@pytest.mark.parametrize(
    "loop, name",
    [("drop_finished", "beam_search"), ("drop_finished", "nbest"), ("plain", "beam_search")]
    + [("xla", "beam_search")],
)
def test_cross_attention_shared_by_the_beams_equals_a_repeated_cache(
    searcher, test_sources, loop, name
):
    """``share_cross_cache`` (the default): the k hypotheses of a sentence attend to one copy of
    its encoder-decoder keys/values; the same ids and scores as the plain repeated cache, in
    each loop (n-best shares the first), over sentences that finish at different steps."""
    settings = {
        "drop_finished": {},
        "plain": {"drop_finished": False},
        "xla": {"jit_compile": True},
    }
    source = tf.constant(test_sources[0][:12])
    shared, repeated = (
        searcher(beam_size=3, max_extra_length=3, share_cross_cache=share, **settings[loop])
        for share in (True, False)
    )
    ids, scores = getattr(shared, name)(source)
    expected_ids, expected_scores = getattr(repeated, name)(source)
    np.testing.assert_array_equal(ids.numpy(), expected_ids.numpy())
    np.testing.assert_allclose(scores.numpy(), expected_scores.numpy(), atol=1e-5)
    best = ids.numpy() if name == "beam_search" else ids.numpy()[:, 0]
    assert len(set(np.sum(best != PAD_ID, axis=1).tolist())) > 1  # sentences of several lengths


def test_small_batches_run_the_xla_search_and_equal_the_graph_search(
    reverse_model, searcher, test_sources
):
    """``xla_max_batch``: a batch of 1 takes the XLA-compiled search, a batch of 6 the graph
    loop; both give the plain searcher's ids and scores."""
    plain = searcher(beam_size=3, max_extra_length=4)
    hybrid = Searcher(reverse_model, beam_size=3, max_extra_length=4, xla_max_batch=1)
    assert hybrid._small_batches.jit_compile and not hybrid.jit_compile
    source = test_sources[0][:6]
    expected_ids, expected_scores = plain.beam_search(tf.constant(source))
    ids, _ = hybrid.beam_search(tf.constant(source))  # graph loop
    np.testing.assert_array_equal(ids.numpy(), expected_ids.numpy())
    for row in (0, 3):  # XLA, one bucket width
        one, one_scores = hybrid.beam_search(tf.constant(source[row : row + 1]))
        assert _rows(one) == _rows(expected_ids[row : row + 1])
        np.testing.assert_allclose(one_scores[0], expected_scores[row], atol=1e-4)
    assert hybrid._small_batches.beam_search.experimental_get_tracing_count() == 1
