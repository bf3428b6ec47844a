"""Old home of the SavedModel export, kept for one release: the names live in
:mod:`keras_transformer.inference` now (``inference/saved_model.py``).
``python -m keras_transformer.export run ...`` still runs TensorFlow's saved_model_cli with the
SentencePiece ops registered."""

import sys

from keras_transformer.inference.ctranslate2 import export_ctranslate2  # noqa: F401
from keras_transformer.inference.saved_model import (  # noqa: F401
    SETTINGS_FILE,
    Translator,
    export_translator,
    saved_model_cli,
)

__all__ = [
    "SETTINGS_FILE",
    "Translator",
    "export_ctranslate2",
    "export_translator",
    "saved_model_cli",
]

if __name__ == "__main__":
    sys.exit(saved_model_cli())
