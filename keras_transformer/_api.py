"""The public names of ``keras_transformer``, imported with TensorFlow.

``import keras_transformer`` imports this module at once; the ``keras-transformer`` command
imports it after parsing its arguments (``cli.main``), so that ``--help`` and usage errors need no
TensorFlow. Importing it registers every layer, loss, metric, schedule and optimizer for ``.keras``
loading.
"""

import tensorflow  # noqa: F401

from keras_transformer.config import TransformerConfig
from keras_transformer.inference.ctranslate2 import export_ctranslate2
from keras_transformer.inference.formats import load_translator
from keras_transformer.inference.saved_model import Translator, export_translator
from keras_transformer.inference.search import Searcher, beam_search, greedy_decode
from keras_transformer.inference.settings import SearchSettings, ServingSettings
from keras_transformer.losses import LabelSmoothedCrossEntropy
from keras_transformer.metrics import MaskedAccuracy, Perplexity, TokenCount
from keras_transformer.model import (
    DecoderCache,
    TransformerLayers,
    attention_weights,
    build_transformer,
    cast_model,
    model_dims,
)
from keras_transformer.optimizers import FusedAdam
from keras_transformer.schedules import TransformerSchedule, transformer_optimizer
from keras_transformer.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, SubwordTokenizer

__all__ = [
    "export_ctranslate2",
    "load_translator",
    "BOS_ID",
    "DecoderCache",
    "EOS_ID",
    "FusedAdam",
    "LabelSmoothedCrossEntropy",
    "MaskedAccuracy",
    "PAD_ID",
    "Perplexity",
    "SearchSettings",
    "Searcher",
    "ServingSettings",
    "SubwordTokenizer",
    "TokenCount",
    "TransformerConfig",
    "TransformerLayers",
    "TransformerSchedule",
    "Translator",
    "UNK_ID",
    "attention_weights",
    "beam_search",
    "build_transformer",
    "cast_model",
    "export_translator",
    "greedy_decode",
    "model_dims",
    "transformer_optimizer",
]
