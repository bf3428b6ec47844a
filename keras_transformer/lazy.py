"""Packages whose public names load on first use (PEP 562).

``keras_transformer.training`` and ``keras_transformer.inference`` re-export names from modules that
import TensorFlow. Their ``__init__`` lists the names with the module of each instead of importing
them, so that importing one light module of theirs (a run config, a run folder, an export check)
imports no TensorFlow: the ``keras-transformer`` command checks its inputs that way before
TensorFlow loads (``cli.main``). A program sees no difference: ``from keras_transformer.training
import train`` imports ``training.loop`` at that moment.

This module imports nothing from TensorFlow.
"""

from __future__ import annotations

import importlib
import sys


def lazy_names(package: str, modules: dict[str, tuple[str, ...]]):
    """``(__all__, __getattr__, __dir__)`` for ``package``, whose names are ``modules``' values,
    each loaded from ``package.<key>`` on first use (then kept in the package).

    >>> names, getattr_, _ = lazy_names("keras_transformer", {"config": ("TransformerConfig",)})
    >>> names, getattr_("TransformerConfig").__name__
    (['TransformerConfig'], 'TransformerConfig')
    """
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name):
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__():
        return sorted({*vars(sys.modules[package]), *where})

    return sorted(where), __getattr__, __dir__
