# Paper section 6.1 (Machine Translation): "beam search with a beam size of 4 and length penalty
# alpha = 0.6 [38 = GNMT] ... maximum output length during inference to input length + 50, but
# terminate early when possible"; sections 3.2.3 and 3.4 (auto-regressive decoder, softmax output).
"""Greedy and beam-search decoding over batches, in graph mode, with key/value caches.

The decoder of section 3 is auto-regressive: "at each step the model is auto-regressive, consuming
the previously generated symbols as additional input when generating the next" (section 3). Running
the whole model on the whole prefix at every step (what :func:`greedy_decode_uncached` does, the
approach of the TensorFlow tutorial) costs O(n^2) decoder positions and re-encodes the source at
every step. The cached decoders here instead:

* encode each source sentence once, and compute the encoder-decoder attention keys/values of every
  decoder layer once per sentence (:meth:`TransformerParts.cross_attention_caches`);
* run the decoder on the newest position only, with the self-attention keys/values of earlier
  positions kept in (keys, values) caches ``[batch, h, length, d_k]`` that grow by one position
  per step (with XLA: preallocated to the maximum length and written at ``cache_update_index``,
  section 3.2.3's causal mask hiding the unfilled slots);
* run as one ``tf.function`` with a ``tf.while_loop`` over the whole batch, traced once per
  :class:`Decoder` and shape-polymorphic over batch size and source length, so they can be called
  from an exported ``tf.Module`` (see ``keras_transformer/export.py``).

Conventions
-----------

* ``source_ids``: int32 ``[batch, source_length]`` model inputs, right-padded with ``PAD_ID`` (0),
  formatted as in training (the decoder does not add or remove special ids).
* Outputs: ``ids`` int32 ``[batch, length]`` without BOS, ending with EOS (unless the maximum length
  was reached first), right-padded with 0; ``length`` is the longest output of the batch.
* The decoder never emits PAD or BOS (their log-probabilities are set to -inf after the softmax over
  the whole vocabulary; other tokens keep the model's probabilities).
* Maximum output length, per sentence: ``source_length + max_extra_length`` tokens (EOS included),
  where ``source_length`` counts the sentence's non-padding ids; also capped by ``max_length`` if
  given and, with learned positional encodings, by the model's number of positions. A sentence's
  limit never depends on the other sentences of its batch, so neither does its result.
* Greedy ``scores``: the sum of the log-probabilities of the emitted tokens (EOS included).
* Beam ``scores``: ``log P(y) / lp(y)`` with the GNMT length penalty
  ``lp(y) = ((5 + |y|) / 6) ** alpha`` (Wu et al. 2016, eq. 14; the paper's reference [38]), where
  ``|y|`` counts the emitted tokens, EOS included. With ``alpha = 0`` it is ``log P(y)``.

Beam search
-----------

Each step extends the ``k`` alive hypotheses of every sentence by every token and keeps the ``2k``
best candidates by log-probability. A candidate that ends (EOS, or the sentence's maximum length) is
*finished*; as in fairseq, it is accepted only if it ranks among the ``k`` best candidates, so beam
size 1 is exactly greedy search. The ``k`` best candidates that do not end stay alive (there are
always ``k``, since at most ``k`` of the ``2k`` end with EOS). Finished hypotheses stop growing;
the best one is kept. A sentence is done when ``k`` hypotheses have finished, when it reached its
maximum length, or when no alive hypothesis can beat the best finished one any more
(log-probabilities only decrease, so ``best alive log P / lp(max length)`` bounds every future
score for ``alpha >= 0``). The loop ends as soon as every sentence of the batch is done.

XLA
---

``Decoder(..., jit_compile=True)`` compiles the search with XLA: shapes must be static inside the
compiled function, so the caches are sized from the padded source width
(``width + max_extra_length``) instead of the longest real sentence, and the source is padded to a
multiple of
``xla_length_multiple`` (16) outside the compiled function so that XLA compiles once per
(batch size, width bucket) and not once per source length. Results equal the non-XLA decoder's
(padding and cache size do not change them). tf.strings ops cannot be compiled: tokenize outside.

Example:

>>> from keras_transformer import TransformerConfig, build_transformer
>>> model = build_transformer(TransformerConfig.tiny(vocab_size=100))
>>> source = [[5, 6, 7, 3], [8, 9, 3, 0]]
>>> ids, scores = beam_search(model, source, beam_size=4, alpha=0.6)
>>> ids.shape[0], scores.shape
(2, TensorShape([2]))
>>> decoder = Decoder(model, beam_size=4)   # reuse: traced once, then fast
>>> ids, scores = decoder.beam_search(tf.constant(source))
>>> ids.dtype, scores.dtype
(tf.int32, tf.float32)
"""

from __future__ import annotations

import collections
import functools
from typing import Optional

import keras
import tensorflow as tf

from keras_transformer.model import TransformerParts
from keras_transformer.tokenization import BOS_ID, EOS_ID, PAD_ID

__all__ = [
    "Decoder",
    "beam_search",
    "get_decoder",
    "greedy_decode",
    "greedy_decode_uncached",
    "length_penalty",
]

_SOURCE_SPEC = tf.TensorSpec([None, None], tf.int32, name="source_ids")
_NEG_INF = float("-inf")


def length_penalty(length, alpha):
    """GNMT length penalty ``lp(Y) = ((5 + |Y|) / 6) ** alpha`` (Wu et al. 2016, section 7).

    Example:

    >>> float(length_penalty(1, 0.6)), round(float(length_penalty(10, 0.6)), 4)
    (1.0, 1.7329)
    """
    length = tf.cast(length, tf.float32)
    return tf.pow((5.0 + length) / 6.0, tf.cast(alpha, tf.float32))


class Decoder(tf.Module):
    """Cached greedy and beam search for one model and one set of settings.

    Building a ``Decoder`` creates its ``tf.function``s; the first call of each traces it (once:
    the input signature is ``int32 [None, None]``) and later calls reuse the graph, for any batch
    size and source length. A ``Decoder`` is a ``tf.Module`` that tracks the model, so it (or a
    module holding it) can be saved with ``tf.saved_model.save``.

    Args:
        model: a model from :func:`keras_transformer.build_transformer` (or loaded from ``.keras``).
        beam_size: ``k``, hypotheses kept per sentence (paper: 4).
        alpha: length-penalty exponent (paper: 0.6); must be >= 0.
        max_extra_length: a sentence may emit up to ``source_length + max_extra_length`` tokens
            (paper: 50).
        max_length: optional absolute cap on emitted tokens per sentence.
        jit_compile: compile the search with XLA (see the module docstring).
        xla_length_multiple: with ``jit_compile``, sources are padded to a multiple of this width.
        disable_eos: never emit EOS, so every hypothesis runs to its maximum length. For timing
            untrained models only.

    Attributes (``tf.function``, ``int32 [batch, source_length] -> (ids int32 [batch, length],
    scores float32 [batch])``): ``greedy``, ``beam_search``, ``greedy_uncached``.

    Example:

    >>> from keras_transformer import TransformerConfig, build_transformer
    >>> model = build_transformer(TransformerConfig.tiny(vocab_size=100))
    >>> decoder = Decoder(model, beam_size=4, alpha=0.6, max_extra_length=50)
    >>> ids, scores = decoder.beam_search(tf.constant([[5, 6, 7, 3]]))
    >>> ids, scores = decoder.greedy(tf.constant([[5, 6, 7, 3]]))
    >>> int(ids.shape[1]) <= 4 + 50  # at most source length + max_extra_length subwords
    True
    """

    def __init__(self, model: keras.Model, beam_size: int = 4, alpha: float = 0.6,
                 max_extra_length: int = 50, max_length: Optional[int] = None,
                 jit_compile: bool = False, xla_length_multiple: int = 16,
                 disable_eos: bool = False, name: Optional[str] = None):
        super().__init__(name=name)
        if int(beam_size) < 1:
            raise ValueError(f"Decoder: beam_size={beam_size!r} must be >= 1")
        if float(alpha) < 0:
            raise ValueError(f"Decoder: alpha={alpha!r} must be >= 0 (the early-stopping bound "
                             "assumes the length penalty grows with length)")
        if int(max_extra_length) < 0:
            raise ValueError(f"Decoder: max_extra_length={max_extra_length!r} must be >= 0")
        if max_length is not None and int(max_length) < 1:
            raise ValueError(f"Decoder: max_length={max_length!r} must be >= 1")
        self.model = model
        self.beam_size = int(beam_size)
        self.alpha = float(alpha)
        self.max_extra_length = int(max_extra_length)
        self.max_length = None if max_length is None else int(max_length)
        self.jit_compile = bool(jit_compile)
        self.xla_length_multiple = max(1, int(xla_length_multiple))
        self.disable_eos = bool(disable_eos)

        parts = TransformerParts(model)
        self._parts = parts
        self.vocab_size = int(parts.vocab_size)
        if self.vocab_size < 4:
            raise ValueError(f"Decoder: vocabulary of {self.vocab_size} ids lacks the reserved ids")
        # Learned positional tables have a fixed number of rows: never read past them.
        self.max_source_positions = (parts.encoder_positional.max_length
                                     if parts.encoder_positional.kind == "learned" else None)
        self.max_target_positions = (parts.decoder_positional.max_length
                                     if parts.decoder_positional.kind == "learned" else None)
        self._banned_ids = [PAD_ID, BOS_ID] + ([EOS_ID] if self.disable_eos else [])
        self._block_size = _block_size(self.vocab_size)

        def search(core):
            compiled = tf.function(core, jit_compile=True, autograph=False) if jit_compile else core

            def run(source_ids):
                source_ids = self._prepare_source(source_ids)
                ids, scores = compiled(source_ids)
                return _trim(ids), scores
            return run

        self.greedy = tf.function(search(self._greedy), input_signature=[_SOURCE_SPEC],
                                  autograph=False)
        self.beam_search = tf.function(search(self._beam_search), input_signature=[_SOURCE_SPEC],
                                       autograph=False)

    @functools.cached_property
    def greedy_uncached(self):
        """The uncached reference search as a ``tf.function`` (created on first use, and so not
        saved with a module that never used it)."""
        return tf.function(self._greedy_uncached, input_signature=[_SOURCE_SPEC], autograph=False)

    # ------------------------------------------------------------------ shared pieces
    def _prepare_source(self, source_ids):
        source_ids = tf.convert_to_tensor(source_ids, tf.int32)
        if self.max_source_positions is not None:  # learned table: keep what the encoder can read
            source_ids = source_ids[:, :self.max_source_positions]
        if self.jit_compile:  # bucket widths: one XLA compilation per (batch, width bucket)
            width = tf.shape(source_ids)[1]
            multiple = self.xla_length_multiple
            padded = tf.maximum((width + multiple - 1) // multiple * multiple, multiple)
            if self.max_source_positions is not None:
                padded = tf.minimum(padded, self.max_source_positions)
            source_ids = tf.pad(source_ids, [[0, 0], [0, padded - width]])
        return source_ids

    def _limits(self, source_ids):
        """Per-sentence maximum number of emitted tokens, int32 ``[batch]``."""
        lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID), tf.int32), axis=1)
        return self._cap(lengths + self.max_extra_length)

    def _cap(self, limits):
        if self.max_length is not None:
            limits = tf.minimum(limits, self.max_length)
        if self.max_target_positions is not None:
            limits = tf.minimum(limits, self.max_target_positions)
        return tf.maximum(limits, 1)

    def _buffer_length(self, source_ids, limits):
        """Size of the caches and output buffers: static under XLA, else the largest limit."""
        if self.jit_compile:
            return self._cap(tf.shape(source_ids)[1] + self.max_extra_length)
        return tf.reduce_max(tf.concat([limits, [1]], axis=0))

    def _best_tokens(self, logits, k):
        """The ``k`` most probable ids per row, never PAD or BOS: ``(log_probs [N, k], ids [N, k])``,
        sorted, log-probabilities from a softmax over the whole vocabulary.

        Exact, but cheaper than ``log_softmax`` + ``top_k`` over the vocabulary (which cost more
        than the decoder layers at batch 64 x beam 4): the vocabulary is cut into blocks of about
        sqrt(V) ids; the best ``m = k + len(banned)`` ids lie in the ``m`` blocks with the highest
        maxima, so ``top_k`` runs on those blocks only; banned ids are dropped from that short
        list. The log-normalizer ``logsumexp`` takes one more pass over the logits.
        """
        logits = tf.cast(logits, tf.float32)
        vocab, block = self.vocab_size, self._block_size
        num_blocks = -(-vocab // block)
        padded = logits
        if num_blocks * block != vocab:
            padded = tf.pad(logits, [[0, 0], [0, num_blocks * block - vocab]],
                            constant_values=_NEG_INF)
        blocks = tf.reshape(padded, [-1, num_blocks, block])
        block_max = tf.reduce_max(blocks, axis=2)  # [N, num_blocks]
        row_max = tf.reduce_max(block_max, axis=1, keepdims=True)  # [N, 1]
        log_normalizer = row_max + tf.math.log(
            tf.reduce_sum(tf.exp(logits - row_max), axis=1, keepdims=True))
        _, top_blocks = tf.math.top_k(block_max, min(k + len(self._banned_ids), num_blocks))
        values = tf.reshape(tf.gather(blocks, top_blocks, axis=1, batch_dims=1),
                            [tf.shape(logits)[0], -1])
        ids = tf.reshape(top_blocks[:, :, None] * block + tf.range(block)[None, None],
                         tf.shape(values))
        excluded = ids >= vocab  # padding
        for banned in self._banned_ids:
            excluded |= tf.equal(ids, banned)
        values, position = tf.math.top_k(tf.where(excluded, _NEG_INF, values), k)
        return values - log_normalizer, tf.gather(ids, position, batch_dims=1)

    def _encode(self, source_ids):
        parts = self._parts
        memory, mask = parts.encode(source_ids, training=False)
        # (keys, values) pairs: a stacked [B, 2, ...] cache would be sliced (copied) every step.
        cross = [(c[:, 0], c[:, 1]) for c in parts.cross_attention_caches(memory)]
        return memory, mask, cross

    def _empty_caches(self, batch, length):
        """Self-attention caches: preallocated to ``length`` under XLA (static shapes), else empty
        and grown by one position per step, so a step costs O(positions so far) and not
        O(``length``): with the maximum length at source length + 50, most of a preallocated
        cache is never filled, yet every step would copy and attend over all of it."""
        caches = self._parts.empty_self_attention_caches(batch, length if self.jit_compile else 0)
        return [(c[:, 0], c[:, 1]) for c in caches]  # (keys, values) pairs

    def _step(self, tokens, memory, mask, caches, cross, index):
        """Logits ``[N, vocab]`` of the next token after ``tokens`` ``[N]`` (at position index)."""
        write = dict(cache_update_index=index) if self.jit_compile else dict(append_to_cache=True)
        logits, caches = self._parts.decode(tokens[:, None], memory, mask, caches, cross,
                                            training=False, **write)
        return logits[:, 0], caches

    # ------------------------------------------------------------------ greedy
    def _greedy(self, source_ids):
        batch = tf.shape(source_ids)[0]
        limits = self._limits(source_ids)
        length = self._buffer_length(source_ids, limits)
        memory, mask, cross = self._encode(source_ids)
        caches = self._empty_caches(batch, length)
        positions = tf.range(length)

        def cond(i, last, ids, scores, finished, caches):
            return tf.logical_and(i < length, tf.logical_not(tf.reduce_all(finished)))

        def body(i, last, ids, scores, finished, caches):
            logits, caches = self._step(last, memory, mask, caches, cross, i)
            token_log_prob, token = self._best_tokens(logits, 1)
            token_log_prob, token = token_log_prob[:, 0], token[:, 0]
            token = tf.where(finished, PAD_ID, token)
            scores = scores + tf.where(finished, 0.0, token_log_prob)
            ids = tf.where(tf.equal(positions, i)[None], token[:, None], ids)
            finished = finished | tf.equal(token, EOS_ID) | (i + 1 >= limits)
            return i + 1, token, ids, scores, finished, caches

        state = (tf.constant(0), tf.fill([batch], BOS_ID), tf.zeros([batch, length], tf.int32),
                 tf.zeros([batch], tf.float32), tf.zeros([batch], tf.bool), caches)
        _, _, ids, scores, _, _ = tf.while_loop(cond, body, state,
                                                shape_invariants=_invariants(state))
        return ids, scores

    def _greedy_uncached(self, source_ids):
        """Reference: re-runs the full model on the source and the whole prefix at every step."""
        source_ids = self._prepare_source(source_ids)
        batch = tf.shape(source_ids)[0]
        limits = self._limits(source_ids)
        length = tf.reduce_max(tf.concat([limits, [1]], axis=0))

        def cond(i, prefix, scores, finished):
            return tf.logical_and(i < length, tf.logical_not(tf.reduce_all(finished)))

        def body(i, prefix, scores, finished):
            logits = self.model({"source": source_ids, "target": prefix}, training=False)
            token_log_prob, token = self._best_tokens(logits[:, -1], 1)
            token_log_prob, token = token_log_prob[:, 0], token[:, 0]
            token = tf.where(finished, PAD_ID, token)
            scores = scores + tf.where(finished, 0.0, token_log_prob)
            finished = finished | tf.equal(token, EOS_ID) | (i + 1 >= limits)
            return i + 1, tf.concat([prefix, token[:, None]], axis=1), scores, finished

        state = (tf.constant(0), tf.fill([batch, 1], BOS_ID), tf.zeros([batch], tf.float32),
                 tf.zeros([batch], tf.bool))
        invariants = (tf.TensorShape([]), tf.TensorShape([None, None]), tf.TensorShape([None]),
                      tf.TensorShape([None]))
        _, prefix, scores, _ = tf.while_loop(cond, body, state, shape_invariants=invariants)
        return _trim(prefix[:, 1:]), scores

    # ------------------------------------------------------------------ beam search
    def _beam_search(self, source_ids):
        k = self.beam_size
        per_beam = min(2 * k, self.vocab_size)
        batch = tf.shape(source_ids)[0]
        limits = self._limits(source_ids)
        max_penalty = length_penalty(limits, self.alpha)  # [B]
        length = self._buffer_length(source_ids, limits)
        memory, mask, cross = self._encode(source_ids)
        # Encoder output and cross-attention keys/values: computed once per sentence, then
        # repeated for its k hypotheses (row b * k + j is hypothesis j of sentence b).
        memory, mask = tf.repeat(memory, k, axis=0), tf.repeat(mask, k, axis=0)
        cross = tf.nest.map_structure(lambda c: tf.repeat(c, k, axis=0), cross)
        caches = self._empty_caches(batch * k, length)
        positions = tf.range(length)
        candidate_rank = tf.range(2 * k)
        batch_offsets = tf.range(batch)[:, None] * k

        def cond(i, *state):
            done = state[-2]
            return tf.logical_and(i < length, tf.logical_not(tf.reduce_all(done)))

        def body(i, alive_ids, alive_log_probs, last, best_ids, best_scores, num_finished, done,
                 caches):
            logits, caches = self._step(tf.reshape(last, [-1]), memory, mask, caches, cross, i)
            # The 2k best of the k x vocab extensions are among the 2k best of each hypothesis.
            token_log_probs, tokens = self._best_tokens(logits, per_beam)  # [B*k, per_beam]
            candidates = (alive_log_probs[:, :, None]
                          + tf.reshape(token_log_probs, [batch, k, per_beam]))
            top_log_probs, top_index = tf.math.top_k(tf.reshape(candidates, [batch, k * per_beam]),
                                                     k=2 * k, sorted=True)  # [B, 2k]
            beam = top_index // per_beam
            token = tf.gather(tf.reshape(tokens, [batch, k * per_beam]), top_index, batch_dims=1)
            candidate_ids = tf.gather(alive_ids, beam, axis=1, batch_dims=1)  # [B, 2k, L]
            candidate_ids = tf.where(tf.equal(positions, i)[None, None], token[:, :, None],
                                     candidate_ids)

            # Finished candidates: EOS or the maximum length; accepted among the k best only.
            at_limit = i + 1 >= limits  # [B]
            ends = tf.equal(token, EOS_ID) | at_limit[:, None]
            accepted = (ends & (candidate_rank < k)[None] & (top_log_probs > _NEG_INF)
                        & tf.logical_not(done)[:, None])
            finished_scores = tf.where(accepted, top_log_probs / length_penalty(i + 1, self.alpha),
                                       _NEG_INF)
            best_candidate = tf.argmax(finished_scores, axis=1, output_type=tf.int32)
            candidate_score = tf.reduce_max(finished_scores, axis=1)
            improved = candidate_score > best_scores
            best_ids = tf.where(improved[:, None],
                                tf.gather(candidate_ids, best_candidate, axis=1, batch_dims=1),
                                best_ids)
            best_scores = tf.where(improved, candidate_score, best_scores)
            num_finished = num_finished + tf.reduce_sum(tf.cast(accepted, tf.int32), axis=1)

            # Alive: the k best candidates that do not end.
            alive_log_probs, keep = tf.math.top_k(tf.where(ends, _NEG_INF, top_log_probs), k=k,
                                                  sorted=True)
            alive_ids = tf.gather(candidate_ids, keep, axis=1, batch_dims=1)
            last = tf.gather(token, keep, axis=1, batch_dims=1)
            parent = tf.gather(beam, keep, axis=1, batch_dims=1)
            rows = tf.reshape(batch_offsets + parent, [-1])
            caches = tf.nest.map_structure(lambda c: tf.gather(c, rows, axis=0), caches)

            # Done: k finished, the maximum length, or no alive hypothesis can win any more.
            bound = alive_log_probs[:, 0] / max_penalty
            done = done | at_limit | (num_finished >= k) | (best_scores >= bound)
            return (i + 1, alive_ids, alive_log_probs, last, best_ids, best_scores, num_finished,
                    done, caches)

        first_beam_only = tf.concat([[0.0], tf.fill([k - 1], _NEG_INF)], axis=0)
        state = (tf.constant(0),
                 tf.zeros([batch, k, length], tf.int32),
                 tf.tile(first_beam_only[None], [batch, 1]),
                 tf.fill([batch, k], BOS_ID),
                 tf.zeros([batch, length], tf.int32),
                 tf.fill([batch], _NEG_INF),
                 tf.zeros([batch], tf.int32),
                 tf.zeros([batch], tf.bool),
                 caches)
        state = tf.while_loop(cond, body, state, shape_invariants=_invariants(state))
        return state[4], state[5]


def _block_size(vocab_size):
    """Block width for :meth:`Decoder._best_tokens`: a divisor of the vocabulary size near its
    square root if there is one (no padding), else the square root."""
    root = max(1, int(round(vocab_size ** 0.5)))
    for offset in range(root // 2):
        for size in (root - offset, root + offset):
            if 1 < size <= vocab_size and vocab_size % size == 0:
                return size
    return root


def _invariants(state):
    """Loop-variable shapes with every dimension unknown (the caches grow along their length)."""
    return tf.nest.map_structure(lambda t: tf.TensorShape([None] * t.shape.rank), state)


def _trim(ids):
    """Drops the columns at the end of ``ids`` that are padding in every row (a PAD inside a
    row, before its last real id, keeps its column)."""
    positions = tf.range(1, tf.shape(ids)[1] + 1)
    ends = tf.reduce_max(tf.where(tf.not_equal(ids, PAD_ID), positions[None], 0), axis=1)
    return ids[:, :tf.reduce_max(tf.concat([ends, [0]], axis=0))]


# ---------------------------------------------------------------------- functional API
_CACHE_SIZE = 8
_decoders: "collections.OrderedDict[tuple, Decoder]" = collections.OrderedDict()


def get_decoder(model: keras.Model, **settings) -> Decoder:
    """The :class:`Decoder` for ``model`` and ``settings``, built once and then reused.

    Keeps the last 8 decoders (each holds its model), so repeated calls of the functions below do
    not retrace. Settings are :class:`Decoder`'s keyword arguments.
    """
    key = (id(model), tuple(sorted(settings.items())))
    decoder = _decoders.get(key)
    if decoder is None or decoder.model is not model:
        decoder = Decoder(model, **settings)
        _decoders[key] = decoder
        while len(_decoders) > _CACHE_SIZE:
            _decoders.popitem(last=False)
    _decoders.move_to_end(key)
    return decoder


def greedy_decode(model: keras.Model, source_ids, max_extra_length: int = 50,
                  max_length: Optional[int] = None, jit_compile: bool = False):
    """Greedy search with key/value caches: the most probable token at every step.

    Args:
        model: a model from :func:`keras_transformer.build_transformer`.
        source_ids: int ``[batch, source_length]``, right-padded with 0.
        max_extra_length: each sentence emits at most ``source_length + max_extra_length`` tokens.
        max_length: optional absolute cap on emitted tokens.
        jit_compile: use the XLA-compiled search.

    Returns:
        ``(ids int32 [batch, length], scores float32 [batch])``: ids without BOS, ending at EOS,
        right-padded with 0; scores are the summed log-probabilities.

    Example:

    >>> from keras_transformer import TransformerConfig, build_transformer
    >>> model = build_transformer(TransformerConfig.tiny(vocab_size=100))
    >>> ids, scores = greedy_decode(model, [[5, 6, 7, 3]], max_extra_length=10)
    >>> ids.shape[0], int(ids.shape[1]) <= 4 + 10, float(scores[0]) <= 0.0
    (1, True, True)
    """
    decoder = get_decoder(model, beam_size=1, alpha=0.0, max_extra_length=max_extra_length,
                          max_length=max_length, jit_compile=jit_compile)
    return decoder.greedy(tf.convert_to_tensor(source_ids, tf.int32))


def beam_search(model: keras.Model, source_ids, beam_size: int = 4, alpha: float = 0.6,
                max_extra_length: int = 50, max_length: Optional[int] = None,
                jit_compile: bool = False):
    """Beam search with key/value caches and the GNMT length penalty (paper section 6.1).

    Returns the best hypothesis per sentence: ``(ids int32 [batch, length], scores float32
    [batch])``, ids as in :func:`greedy_decode`, scores ``log P(y) / ((5 + |y|) / 6) ** alpha``.

    Example:

    >>> from keras_transformer import TransformerConfig, build_transformer
    >>> model = build_transformer(TransformerConfig.tiny(vocab_size=100))
    >>> ids, scores = beam_search(model, [[5, 6, 7, 3], [8, 3, 0, 0]], beam_size=4, alpha=0.6)
    >>> tuple(scores.shape)
    (2,)
    """
    decoder = get_decoder(model, beam_size=beam_size, alpha=alpha,
                          max_extra_length=max_extra_length, max_length=max_length,
                          jit_compile=jit_compile)
    return decoder.beam_search(tf.convert_to_tensor(source_ids, tf.int32))


def greedy_decode_uncached(model: keras.Model, source_ids, max_extra_length: int = 50,
                           max_length: Optional[int] = None):
    """Greedy search without caches: the full model on the whole prefix at every step.

    The reference for tests and the baseline of ``benchmarks/decoding.py``; same outputs as
    :func:`greedy_decode` up to floating-point rounding.

    Example:

    >>> from keras_transformer import TransformerConfig, build_transformer
    >>> keras.utils.set_random_seed(0)
    >>> model = build_transformer(TransformerConfig.tiny(vocab_size=100))
    >>> ids, scores = greedy_decode_uncached(model, [[5, 6, 7, 3]], max_extra_length=10)
    >>> cached_ids, _ = greedy_decode(model, [[5, 6, 7, 3]], max_extra_length=10)
    >>> bool(tf.reduce_all(ids == cached_ids))
    True
    """
    decoder = get_decoder(model, beam_size=1, alpha=0.0, max_extra_length=max_extra_length,
                          max_length=max_length)
    return decoder.greedy_uncached(tf.convert_to_tensor(source_ids, tf.int32))
