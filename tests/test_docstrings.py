"""The ``>>>`` examples in the docstrings of the self-contained modules run and print what they say."""
import doctest
import importlib

import pytest

# Modules whose examples need nothing but the module itself (the others show fragments that need a
# trained model or a run directory).
MODULES = [
    "keras_transformer.config",
    "keras_transformer.distribute",
    "keras_transformer.losses",
    "keras_transformer.optimizers",
    "keras_transformer.schedules",
    "keras_transformer.layers.attention",
    "keras_transformer.layers.blocks",
    "keras_transformer.layers.dropout",
    "keras_transformer.layers.embedding",
    "keras_transformer.layers.feedforward",
    "keras_transformer.layers.masking",
    "keras_transformer.layers.normalization",
    "keras_transformer.layers.positional",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), report=True,
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
