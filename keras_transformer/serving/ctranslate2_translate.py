"""Translate text with a folder from :func:`export_ctranslate2`: the SavedModel's behaviour on
CTranslate2.

:class:`CTranslate2Translator` cleans, cuts and tokenizes each line as the SavedModel does
(``serving/text.py``), decodes with the folder's settings (beam 4 unless exported otherwise) and
detokenizes. Differences from the SavedModel, all in the search, none in the model:

* **length penalty**: CTranslate2 divides a hypothesis' log-probability by ``len ** alpha``, our
  beam search by GNMT's ``((5 + len) / 6) ** alpha``. With ``length_penalty="gnmt"`` (default)
  the engine searches with its own penalty, returns its ``k`` finished hypotheses and they are
  re-ranked by the GNMT score, so the choice among them is ours; the hypotheses the beam keeps on
  the way can still differ (``results/serving.md`` measures how often, and the BLEU cost).
  ``length_penalty="ctranslate2"`` takes the engine's best as it is.
* **maximum length**: one limit per engine call (the batch's largest ``source + max_extra_length``),
  each output then cut to its own limit: exact for greedy search (a prefix of the longer search),
  for beam search only when no hypothesis of the batch reaches its limit.

Greedy search (``beam_size=1``) gives the SavedModel's tokens (``tests/test_ctranslate2.py``).
Scores are the SavedModel's: ``log P(y) / ((5 + |y|) / 6) ** alpha`` (``|y|`` counts EOS).
"""

from __future__ import annotations

import json
import pathlib
from typing import NamedTuple

import numpy as np

from keras_transformer.serving import text as text_io
from keras_transformer.serving.ctranslate2_export import SETTINGS_FILE, SPM_FILE
from keras_transformer.serving.parallel import map_batches
from keras_transformer.tokenization import BOS_PIECE, PAD_PIECE

__all__ = ["CTranslate2Translator", "Hypothesis"]


class Hypothesis(NamedTuple):
    """One translation: ``text``, ``score`` (GNMT-normalized log P), ``tokens`` (pieces, no EOS)
    and ``alignment`` (per target token, the index of the most attended source token, or None)."""

    text: str
    score: float
    tokens: list
    alignment: list | None = None


def _gnmt(log_prob, length, alpha):
    return log_prob / ((5.0 + length) / 6.0) ** alpha


class CTranslate2Translator:
    """A CTranslate2 model folder from :func:`export_ctranslate2`, text in, text out.

    Args:
        path: the folder.
        compute_type: CTranslate2's compute type (``"default"``: the stored weight type).
        inter_threads: batches translated at once, one per CTranslate2 worker (each batch from
            a Python thread of its own: ``parallel.py``; 0 is 1).
        intra_threads: CTranslate2's threads per batch (0: its default).
        device: ``"cpu"`` or ``"cuda"``.

    Example:

    >>> translator = CTranslate2Translator("saved_models/en_de_ct2")
    >>> translator.translate(["A dog runs."])
    ['Ein Hund rennt.']
    """

    def __init__(
        self, path, compute_type="default", inter_threads=1, intra_threads=0, device="cpu"
    ):
        import ctranslate2
        import sentencepiece as spm

        self.path = pathlib.Path(path)
        self.settings = json.loads((self.path / SETTINGS_FILE).read_text())["translator"]
        self.processor = spm.SentencePieceProcessor(model_file=str(self.path / SPM_FILE))
        self.parallel = max(1, int(inter_threads))  # batches in flight, one per worker
        self.engine = ctranslate2.Translator(
            str(self.path),
            device=device,
            compute_type=compute_type,
            inter_threads=self.parallel,
            intra_threads=intra_threads,
        )

    def _limit(self, pieces):
        """Tokens a translation may have (EOS included), as the SavedModel's search."""
        s = self.settings
        limit = len(pieces) + 1 + s["max_extra_length"]
        for cap in (s["max_output_length"], s["max_target_positions"]):
            if cap is not None:
                limit = min(limit, cap)
        return max(limit, 1)

    def _decode(self, batch, beam_size, alpha, k, length_penalty, align):
        """Hypotheses of a batch of source pieces (all non-empty): a list of ``k``-lists."""
        limits = [self._limit(p) for p in batch]
        results = self.engine.translate_batch(
            batch,
            beam_size=beam_size,
            num_hypotheses=beam_size if length_penalty == "gnmt" else k,
            length_penalty=alpha,
            max_decoding_length=max(limits),
            min_decoding_length=0,
            max_input_length=0,
            suppress_sequences=[[PAD_PIECE], [BOS_PIECE]],
            return_scores=True,
            return_end_token=True,
            return_attention=align,
        )
        decoded = [
            self._hypotheses(result, limit, alpha, align and beam_size == 1)
            for result, limit in zip(results, limits, strict=True)
        ]
        found = [hypotheses for hypotheses, _ in decoded]
        self._rescore_cut(batch, found, [cut for _, cut in decoded], limits, alpha)
        if length_penalty == "gnmt":
            found = [sorted(hypotheses, key=lambda h: -h.score) for hypotheses in found]
        found = [hypotheses[:k] for hypotheses in found]
        if align and beam_size > 1:
            found = self._realign(batch, found)
        return found

    def _realign(self, batch, found):
        """Alignments of beam-search hypotheses from a forced greedy pass over each one: the
        attention CTranslate2 4.8.5 returns from beam search is wrong at the first target token
        (``tests/test_ctranslate2.py``); its greedy attention is exact."""
        eos = self.processor.id_to_piece(self.settings["eos_id"])
        sources = [source for source, hypotheses in zip(batch, found) for _ in hypotheses]
        flat = [h for hypotheses in found for h in hypotheses]
        forced = self.engine.translate_batch(
            sources,
            target_prefix=[h.tokens + [eos] for h in flat],
            beam_size=1,
            max_decoding_length=max(len(h.tokens) for h in flat) + 1,
            min_decoding_length=0,
            max_input_length=0,
            return_attention=True,
        )
        aligned = iter(
            h._replace(alignment=[int(np.argmax(row)) for row in r.attention[0][: len(h.tokens)]])
            for h, r in zip(flat, forced, strict=True)
        )
        return [[next(aligned) for _ in hypotheses] for hypotheses in found]

    def _hypotheses(self, result, limit, alpha, align):
        """Every hypothesis of one result, cut at ``limit`` tokens, and the indices of those
        cut (their scores still count the tokens past the limit)."""
        eos = self.processor.id_to_piece(self.settings["eos_id"])
        hypotheses, cut = [], []
        for i, tokens in enumerate(result.hypotheses):
            tokens = list(tokens)
            # The engine's score is log P / len ** alpha over the emitted tokens (EOS included).
            log_prob = result.scores[i] * len(tokens) ** alpha
            if len(tokens) > limit:  # decoded past this sentence's limit (the batch's longer)
                tokens = tokens[:limit]
                cut.append(i)
            emitted = len(tokens)
            if tokens and tokens[-1] == eos:
                tokens = tokens[:-1]
            alignment = None
            if align:
                alignment = [int(np.argmax(row)) for row in result.attention[i][: len(tokens)]]
            text = text_io.target_text(self.processor, tokens)
            hypotheses.append(Hypothesis(text, _gnmt(log_prob, emitted, alpha), tokens, alignment))
        return hypotheses, cut

    def _rescore_cut(self, batch, found, cuts, limits, alpha):
        """Scores the hypotheses cut at their sentence's limit over the tokens kept, as the
        SavedModel's search stops there (in place; one ``score_batch`` call per batch)."""
        where = [(b, i) for b, cut in enumerate(cuts) for i in cut]
        if not where:
            return
        scored = self.engine.score_batch(
            [batch[b] for b, _ in where], [found[b][i].tokens for b, i in where]
        )
        for (b, i), result in zip(where, scored, strict=True):
            log_prob = sum(result.log_probs[: limits[b]])  # without the EOS score_batch appends
            found[b][i] = found[b][i]._replace(score=_gnmt(log_prob, limits[b], alpha))

    def translate_hypotheses(
        self,
        lines,
        k=1,
        beam_size=None,
        alpha=None,
        batch_size=64,
        length_penalty="gnmt",
        align=False,
        progress=False,
    ) -> list[list[Hypothesis]]:
        """The ``k`` best hypotheses of every line (``k <= beam_size``), best first."""
        s = self.settings
        beam_size = int(s["beam_size"] if beam_size is None else beam_size)
        alpha = float(s["alpha"] if alpha is None else alpha)
        if not 1 <= k <= beam_size:
            raise ValueError(f"k={k} must be between 1 and the beam size {beam_size}")
        if length_penalty not in ("gnmt", "ctranslate2"):
            raise ValueError(f"length_penalty={length_penalty!r}: 'gnmt' or 'ctranslate2'")
        sources = [
            text_io.source_pieces(
                self.processor, line, s["max_input_chars"], s["max_source_length"]
            )
            for line in lines
        ]
        results = [[Hypothesis("", 0.0, [], [] if align else None)]] * len(sources)

        def run(chunk):
            return self._decode(
                [sources[i] for i in chunk], beam_size, alpha, k, length_penalty, align
            )

        chunks = self._chunks(sources, batch_size)
        for chunk, decoded in map_batches(run, chunks, self.parallel, progress):
            for i, hypotheses in zip(chunk, decoded, strict=True):
                results[i] = hypotheses
        return results

    def _chunks(self, sources, batch_size):
        """Indices of the non-empty sources, shortest first, in batches of at most
        ``batch_size`` lines and the folder's ``max_batch_tokens`` source ids (rows x the
        longest, EOS included; at least one line), as the SavedModel's sub-batches."""
        budget = self.settings.get("max_batch_tokens")  # absent in folders before it existed
        order = [i for i in np.argsort([len(p) for p in sources], kind="stable") if sources[i]]
        chunks = [[]]
        for i in order:
            rows, width = len(chunks[-1]) + 1, len(sources[i]) + 1  # the longest so far
            if rows > batch_size or (budget is not None and rows > 1 and rows * width > budget):
                chunks.append([])
            chunks[-1].append(i)
        return [chunk for chunk in chunks if chunk]

    def translate_aligned(self, lines, batch_size=64, progress=False, **options):
        """The best :class:`Hypothesis` of every line, with its ``alignment``."""
        found = self.translate_hypotheses(
            lines, 1, batch_size=batch_size, progress=progress, align=True, **options
        )
        return [hypotheses[0] for hypotheses in found]

    def translate(self, lines, batch_size=64, progress=False, **options) -> list[str]:
        """The best translation of every line (options: :meth:`translate_hypotheses`'s)."""
        found = self.translate_hypotheses(
            lines, 1, batch_size=batch_size, progress=progress, **options
        )
        return [hypotheses[0].text for hypotheses in found]
