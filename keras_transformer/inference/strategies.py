"""What one step of the search loop does with the next-token log-probabilities (section 6.1).

A strategy holds the search state of a batch (a tuple of tensors, the loop variables besides the
cache) and has four methods, used by :meth:`Searcher._search`, the one decoding loop:

* ``initial_state()``; ``last_tokens(state)`` -> int32 ``[batch * width]``, the tokens to feed;
* ``step(i, logits, state, banned=None)`` -> ``(state, parents)``: ``parents`` int32 ``[batch *
  width]`` are the rows whose caches the new rows continue (None: every row continues itself);
  ``banned`` (bool ``[batch * width, vocab]``) are ids a row may not emit at this step (the
  search's ``no_repeat_ngram_size``);
* ``history(state)`` -> int32 ``[batch * width, length]``: each row's ids so far (0 after);
* ``done(state)`` -> scalar bool; ``result(state)`` -> ``(ids [batch, length], scores [batch])``;
* ``finished(state)`` -> bool ``[batch]``: the sentences whose result can no longer change.

Every state tensor has the sentence as its first axis, so the state of a subset of the sentences
is the state gathered along axis 0 (the search's ``drop_finished`` path drops finished sentences
this way, building the strategy anew over the sentences left).

``width`` rows per sentence run through the decoder: 1 for greedy search, ``k`` for beam search.
"""

import tensorflow as tf

from keras_transformer.inference import sampling
from keras_transformer.inference.tokens import NEG_INF
from keras_transformer.text.tokenizer import BOS_ID, EOS_ID, PAD_ID


def length_penalty(length, alpha):
    """GNMT length penalty ``lp(Y) = ((5 + |Y|) / 6) ** alpha`` (Wu et al. 2016, section 7).

    Example:

    >>> float(length_penalty(1, 0.6)), round(float(length_penalty(10, 0.6)), 4)
    (1.0, 1.7329)
    """
    length = tf.cast(length, tf.float32)
    return tf.pow((5.0 + length) / 6.0, tf.cast(alpha, tf.float32))


class GreedySearch:
    """The most probable token at every step; ``scores`` sum the emitted log-probabilities."""

    width = 1

    def __init__(self, best_tokens, batch, limits, length):
        self.best_tokens, self.batch, self.limits, self.length = best_tokens, batch, limits, length
        self.positions = tf.range(length)

    def initial_state(self):
        # (last tokens, ids, scores, finished)
        return (
            tf.fill([self.batch], BOS_ID),
            tf.zeros([self.batch, self.length], tf.int32),
            tf.zeros([self.batch], tf.float32),
            tf.zeros([self.batch], tf.bool),
        )

    def last_tokens(self, state):
        return state[0]

    def history(self, state):
        return state[1]

    def step(self, i, logits, state, banned=None):
        ids, scores, finished = state[1:4]
        token_log_prob, token = self.choose(i, logits, state, banned)
        token = tf.where(finished, PAD_ID, token)
        scores = scores + tf.where(finished, 0.0, token_log_prob)
        ids = tf.where(tf.equal(self.positions, i)[None], token[:, None], ids)
        finished = finished | tf.equal(token, EOS_ID) | (i + 1 >= self.limits)
        return (token, ids, scores, finished, *state[4:]), None

    def choose(self, i, logits, state, banned):
        """Each row's next token and its log-probability: ``(log_prob [N], token [N])``."""
        token_log_prob, token = self.best_tokens(logits, 1, banned)
        return token_log_prob[:, 0], token[:, 0]

    def finished(self, state):
        return state[3]

    def done(self, state):
        return tf.reduce_all(state[3])

    def result(self, state):
        return state[1], state[2]


class SamplingSearch(GreedySearch):
    """A random draw at every step (``sampling.py``: top-k, top-p, temperature, seeded per row);
    ``scores`` sum the model's log-probabilities of the drawn tokens (before temperature).

    ``log_probs(logits, banned)`` gives the model's log-probabilities ``[N, vocab]`` with the
    ids never emitted at -inf. Each row's seed and sampling settings are ``[batch]`` tensors kept
    in the state (so the rows of finished sentences leave with them).
    """

    def __init__(self, log_probs, batch, limits, length, seeds, topk, topp, temperature):
        super().__init__(None, batch, limits, length)
        self.log_probs = log_probs
        self.options = (seeds, topk, topp, temperature)

    def initial_state(self):
        return super().initial_state() + self.options

    def choose(self, i, logits, state, banned):
        seeds, topk, topp, temperature = state[4:]
        log_probs = self.log_probs(logits, banned)
        token = sampling.sample_tokens(log_probs, seeds, i, topk, topp, temperature)
        return tf.gather(log_probs, token, batch_dims=1), token


class BeamSearch:
    """Beam search with the GNMT length penalty and an admissible early stop.

    Each step extends the ``k`` alive hypotheses of every sentence by every token and keeps the
    ``2k`` best candidates by log-probability. A candidate that ends (EOS, or the sentence's
    maximum length) is *finished*; as in fairseq it is accepted only if it ranks among the ``k``
    best candidates, so beam size 1 is exactly greedy search. The ``k`` best candidates that do
    not end stay alive. A sentence is done when ``k`` hypotheses have finished, at its maximum
    length, or when no alive hypothesis can beat the best finished one any more
    (log-probabilities only decrease, so ``best alive log P / lp(max length)`` bounds every
    future score for ``alpha >= 0``). Scores: ``log P(y) / lp(y)``.
    """

    def __init__(self, best_tokens, batch, limits, length, beam_size, alpha, vocab_size):
        self.best_tokens, self.batch, self.limits, self.length = best_tokens, batch, limits, length
        self.width = k = beam_size
        self.alpha = alpha
        self.per_beam = min(2 * k, vocab_size)
        self.max_penalty = length_penalty(limits, alpha)  # [B]
        self.positions = tf.range(length)
        self.candidate_rank = tf.range(2 * k)
        self.batch_offsets = tf.range(batch)[:, None] * k

    def initial_state(self):
        k, batch, length = self.width, self.batch, self.length
        first_beam_only = tf.concat([[0.0], tf.fill([k - 1], NEG_INF)], axis=0)
        # (alive ids, alive log P, last tokens, best ids, best scores, number finished, done)
        return (
            tf.zeros([batch, k, length], tf.int32),
            tf.tile(first_beam_only[None], [batch, 1]),
            tf.fill([batch, k], BOS_ID),
            tf.zeros([batch, length], tf.int32),
            tf.fill([batch], NEG_INF),
            tf.zeros([batch], tf.int32),
            tf.zeros([batch], tf.bool),
        )

    def last_tokens(self, state):
        return tf.reshape(state[2], [-1])

    def history(self, state):
        return tf.reshape(state[0], [self.batch * self.width, self.length])

    def _candidates(self, i, logits, state, banned):
        """The 2k best extensions per sentence: ``(log P [B, 2k], token, parent beam, ids)``."""
        k, batch, per_beam = self.width, self.batch, self.per_beam
        alive_ids, alive_log_probs = state[0], state[1]
        # The 2k best of the k x vocab extensions are among the 2k best of each hypothesis.
        token_log_probs, tokens = self.best_tokens(logits, per_beam, banned)  # [B*k, per_beam]
        candidates = alive_log_probs[:, :, None] + tf.reshape(token_log_probs, [batch, k, per_beam])
        top_log_probs, top_index = tf.math.top_k(
            tf.reshape(candidates, [batch, k * per_beam]), k=2 * k, sorted=True
        )  # [B, 2k]
        beam = top_index // per_beam
        token = tf.gather(tf.reshape(tokens, [batch, k * per_beam]), top_index, batch_dims=1)
        candidate_ids = tf.gather(alive_ids, beam, axis=1, batch_dims=1)  # [B, 2k, L]
        candidate_ids = tf.where(
            tf.equal(self.positions, i)[None, None], token[:, :, None], candidate_ids
        )
        return top_log_probs, token, beam, candidate_ids

    def _finished_scores(self, i, top_log_probs, ends, done):
        """Which candidates end here among the k best (of sentences not yet done), and their
        length-penalised scores (NEG_INF for the others)."""
        accepted = (
            ends
            & (self.candidate_rank < self.width)[None]
            & (top_log_probs > NEG_INF)
            & tf.logical_not(done)[:, None]
        )
        scores = tf.where(accepted, top_log_probs / length_penalty(i + 1, self.alpha), NEG_INF)
        return accepted, scores

    def _finish(self, i, top_log_probs, ends, candidate_ids, state):
        """Finished candidates among the k best update the best hypothesis of each sentence."""
        best_ids, best_scores, num_finished, done = state[3:]
        accepted, finished_scores = self._finished_scores(i, top_log_probs, ends, done)
        best_candidate = tf.argmax(finished_scores, axis=1, output_type=tf.int32)
        candidate_score = tf.reduce_max(finished_scores, axis=1)
        improved = candidate_score > best_scores
        best_ids = tf.where(
            improved[:, None],
            tf.gather(candidate_ids, best_candidate, axis=1, batch_dims=1),
            best_ids,
        )
        best_scores = tf.where(improved, candidate_score, best_scores)
        num_finished = num_finished + tf.reduce_sum(tf.cast(accepted, tf.int32), axis=1)
        return best_ids, best_scores, num_finished

    def step(self, i, logits, state, banned=None):
        top_log_probs, token, beam, candidate_ids = self._candidates(i, logits, state, banned)
        at_limit = i + 1 >= self.limits  # [B]
        ends = tf.equal(token, EOS_ID) | at_limit[:, None]
        best_ids, best_scores, num_finished = self._finish(
            i, top_log_probs, ends, candidate_ids, state
        )
        # Alive: the k best candidates that do not end.
        alive_log_probs, keep = tf.math.top_k(
            tf.where(ends, NEG_INF, top_log_probs), k=self.width, sorted=True
        )
        alive_ids = tf.gather(candidate_ids, keep, axis=1, batch_dims=1)
        last = tf.gather(token, keep, axis=1, batch_dims=1)
        parent = tf.gather(beam, keep, axis=1, batch_dims=1)
        # Done: k finished, the maximum length, or no alive hypothesis can win any more.
        bound = alive_log_probs[:, 0] / self.max_penalty
        done = (
            state[6] | at_limit | (num_finished >= self.width) | (self._worst(best_scores) >= bound)
        )
        state = (alive_ids, alive_log_probs, last, best_ids, best_scores, num_finished, done)
        return state, tf.reshape(self.batch_offsets + parent, [-1])

    @staticmethod
    def _worst(best_scores):
        """The score a new hypothesis must beat to be kept."""
        return best_scores

    def finished(self, state):
        return state[6]

    def done(self, state):
        return tf.reduce_all(state[6])

    def result(self, state):
        return state[3], state[4]


class NBestBeamSearch(BeamSearch):
    """:class:`BeamSearch` that keeps the ``k`` best finished hypotheses of every sentence:
    ``result`` is ``(ids [batch, k, length], scores [batch, k])``, best first (missing ones
    score ``NEG_INF``). It stops only when no alive hypothesis can beat the k-th kept one (or at
    ``k`` finished, or the maximum length), so its first hypothesis is :class:`BeamSearch`'s."""

    def initial_state(self):
        state = super().initial_state()
        k, batch, length = self.width, self.batch, self.length
        best = (tf.zeros([batch, k, length], tf.int32), tf.fill([batch, k], NEG_INF))
        return state[:3] + best + state[5:]

    def _finish(self, i, top_log_probs, ends, candidate_ids, state):
        best_ids, best_scores, num_finished, done = state[3:]
        accepted, finished_scores = self._finished_scores(i, top_log_probs, ends, done)
        # Earlier hypotheses first: on a tie top_k keeps the lower index, as BeamSearch keeps
        # its best unless strictly beaten.
        scores = tf.concat([best_scores, finished_scores], axis=1)  # [B, 3k]
        best_scores, index = tf.math.top_k(scores, k=self.width, sorted=True)
        ids = tf.concat([best_ids, candidate_ids], axis=1)
        best_ids = tf.gather(ids, index, axis=1, batch_dims=1)
        num_finished = num_finished + tf.reduce_sum(tf.cast(accepted, tf.int32), axis=1)
        return best_ids, best_scores, num_finished

    @staticmethod
    def _worst(best_scores):
        return best_scores[:, -1]
