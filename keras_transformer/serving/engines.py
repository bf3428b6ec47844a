"""One way to translate with either export: ``load_translator(path).translate(lines)``.

``path`` is a SavedModel folder from ``keras-transformer export`` (``export_translator``) or a
CTranslate2 folder from ``export --format ctranslate2`` (``export_ctranslate2``); both tokenize,
decode with the settings they were exported with (beam 4 by default) and detokenize.
"""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np

from keras_transformer.serving.formats import SAVED_MODEL_SETTINGS, NotAnExportError, check_export

__all__ = ["NotAnExportError", "SavedModelTranslator", "check_export", "load_translator"]


class SavedModelTranslator:
    """A SavedModel of :func:`keras_transformer.export_translator`, lines in, lines out."""

    def __init__(self, path):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the SavedModel uses)

        from keras_transformer.quiet import dropping_noise

        self.path = pathlib.Path(path)
        self.settings = json.loads((self.path / SAVED_MODEL_SETTINGS).read_text())["translator"]
        with dropping_noise():
            self.loaded = tf.saved_model.load(str(path))
        self.serve = self.loaded.signatures["serving_default"]

    def _batches(self, lines, batch_size, progress):
        order = np.argsort([len(line) for line in lines], kind="stable")  # similar lengths together
        starts = range(0, len(lines), batch_size)
        if progress:
            from tqdm import tqdm

            starts = tqdm(starts, desc="translating", unit="batch", file=sys.stderr)
        for start in starts:
            yield order[start : start + batch_size]

    def translate(self, lines, batch_size=64, progress=False) -> list[str]:
        import tensorflow as tf

        results = [""] * len(lines)
        for chunk in self._batches(lines, batch_size, progress):
            out = self.serve(text=tf.constant([lines[i] for i in chunk]))["translation"].numpy()
            for i, text in zip(chunk, out, strict=True):
                results[i] = text.decode("utf-8")
        return results

    def translate_hypotheses(self, lines, k=1, batch_size=64, progress=False, **options):
        """The ``k`` best translations of every line (``k <=`` the export's beam size), from the
        ``translate_nbest`` signature: lists of :class:`Hypothesis` (text and score)."""
        import tensorflow as tf

        from keras_transformer.serving.ctranslate2_translate import Hypothesis

        beam = self.settings["beam_size"]
        if options.get("beam_size") not in (None, beam) or not 1 <= k <= beam:
            raise ValueError(f"{self.path}: exported with beam size {beam}; k={k} must fit in it")
        results = [[]] * len(lines)
        nbest = self.loaded.signatures["translate_nbest"]
        for chunk in self._batches(lines, batch_size, progress):
            out = nbest(text=tf.constant([lines[i] for i in chunk]))
            texts, scores = out["translations"].numpy(), out["scores"].numpy()
            for row, i in enumerate(chunk):
                results[i] = [
                    Hypothesis(texts[row, j].decode("utf-8"), float(scores[row, j]), None)
                    for j in range(k)
                ]
        return results

    def translate_aligned(self, lines, batch_size=64, progress=False):
        """Best translations with alignments (``translate_aligned`` signature): a
        :class:`Hypothesis` per line, ``alignment`` the source subword index of each target
        subword."""
        import tensorflow as tf

        from keras_transformer.serving.ctranslate2_translate import Hypothesis

        results = [None] * len(lines)
        aligned = self.loaded.signatures["translate_aligned"]
        for chunk in self._batches(lines, batch_size, progress):
            out = aligned(text=tf.constant([lines[i] for i in chunk]))
            for row, i in enumerate(chunk):
                alignment = [int(a) for a in out["alignment"][row].numpy() if a >= 0]
                text = out["translation"][row].numpy().decode("utf-8")
                results[i] = Hypothesis(text, float(out["score"][row]), None, alignment)
        return results


def load_translator(path, **options):
    """A :class:`SavedModelTranslator` or a
    :class:`~keras_transformer.serving.CTranslate2Translator` (``options``: its keywords) for an
    export folder, whichever it is."""
    if check_export(path) == "ctranslate2":
        from keras_transformer.serving.ctranslate2_translate import CTranslate2Translator

        return CTranslate2Translator(path, **options)
    return SavedModelTranslator(path)
