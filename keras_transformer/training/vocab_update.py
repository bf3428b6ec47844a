"""Fine-tuning with a new vocabulary: the embedding rows follow the pieces.

A model fine-tuned on a new domain with its old vocabulary splits the domain's words into many
short pieces. ``train --init-from RUN --tokenizer NEW`` starts instead from RUN's weights with
the vocabulary of NEW (a tokenizer trained on the new data, or on it plus a sample of the old):

* a piece present in both vocabularies keeps its trained row of every vocabulary matrix (the
  shared embedding, which is also the output projection of section 3.4, or each side's);
* a new piece starts at the mean of the old rows of the old pieces that spell it, found by
  longest match from the left (a character the old vocabulary lacks is spelled by its UTF-8
  byte pieces, as SentencePiece's byte fallback writes it). Its embedding then means about what
  the old model read for that text, and its output logit starts near the logits of its parts:
  the model neither ignores it nor prefers it before fine-tuning says so;
* every other weight is copied as is.

So right after the update a sentence made only of shared pieces gets the same logits for the
shared pieces as before (``tests/test_vocab_update.py``). Like OpenNMT-tf's ``update_vocab``,
with a spelling rule for the new rows instead of a random start.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import sentencepiece as spm

__all__ = ["VocabularyMap", "transfer_weights", "vocabulary_map"]

WORD_START = "\u2581"  # SentencePiece's word-boundary mark


@dataclasses.dataclass(frozen=True)
class VocabularyMap:
    """For each id of the new vocabulary, where its row comes from.

    ``old_id[i]``: the old id of the same piece, or -1 for a new piece; ``spelling[i]``: for a
    new piece, the old ids whose rows are averaged (empty for a kept piece)."""

    old_id: np.ndarray
    spelling: list[list[int]]

    @property
    def kept(self) -> int:
        return int((self.old_id >= 0).sum())

    @property
    def added(self) -> int:
        return int((self.old_id < 0).sum())


def _processor(proto: bytes) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_proto=proto)


def _spell(piece: str, old_ids: dict[str, int], unk_id: int) -> list[int]:
    """Old ids spelling ``piece``: longest old piece first, then UTF-8 byte pieces."""
    spelled, start = [], 0
    while start < len(piece):
        for end in range(len(piece), start, -1):
            if piece[start:end] in old_ids:
                spelled.append(old_ids[piece[start:end]])
                start = end
                break
        else:  # no old piece starts with this character: its bytes
            for byte in piece[start].encode("utf-8"):
                spelled.append(old_ids.get(f"<0x{byte:02X}>", unk_id))
            start += 1
    return spelled


def vocabulary_map(old_proto: bytes, new_proto: bytes) -> VocabularyMap:
    """The :class:`VocabularyMap` from the old SentencePiece model to the new one."""
    old, new = _processor(old_proto), _processor(new_proto)
    old_ids = {old.id_to_piece(i): i for i in range(old.get_piece_size())}
    old_id = np.full(new.get_piece_size(), -1, np.int64)
    spelling: list[list[int]] = []
    for i in range(new.get_piece_size()):
        piece = new.id_to_piece(i)
        if piece in old_ids:
            old_id[i] = old_ids[piece]
            spelling.append([])
        else:
            spelling.append(_spell(piece, old_ids, old.unk_id()))
    return VocabularyMap(old_id, spelling)


def new_rows(old_rows: np.ndarray, mapping: VocabularyMap) -> np.ndarray:
    """A vocabulary matrix ``[V_old, d]`` moved to the new vocabulary ``[V_new, d]``."""
    rows = np.empty((len(mapping.old_id), old_rows.shape[1]), old_rows.dtype)
    for i, (source, spelled) in enumerate(zip(mapping.old_id, mapping.spelling, strict=True)):
        rows[i] = old_rows[source] if source >= 0 else old_rows[spelled].mean(axis=0)
    return rows


def transfer_weights(old_model, new_model, mapping: VocabularyMap) -> list[str]:
    """Copies ``old_model``'s weights into ``new_model`` (the same architecture but for the
    vocabulary), moving the rows of every token embedding matrix by ``mapping``; returns the
    paths of the matrices moved."""
    from keras_transformer.layers.embedding import TokenEmbedding

    vocabulary = {
        weight.path
        for layer in new_model.layers
        if isinstance(layer, TokenEmbedding)
        for weight in layer.weights
    }
    old_weights = {weight.path: weight for weight in old_model.weights}
    for weight in new_model.weights:
        if weight.path not in old_weights:
            raise ValueError(f"vocabulary update: the old model has no {weight.path}")
        value = np.asarray(old_weights[weight.path].numpy())
        if weight.path in vocabulary:
            value = new_rows(value, mapping)
        weight.assign(value)
    return sorted(vocabulary)
