"""One way to translate with either export: ``load_translator(path).translate(lines)``.

``path`` is a SavedModel folder from ``keras-transformer export`` (``export_translator``) or a
CTranslate2 folder from ``export --format ctranslate2`` (``export_ctranslate2``); both tokenize,
decode with the settings they were exported with (beam 4 by default) and detokenize.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np

from keras_transformer.serving.formats import SAVED_MODEL_SETTINGS, NotAnExportError, check_export
from keras_transformer.serving.parallel import map_batches

__all__ = [
    "NotAnExportError",
    "SavedModelTranslator",
    "check_export",
    "load_translator",
    "set_tf_threads",
]


class SavedModelTranslator:
    """A SavedModel of :func:`keras_transformer.export_translator`, lines in, lines out.

    Args:
        path: the folder.
        intra_threads: TensorFlow's intra-op threads (0: its default, one per core).
        inter_threads: batches translated at once (as CTranslate2's ``inter_threads``), each
            from a thread of its own, with TensorFlow's inter-op pool sized to match. 0: one
            batch at a time, on TensorFlow's default inter-op pool, or on one inter-op thread
            when ``intra_threads`` is given (the CLI's ``--threads`` without ``--parallel``).

    TensorFlow sizes its pools once per process, before its first op: a later different value
    raises. One thread per batch suits this engine's small per-step ops: a single sentence
    with ``intra_threads=1, inter_threads=1``, a file with ``intra_threads=1`` and a batch
    per core (``results/serving.md``).
    """

    def __init__(self, path, intra_threads=0, inter_threads=0):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the SavedModel uses)

        from keras_transformer.quiet import dropping_noise

        set_tf_threads(intra_threads, inter_threads or (1 if intra_threads else 0))
        self.parallel = max(1, int(inter_threads))
        self.path = pathlib.Path(path)
        self.settings = json.loads((self.path / SAVED_MODEL_SETTINGS).read_text())["translator"]
        with dropping_noise():
            self.loaded = tf.saved_model.load(str(path))
        self.serve = self.loaded.signatures["serving_default"]

    def _map(self, signature, lines, batch_size, progress):
        """``(chunk, outputs)`` of ``signature`` on batches of similar lengths, in order."""
        import tensorflow as tf

        order = np.argsort([len(line) for line in lines], kind="stable")  # similar lengths together
        chunks = [order[i : i + batch_size] for i in range(0, len(lines), batch_size)]

        def run(chunk):
            return signature(text=tf.constant([lines[i] for i in chunk], tf.string))

        return map_batches(run, chunks, self.parallel, progress)

    def translate(self, lines, batch_size=64, progress=False) -> list[str]:
        results = [""] * len(lines)
        for chunk, out in self._map(self.serve, lines, batch_size, progress):
            for i, text in zip(chunk, out["translation"].numpy(), strict=True):
                results[i] = text.decode("utf-8")
        return results

    def translate_hypotheses(self, lines, k=1, batch_size=64, progress=False, **options):
        """The ``k`` best translations of every line (``k <=`` the export's beam size), from the
        ``translate_nbest`` signature: lists of :class:`Hypothesis` (text and score)."""
        from keras_transformer.serving.ctranslate2_translate import Hypothesis

        beam = self.settings["beam_size"]
        if options.get("beam_size") not in (None, beam) or not 1 <= k <= beam:
            raise ValueError(f"{self.path}: exported with beam size {beam}; k={k} must fit in it")
        results = [[]] * len(lines)
        nbest = self.loaded.signatures["translate_nbest"]
        for chunk, out in self._map(nbest, lines, batch_size, progress):
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
        from keras_transformer.serving.ctranslate2_translate import Hypothesis

        results = [None] * len(lines)
        aligned = self.loaded.signatures["translate_aligned"]
        for chunk, out in self._map(aligned, lines, batch_size, progress):
            for row, i in enumerate(chunk):
                alignment = [int(a) for a in out["alignment"][row].numpy() if a >= 0]
                text = out["translation"][row].numpy().decode("utf-8")
                results[i] = Hypothesis(text, float(out["score"][row]), None, alignment)
        return results


def set_tf_threads(intra_threads=0, inter_threads=0):
    """Sizes TensorFlow's intra-op and inter-op thread pools (0: leave TensorFlow's default);
    a ``RuntimeError`` naming the setting if this process has already fixed another size."""
    import tensorflow as tf

    pools = (
        ("intra_threads", intra_threads, tf.config.threading.set_intra_op_parallelism_threads),
        ("inter_threads", inter_threads, tf.config.threading.set_inter_op_parallelism_threads),
    )
    for name, value, set_pool in pools:
        if int(value) < 0:
            raise ValueError(f"{name}={value} must be >= 0 (0: TensorFlow's default)")
        if not value:
            continue
        try:
            set_pool(int(value))
        except RuntimeError as error:
            raise RuntimeError(
                f"{name}={value}: TensorFlow's thread pools are sized once per process, before "
                "its first op, and this process has run ops already; pass it before anything "
                "else runs TensorFlow, or set TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS"
            ) from error


def load_translator(path, **options):
    """A :class:`SavedModelTranslator` or a
    :class:`~keras_transformer.serving.CTranslate2Translator` (``options``: its keywords) for an
    export folder, whichever it is. ``intra_threads`` and ``inter_threads`` size either
    engine's threads (TensorFlow's pools, or CTranslate2's threads per translation and
    translations in parallel); other options go to CTranslate2 only."""
    if check_export(path) == "ctranslate2":
        from keras_transformer.serving.ctranslate2_translate import CTranslate2Translator

        return CTranslate2Translator(path, **options)
    threads = {k: options.pop(k) for k in ("intra_threads", "inter_threads") if k in options}
    if options:
        raise TypeError(f"{path} is a SavedModel: {sorted(options)} go with CTranslate2 folders")
    return SavedModelTranslator(path, **threads)
