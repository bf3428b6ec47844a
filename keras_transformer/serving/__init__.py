"""Old home of the export readers and the CTranslate2 export, kept for one release: the names
live in :mod:`keras_transformer.inference` now."""

import importlib

__all__ = [
    "CTranslate2Translator",
    "Hypothesis",
    "NotAnExportError",
    "SavedModelTranslator",
    "check_export",
    "ctranslate2_spec",
    "export_ctranslate2",
    "load_translator",
    "set_tf_threads",
]


def __getattr__(name):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("keras_transformer.inference"), name)
