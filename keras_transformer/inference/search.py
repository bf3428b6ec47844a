"""The one decoding loop: cached greedy, beam and n-best search and sampling, in graph mode.

The decoder of section 3 is auto-regressive. :class:`Searcher` encodes each source sentence
once, computes the encoder-decoder keys/values of every decoder layer once per sentence, then
runs the decoder on the newest position only, with the self-attention keys/values of earlier
positions in the model's :class:`~keras_transformer.model.DecoderCache` (grown by one position
per step, or, with XLA, preallocated and written at the step's index). One ``tf.while_loop``
serves both searches; a strategy (``strategies.py``) decides what each step keeps. In beam
search the k hypotheses of a sentence attend to one copy of its encoder-decoder keys/values
(``share_cross_cache``; ``False`` repeats them per hypothesis, the plain form, same results).

Conventions
-----------

* ``source_ids``: int32 ``[batch, source_length]``, right-padded with ``PAD_ID`` (0), formatted
  as in training (the search does not add or remove special ids).
* Outputs: ``ids`` int32 ``[batch, length]`` without BOS, ending with EOS (unless the maximum
  length was reached first), right-padded with 0; ``length`` is the longest output of the batch.
* The search never emits PAD or BOS (their log-probabilities are set to -inf after the softmax
  over the whole vocabulary; other tokens keep the model's probabilities).
* Maximum output length, per sentence: ``source_length + max_extra_length`` tokens (EOS
  included; section 6.1: "input length + 50"), where ``source_length`` counts the sentence's
  non-padding ids; also capped by ``max_output_length`` if given and, with learned positional
  encodings, by the model's number of positions. A sentence's result never depends on the
  other sentences of its batch.
* Greedy ``scores``: the sum of the log-probabilities of the emitted tokens (EOS included).
  Beam ``scores``: ``log P(y) / lp(y)`` with the GNMT length penalty (section 6.1, alpha 0.6).

Finished sentences
------------------

With ``drop_finished`` (the default) finished sentences leave the decoder's batch (at the step
they are an eighth of the sentences left, ``finished_rows.py``): their results are written out,
their rows leave the caches (the cross-attention ones too) and the strategy goes on over the
sentences left, so a batch whose sentences differ in length stops paying for the short ones.
``drop_finished=False`` runs every row to the end of the batch's longest search (the plain loop),
as does a batch of one sentence (nothing to drop). Both give the same results
(``tests/test_decoding.py``); with ``jit_compile`` (static shapes) the plain loop runs.

XLA
---

``jit_compile=True`` compiles the search with XLA: shapes must be static inside the compiled
function, so the caches are sized from the padded source width (``width + max_extra_length``)
and the source is padded to a multiple of ``xla_length_multiple`` (16) outside the compiled
function, so that XLA compiles once per (batch size, width bucket). Results equal the non-XLA
search's. tf.strings ops cannot be compiled: tokenize outside. ``xla_max_batch=n`` compiles the
search of batches of up to ``n`` sentences only (per-op costs bound them; larger batches run the
graph loop, which drops finished sentences).

Example:

>>> from keras_transformer import TransformerConfig, build_transformer
>>> model = build_transformer(TransformerConfig.tiny(vocab_size=100))
>>> searcher = Searcher(model, beam_size=4)   # reuse: traced once, then fast
>>> ids, scores = searcher.beam_search(tf.constant([[5, 6, 7, 3], [8, 9, 3, 0]]))
>>> ids.dtype, scores.shape
(tf.int32, TensorShape([2]))
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import keras
import tensorflow as tf

from keras_transformer.inference import finished_rows, sampling, strategies, tokens
from keras_transformer.inference.settings import SearchSettings
from keras_transformer.inference.tokens import NEG_INF
from keras_transformer.model import TransformerLayers
from keras_transformer.text.tokenizer import BOS_ID, PAD_ID

__all__ = ["Searcher", "beam_search", "get_searcher", "greedy_decode", "trim_padding"]

SOURCE_SPEC = tf.TensorSpec([None, None], tf.int32, name="source_ids")

# The searches a Searcher builds on first use, one strategy each.
SEARCHES = ("greedy", "beam_search", "nbest", "sample")
# ``sample``'s inputs after the source: each row's seed, top-k, top-p and temperature.
SAMPLING_SPECS = (
    tf.TensorSpec([None], tf.int64, name="seed"),
    tf.TensorSpec([None], tf.int32, name="topk"),
    tf.TensorSpec([None], tf.float32, name="topp"),
    tf.TensorSpec([None], tf.float32, name="temperature"),
)


class Searcher(tf.Module):
    """Cached greedy, beam and n-best search for one model and one :class:`SearchSettings`.

    ``greedy``, ``beam_search`` and ``nbest`` are ``tf.function``s of ``int32 [batch,
    source_length]``, built on first use and traced once (any batch size and source length):
    the first two return ``(ids int32 [batch, length], scores float32 [batch])``, ``nbest``
    ``(ids [batch, k, length], scores [batch, k])``, the ``k = beam_size`` best of a beam of
    ``k``, best first; ``sample`` takes four more ``[batch]`` inputs (seed, top-k, top-p,
    temperature: ``sampling.py``) and returns as ``greedy``. ``search`` is the one the settings
    name (greedy for beam size 1, sampling for ``sampling_topk != 1``). All of them run the same
    loop through the same XLA dispatch (``jit_compile``, ``xla_max_batch``), with
    ``no_repeat_ngram_size`` and an ``ensemble``'s combined distributions.
    A ``Searcher`` is a ``tf.Module`` that tracks the model, so a module holding it can be saved
    as a SavedModel.

    Args:
        model: a model from :func:`keras_transformer.build_transformer` (or loaded from ``.keras``).
        settings: a :class:`~keras_transformer.inference.settings.SearchSettings` (its fields
            document each setting; default: the paper's, beam 4, alpha 0.6, input length + 50).
        ensemble: more models of the same vocabulary: the search decodes with every member,
            combining their next-token distributions at each step (``ensemble_average``).
        **changes: fields of ``settings`` to change, e.g. ``beam_size=1``.

    Example:

    >>> from keras_transformer import TransformerConfig, build_transformer
    >>> model = build_transformer(TransformerConfig.tiny(vocab_size=100))
    >>> searcher = Searcher(model, beam_size=4)   # reuse: traced once, then fast
    >>> ids, scores = searcher.greedy(tf.constant([[5, 6, 7, 3]]))
    >>> int(ids.shape[1]) <= 4 + searcher.settings.max_extra_length
    True
    """

    banned_ids = (PAD_ID, BOS_ID)  # never emitted

    def __init__(
        self,
        model: keras.Model,
        settings: SearchSettings | None = None,
        name: str | None = None,
        ensemble: Sequence[keras.Model] = (),
        **changes,
    ):
        super().__init__(name=name)
        settings = (settings or SearchSettings()).replace(**changes)
        self.settings = settings
        self.model = model
        self.ensemble = list(ensemble)  # more members: their distributions are combined
        self._members = [TransformerLayers.of(m) for m in (model, *ensemble)]
        self._layers = self._members[0]
        dims = self._layers.dims
        self.vocab_size = dims["target_vocab_size"]
        if self.vocab_size < 4:
            raise ValueError(f"Searcher: vocab_size={self.vocab_size} lacks the reserved ids")
        for i, member in enumerate(self._members[1:], 1):
            for key in ("source_vocab_size", "target_vocab_size"):
                if member.dims[key] != dims[key]:
                    raise ValueError(
                        f"Searcher: ensemble member {i} has {key}={member.dims[key]}, the first "
                        f"{dims[key]}: the members must share one vocabulary"
                    )
        # Learned positional tables have a fixed number of rows: never read past them.
        self.max_source_positions = _fewest(m.dims["max_source_positions"] for m in self._members)
        self.max_target_positions = _fewest(m.dims["max_target_positions"] for m in self._members)
        self._block_size = tokens.block_size(self.vocab_size)
        self._small_batches = None  # the XLA searcher of batches up to xla_max_batch
        if self.xla_max_batch is not None and not self.jit_compile:
            small = settings.replace(jit_compile=True, xla_max_batch=None)
            self._small_batches = type(self)(model, small, ensemble=ensemble)
        if settings.sampling:
            self.search = tf.function(
                self._sample_by_settings, input_signature=[SOURCE_SPEC], autograph=False
            )
        else:
            self.search = getattr(self, "greedy" if self.beam_size == 1 else "beam_search")

    # The settings the loop reads, under their own names (read from ``settings``).
    beam_size = property(lambda self: self.settings.beam_size)
    alpha = property(lambda self: self.settings.alpha)
    max_extra_length = property(lambda self: self.settings.max_extra_length)
    max_output_length = property(lambda self: self.settings.max_output_length)
    jit_compile = property(lambda self: self.settings.jit_compile)
    xla_max_batch = property(lambda self: self.settings.xla_max_batch)

    @property
    def drop_finished(self) -> bool:
        """XLA's static shapes run the plain loop, every row to the end."""
        return self.settings.drop_finished and not self.settings.jit_compile

    def __getattr__(self, name):
        """The searches of ``SEARCHES``, built on first use: ``tf.saved_model.save`` traces and
        stores every ``tf.function`` attribute, so one nothing calls would go into the export."""
        building = vars(self).get("_building") == name  # AutoTrackable's setattr looks it up
        if name not in SEARCHES or "_layers" not in vars(self) or building:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        vars(self)["_building"] = name
        try:
            function = self._function(getattr(self, f"_{name}"))
            setattr(self, name, function)  # an attribute from now on: tracked and saved
        finally:
            vars(self)["_building"] = None
        return function

    def _function(self, core):
        compiled = (
            tf.function(core, jit_compile=True, autograph=False) if self.jit_compile else core
        )

        def run(source_ids, *options):
            ids, scores = compiled(self.prepare_source(source_ids), *options)
            return trim_padding(ids), scores

        if self._small_batches is not None:
            small = getattr(self._small_batches, core.__name__.lstrip("_"))
            large = run

            def run(source_ids, *options):
                return tf.cond(
                    tf.shape(source_ids)[0] <= self.xla_max_batch,
                    lambda: small(source_ids, *options),
                    lambda: large(source_ids, *options),
                )

        specs = [SOURCE_SPEC, *(SAMPLING_SPECS if core.__name__ == "_sample" else ())]
        return tf.function(run, input_signature=specs, autograph=False)

    # ------------------------------------------------------------------ pieces of every search
    def prepare_source(self, source_ids):
        """int32 source ids cut to a learned table's rows; under XLA padded to a bucket width."""
        source_ids = tf.convert_to_tensor(source_ids, tf.int32)
        if self.max_source_positions is not None:
            source_ids = source_ids[:, : self.max_source_positions]
        if self.jit_compile:  # bucket widths: one XLA compilation per (batch, width bucket)
            width = tf.shape(source_ids)[1]
            multiple = self.settings.xla_length_multiple
            padded = tf.maximum((width + multiple - 1) // multiple * multiple, multiple)
            if self.max_source_positions is not None:
                padded = tf.minimum(padded, self.max_source_positions)
            source_ids = tf.pad(source_ids, [[0, 0], [0, padded - width]])
        return source_ids

    def limits(self, source_ids):
        """Per-sentence maximum number of emitted tokens, int32 ``[batch]``."""
        lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID), tf.int32), axis=1)
        return self._cap(lengths + self.max_extra_length)

    def _cap(self, limits):
        if self.max_output_length is not None:
            limits = tf.minimum(limits, self.max_output_length)
        if self.max_target_positions is not None:
            limits = tf.minimum(limits, self.max_target_positions)
        return tf.maximum(limits, 1)

    def _buffer_length(self, source_ids, limits):
        """Size of the caches and output buffers: static under XLA, else the largest limit."""
        if self.jit_compile:
            return self._cap(tf.shape(source_ids)[1] + self.max_extra_length)
        return tf.reduce_max(tf.concat([limits, [1]], axis=0))

    def best_tokens(self, logits, k, banned=None):
        """The ``k`` most probable ids per row of ``logits`` ``[N, vocab]``, never a banned id
        (nor one ``banned`` ``[N, vocab]`` marks): ``(log_probs [N, k], ids [N, k])``, sorted
        (see ``tokens.py``)."""
        if banned is not None:
            return tokens.best_tokens_allowed(self.best_tokens, logits, k, banned)
        if not self.settings.fast_top_k:
            return tokens.best_tokens_plain(logits, k, self.banned_ids)
        return tokens.best_tokens_blocked(
            logits, k, self.banned_ids, self.vocab_size, self._block_size
        )

    def log_probs(self, logits, banned=None):
        """The model's log-probabilities ``[N, vocab]`` (a softmax over the whole vocabulary),
        -inf at the ids never emitted and at those ``banned`` ``[N, vocab]`` marks."""
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
        never = tf.reduce_any(
            tf.equal(tf.range(self.vocab_size)[:, None], tf.constant(self.banned_ids)[None]), 1
        )
        excluded = never[None] if banned is None else never[None] | banned
        return tf.where(excluded, NEG_INF, log_probs)

    def repeated_ngrams(self, i, strategy, state):
        """The ids each row may not emit at step ``i`` (``no_repeat_ngram_size``), or None."""
        n = self.settings.no_repeat_ngram_size
        if not n:
            return None
        return tokens.repeated_ngram_mask(strategy.history(state), i, n, self.vocab_size)

    # ------------------------------------------------------------------ the loop
    def _search(self, source_ids, make_strategy):
        """Encode once, then one decoder step per position until the strategy is done."""
        if self.drop_finished:  # one sentence: nothing to drop, the plain loop
            return tf.cond(
                tf.shape(source_ids)[0] > 1,
                lambda: self._search_dropping_finished(source_ids, make_strategy),
                lambda: self._plain_search(source_ids, make_strategy),
            )
        return self._plain_search(source_ids, make_strategy)

    def _plain_search(self, source_ids, make_strategy):
        batch = tf.shape(source_ids)[0]
        limits = self.limits(source_ids)
        length = self._buffer_length(source_ids, limits)
        strategy = make_strategy(self.best_tokens, batch, limits, length)
        caches, beams = self._start(source_ids, strategy, length if self.jit_compile else 0)
        index = (lambda i: i) if self.jit_compile else (lambda i: None)

        def cond(i, state, self_attention):
            return tf.logical_and(i < length, tf.logical_not(strategy.done(state)))

        def body(i, state, self_attention):
            step_caches = tuple(
                cache._replace(self_attention=own) for cache, own in zip(caches, self_attention)
            )
            logits, step_caches = self.decode_step(
                strategy.last_tokens(state)[:, None], step_caches, index(i), beams
            )
            banned = self.repeated_ngrams(i, strategy, state)
            state, parents = strategy.step(i, logits[:, 0], state, banned)
            self_attention = tuple(cache.self_attention for cache in step_caches)
            if parents is not None:  # beam search: rows continue other rows' hypotheses
                self_attention = tf.nest.map_structure(
                    lambda c: tf.gather(c, parents, axis=0), self_attention
                )
            return i + 1, state, self_attention

        loop = (tf.constant(0), strategy.initial_state(), tuple(c.self_attention for c in caches))
        _, state, _ = tf.while_loop(cond, body, loop, shape_invariants=_invariants(loop))
        return strategy.result(state)

    def _search_dropping_finished(self, source_ids, make_strategy):
        """:meth:`_search` whose decoder batch holds only the sentences not yet finished.

        Loop variables: the step, ``active`` (int32 ``[A]``, the batch rows of the sentences
        left), the strategy's state and the cache of those sentences (``A * width`` rows), and
        the result buffers of the whole batch, written when finished sentences leave.
        """
        limits = self.limits(source_ids)
        length = self._buffer_length(source_ids, limits)
        first = make_strategy(self.best_tokens, tf.shape(source_ids)[0], limits, length)
        caches, beams = self._start(source_ids, first, 0)

        def cond(i, active, state, caches, results):
            return tf.logical_and(i < length, tf.logical_not(tf.reduce_all(first.finished(state))))

        def body(i, active, state, caches, results):
            strategy = make_strategy(
                self.best_tokens, tf.shape(active)[0], tf.gather(limits, active), length
            )
            last = strategy.last_tokens(state)[:, None]
            logits, caches = self.decode_step(last, caches, None, beams)
            banned = self.repeated_ngrams(i, strategy, state)
            state, parents = strategy.step(i, logits[:, 0], state, banned)
            step = (active, state, caches, results)
            drop = finished_rows.drop_finished
            return (i + 1, *drop(strategy, parents, first.width, *step, shared_cross=beams > 1))

        batch_rows = tf.range(tf.shape(source_ids)[0])
        state = first.initial_state()
        loop = (tf.constant(0), batch_rows, state, caches, first.result(state))
        _, active, state, _, results = tf.while_loop(
            cond, body, loop, shape_invariants=_invariants(loop)
        )
        # The sentences left at the end (finished, fewer than DROP_SHARE of them, or at the
        # last position) have their results in their state.
        return finished_rows.write(results, active, first.result(state))

    def _start(self, source_ids, strategy, length):
        """Encodes the source once per member: ``(caches, beams)``, each member's decoder cache
        of ``strategy.width`` rows per sentence (``length`` preallocated positions) and the
        rows per cross-attention row (``beams``: ``width`` when shared, else 1)."""
        share = self.settings.share_cross_cache and strategy.width > 1
        caches = []
        for layers in self._members:
            memory, source_mask = layers.encode(source_ids, training=False)
            caches.append(
                layers.start_cache(
                    memory, source_mask, length, repeat=strategy.width, share_cross=share
                )
            )
        return tuple(caches), strategy.width if share else 1

    def decode_step(self, last_tokens, caches, index, beams):
        """One decoder step of every member: ``(logits [N, 1, vocab], caches)``. An ensemble's
        logits are its members' log-probabilities combined (``ensemble_average``): their mean
        (a geometric mean of the distributions, renormalized by the search's softmax), or the
        log of their mean probability."""
        outputs = [
            layers.decode_step(last_tokens, cache, index, beams)
            for layers, cache in zip(self._members, caches)
        ]
        caches = tuple(cache for _, cache in outputs)
        if len(outputs) == 1:
            return outputs[0][0], caches
        log_probs = tf.stack(
            [tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1) for logits, _ in outputs]
        )
        if self.settings.ensemble_average == "probs":
            count = tf.math.log(float(len(outputs)))
            return tf.reduce_logsumexp(log_probs, axis=0) - count, caches
        return tf.reduce_mean(log_probs, axis=0), caches

    def _greedy(self, source_ids):
        return self._search(source_ids, strategies.GreedySearch)

    def _beam_search(self, source_ids):
        def make(best_tokens, batch, limits, length):
            return strategies.BeamSearch(
                best_tokens, batch, limits, length, self.beam_size, self.alpha, self.vocab_size
            )

        return self._search(source_ids, make)

    def _sample(self, source_ids, seeds, topk, topp, temperature):
        """A random draw per step (``sampling.py``); ``seeds``, ``topk``, ``topp`` and
        ``temperature`` are ``[batch]``, one per source row."""

        def make(best_tokens, batch, limits, length):
            options = (seeds, topk, topp, temperature)
            return strategies.SamplingSearch(self.log_probs, batch, limits, length, *options)

        return self._search(source_ids, make)

    def _sample_by_settings(self, source_ids):
        """``sample`` with the settings' top-k, top-p and temperature for every row, each
        row's seed from ``settings.seed`` and its source (``sampling.source_seeds``)."""
        source_ids = tf.convert_to_tensor(source_ids, tf.int32)
        rows = tf.shape(source_ids)[:1]
        s = self.settings
        return self.sample(
            source_ids,
            sampling.source_seeds(s.seed, source_ids),
            tf.fill(rows, s.sampling_topk),
            tf.fill(rows, s.sampling_topp),
            tf.fill(rows, s.sampling_temperature),
        )

    def _nbest(self, source_ids):
        def make(best_tokens, batch, limits, length):
            return strategies.NBestBeamSearch(
                best_tokens, batch, limits, length, self.beam_size, self.alpha, self.vocab_size
            )

        return self._search(source_ids, make)


def _fewest(limits):
    """The smallest of ``limits`` that are not None (None: no limit)."""
    limits = [limit for limit in limits if limit is not None]
    return min(limits) if limits else None


def _invariants(state):
    """Loop-variable shapes with every dimension unknown (the caches grow along their length)."""
    return tf.nest.map_structure(lambda t: tf.TensorShape([None] * t.shape.rank), state)


def trim_padding(ids):
    """Drops the positions at the end of ``ids`` (``[..., length]``) that are padding in every
    row (a PAD inside a row, before its last real id, keeps its position)."""
    positions = tf.range(1, tf.shape(ids)[-1] + 1)
    ends = tf.where(tf.not_equal(ids, PAD_ID), positions, 0)
    return ids[..., : tf.reduce_max(tf.concat([tf.reshape(ends, [-1]), [0]], axis=0))]


# ------------------------------------------------------------------ the functional API
_CACHE_SIZE = 8
_searchers: collections.OrderedDict[tuple, Searcher] = collections.OrderedDict()


def get_searcher(model: keras.Model, settings: SearchSettings | None = None, **changes) -> Searcher:
    """The :class:`Searcher` for ``model`` and ``settings`` (with ``changes``), built once and
    then reused: keeps the last 8 (each holds its model), so repeated calls of the functions
    below do not retrace."""
    settings = (settings or SearchSettings()).replace(**changes)
    key = (id(model), settings)
    searcher = _searchers.get(key)
    if searcher is None or searcher.model is not model:
        searcher = Searcher(model, settings)
        _searchers[key] = searcher
        while len(_searchers) > _CACHE_SIZE:
            _searchers.popitem(last=False)
    _searchers.move_to_end(key)
    return searcher


def greedy_decode(model: keras.Model, source_ids, **settings):
    """Greedy search with key/value caches: the most probable token at every step.

    ``settings``: :class:`SearchSettings` fields (``max_extra_length``, ...). Returns ``(ids
    int32 [batch, length], scores float32 [batch])``: ids without BOS, ending at EOS,
    right-padded with 0; scores are the summed log-probabilities (see the module docstring).

    Example:

    >>> from keras_transformer import TransformerConfig, build_transformer
    >>> model = build_transformer(TransformerConfig.tiny(vocab_size=100))
    >>> ids, scores = greedy_decode(model, [[5, 6, 7, 3]], max_extra_length=10)
    >>> ids.shape[0], int(ids.shape[1]) <= 4 + 10, float(scores[0]) <= 0.0
    (1, True, True)
    """
    searcher = get_searcher(model, **{**settings, "beam_size": 1, "alpha": 0.0})
    return searcher.greedy(tf.convert_to_tensor(source_ids, tf.int32))


def beam_search(model: keras.Model, source_ids, **settings):
    """Beam search with key/value caches and the GNMT length penalty (paper section 6.1).

    ``settings``: :class:`SearchSettings` fields (``beam_size``, ``alpha``, ...). Returns the
    best hypothesis per sentence: ``(ids int32 [batch, length], scores float32 [batch])``, ids as
    in :func:`greedy_decode`, scores ``log P(y) / ((5 + |y|) / 6) ** alpha``.

    Example:

    >>> from keras_transformer import TransformerConfig, build_transformer
    >>> model = build_transformer(TransformerConfig.tiny(vocab_size=100))
    >>> ids, scores = beam_search(model, [[5, 6, 7, 3], [8, 3, 0, 0]], beam_size=4, alpha=0.6)
    >>> tuple(scores.shape)
    (2,)
    """
    searcher = get_searcher(model, **settings)
    return searcher.beam_search(tf.convert_to_tensor(source_ids, tf.int32))
