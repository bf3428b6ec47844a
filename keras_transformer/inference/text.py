"""The SavedModel's input handling in plain Python, for engines outside TensorFlow.

:func:`clean` and :func:`source_pieces` do what :class:`keras_transformer.Translator` does
inside its graph (see the module docstring of ``inference/saved_model.py``): invalid UTF-8 becomes
U+FFFD, ASCII control characters and whitespace runs become one space, both ends are stripped, the
line is cut to ``max_input_chars`` characters, tokenized with the SentencePiece model and cut to
``max_source_length - 1`` subwords (EOS is the last source id). ``tests/test_ctranslate2.py``
checks that both give the same ids.
"""

from __future__ import annotations

import re

from keras_transformer.text.tokenizer import BOS_ID, EOS_ID, PAD_ID

__all__ = ["clean", "source_pieces", "target_text"]

# RE2's [[:cntrl:]\s] (the graph's pattern) is ASCII: controls 0-31, DEL, and space.
_SPACES = re.compile(r"[\x00-\x20\x7f]+")


def clean(text: str | bytes, max_input_chars: int) -> str:
    """The cleaned line the tokenizer sees."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    return _SPACES.sub(" ", text).strip(" ")[:max_input_chars]


def source_pieces(processor, text, max_input_chars: int, max_source_length: int) -> list[str]:
    """SentencePiece pieces of a cleaned, cut line: at most ``max_source_length - 1`` (EOS is
    added by the engine); ``[]`` for empty input. ``processor``: a ``SentencePieceProcessor``."""
    line = clean(text, max_input_chars)
    if not line:
        return []
    ids = processor.encode(line)[: max_source_length - 1]
    return [processor.id_to_piece(i) for i in ids]


def target_text(processor, pieces) -> str:
    """Detokenized target pieces (PAD, BOS and EOS dropped, as the SavedModel's detokenize)."""
    ids = [processor.piece_to_id(p) for p in pieces]
    return processor.decode([i for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID)])
