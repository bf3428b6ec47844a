"""Old home of the tokenizer, kept for one release: the names live in
:mod:`keras_transformer.text` now (``text/tokenizer.py``)."""

from keras_transformer.text.tokenizer import *  # noqa: F403
from keras_transformer.text.tokenizer import __all__  # noqa: F401
