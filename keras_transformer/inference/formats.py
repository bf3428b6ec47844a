"""The two export formats told apart without TensorFlow, and one loader for either.

A SavedModel of ``export_translator`` has ``saved_model.pb`` and
``assets.extra/translator.json``; a CTranslate2 folder of ``export_ctranslate2`` has
``model.bin`` and ``translator.json``. ``load_translator(path).translate(lines)`` opens either:
both tokenize, decode with the settings they were exported with and detokenize.
"""

from __future__ import annotations

import pathlib

__all__ = [
    "CTRANSLATE2_SETTINGS",
    "SAVED_MODEL_SETTINGS",
    "NotAnExportError",
    "check_export",
    "is_ctranslate2_folder",
    "load_translator",
]

CTRANSLATE2_SETTINGS = "translator.json"
SAVED_MODEL_SETTINGS = pathlib.Path("assets.extra") / "translator.json"


class NotAnExportError(ValueError):
    """Neither a SavedModel nor a CTranslate2 model of ``keras-transformer export``."""


def check_export(path) -> str:
    """``"ctranslate2"`` or ``"saved_model"`` for an export folder of ours, else
    :class:`NotAnExportError` (or ``FileNotFoundError``) naming the folder and what is missing."""
    path = pathlib.Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: no such folder (a SavedModel from `keras-transformer export`)"
        )
    if is_ctranslate2_folder(path):
        return "ctranslate2"
    if not (path / "saved_model.pb").is_file():
        raise NotAnExportError(
            f"{path} is not a SavedModel folder (no saved_model.pb) nor a CTranslate2 model "
            "(no model.bin); `keras-transformer export` writes one"
        )
    if not (path / SAVED_MODEL_SETTINGS).is_file():
        raise NotAnExportError(
            f"{path} is a SavedModel but not a translator of keras-transformer export "
            f"(no {SAVED_MODEL_SETTINGS})"
        )
    return "saved_model"


def is_ctranslate2_folder(path) -> bool:
    """True for a folder written by :func:`export_ctranslate2`."""
    path = pathlib.Path(path)
    return (path / "model.bin").is_file() and (path / CTRANSLATE2_SETTINGS).is_file()


def load_translator(path, **options):
    """A :class:`~keras_transformer.inference.saved_model.SavedModelTranslator` or a
    :class:`~keras_transformer.inference.ctranslate2.CTranslate2Translator` (``options``: its
    keywords) for an export folder, whichever it is. ``intra_threads`` and ``inter_threads``
    size either engine's threads (TensorFlow's pools, or CTranslate2's threads per translation
    and translations in parallel); other options go to CTranslate2 only."""
    if check_export(path) == "ctranslate2":
        from keras_transformer.inference.ctranslate2 import CTranslate2Translator

        return CTranslate2Translator(path, **options)
    threads = {k: options.pop(k) for k in ("intra_threads", "inter_threads") if k in options}
    if options:
        raise TypeError(f"{path} is a SavedModel: {sorted(options)} go with CTranslate2 folders")
    from keras_transformer.inference.saved_model import SavedModelTranslator

    return SavedModelTranslator(path, **threads)
