"""keras-transformer: the Transformer of "Attention Is All You Need" in TensorFlow / Keras 3.

The main names are importable from here; each module holds one step of the flow
(raw text -> tokenizer -> tf.data -> functional model -> search -> SavedModel). Importing the
package imports TensorFlow and registers every layer, loss, metric, schedule and optimizer for
``.keras`` loading (``_api.py``). In the ``keras-transformer`` command alone they come on first
use (PEP 562): it parses its arguments first, so ``--help`` and usage errors need no TensorFlow.
"""

import importlib

from keras_transformer.quiet import is_command_line

__version__ = "0.1.0"

if is_command_line():

    def __getattr__(name):
        # by its full name: ``from keras_transformer import _api`` would ask this function for
        # ``_api`` first, and again, without end, in a process that has not imported it yet
        # (the command's spawned pool workers)
        _api = importlib.import_module("keras_transformer._api")
        if name in _api.__all__:
            return getattr(_api, name)
        raise AttributeError(f"module 'keras_transformer' has no attribute {name!r}")

else:
    from keras_transformer._api import *  # noqa: F403
    from keras_transformer._api import __all__  # noqa: F401
