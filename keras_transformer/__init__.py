"""keras-transformer: the Transformer of "Attention Is All You Need" in TensorFlow / Keras 3.

The main names are importable from here; each module holds one step of the flow
(raw text -> tokenizer -> tf.data -> functional model -> search -> SavedModel). Importing the
package registers every layer, loss, metric, schedule and optimizer for ``.keras`` loading.
"""

from keras_transformer.quiet import command_line_start

with command_line_start():  # the keras-transformer command hides TensorFlow's start-up lines
    import tensorflow  # noqa: F401

from keras_transformer.config import TransformerConfig
from keras_transformer.decoding import Searcher, beam_search, greedy_decode
from keras_transformer.export import Translator, export_translator
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
from keras_transformer.serving import export_ctranslate2, load_translator
from keras_transformer.tokenization import BOS_ID, EOS_ID, PAD_ID, UNK_ID, SubwordTokenizer

__version__ = "0.1.0"

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
    "Searcher",
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
