"""keras-transformer: the Transformer of "Attention Is All You Need" in TensorFlow / Keras 3.

The main names are importable from here; each module holds one step of the flow
(raw text -> tokenizer -> tf.data -> functional model -> decoding -> SavedModel).
"""

from keras_transformer.config import TransformerConfig
from keras_transformer.decoding import Decoder, beam_search, greedy_decode
from keras_transformer.export import Translator, export_translator
from keras_transformer.losses import LabelSmoothedCrossEntropy, MaskedAccuracy, Perplexity, TokenCount
from keras_transformer.model import (TransformerParts, attention_weights, build_transformer,
                                     cast_model)
from keras_transformer.schedules import TransformerSchedule, transformer_optimizer
from keras_transformer.tokenization import BOS_ID, EOS_ID, PAD_ID, UNK_ID, SubwordTokenizer

__version__ = "0.1.0"

__all__ = [
    "BOS_ID",
    "Decoder",
    "EOS_ID",
    "LabelSmoothedCrossEntropy",
    "MaskedAccuracy",
    "PAD_ID",
    "Perplexity",
    "SubwordTokenizer",
    "TokenCount",
    "TransformerConfig",
    "TransformerParts",
    "TransformerSchedule",
    "Translator",
    "UNK_ID",
    "attention_weights",
    "beam_search",
    "build_transformer",
    "cast_model",
    "export_translator",
    "greedy_decode",
    "transformer_optimizer",
]
