"""Serving the exported models: CTranslate2 export and translation, atomic export folders, one
loader for either export format (``load_translator``)."""

from keras_transformer.serving.atomic import atomic_folder
from keras_transformer.serving.ctranslate2_export import ctranslate2_spec, export_ctranslate2
from keras_transformer.serving.ctranslate2_translate import CTranslate2Translator, Hypothesis
from keras_transformer.serving.engines import (
    NotAnExportError,
    SavedModelTranslator,
    check_export,
    load_translator,
)

__all__ = [
    "CTranslate2Translator",
    "Hypothesis",
    "NotAnExportError",
    "SavedModelTranslator",
    "atomic_folder",
    "check_export",
    "ctranslate2_spec",
    "export_ctranslate2",
    "load_translator",
]
