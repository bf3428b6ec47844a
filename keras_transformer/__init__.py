"""keras-transformer: the Transformer of "Attention Is All You Need" in TensorFlow / Keras 3."""

from keras_transformer.config import TransformerConfig
from keras_transformer.model import build_transformer

__version__ = "0.1.0"

__all__ = ["TransformerConfig", "build_transformer"]
