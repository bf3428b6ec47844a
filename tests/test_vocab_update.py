"""Fine-tuning with a new vocabulary (``train --init-from RUN --tokenizer NEW``): the rows of
the pieces both vocabularies hold move with them, new pieces start from their spelling."""

import re

import keras
import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.text.tokenizer import BOS_ID, EOS_ID, SubwordTokenizer
from keras_transformer.training.vocab_update import transfer_weights, vocabulary_map

NEW_WORDS = "quokka wombat platypus echidna kookaburra dingo wallaby numbat bilby".split()


@pytest.fixture(scope="module")
def vocabularies(toy_tokenizer, tmp_path_factory):
    """The toy tokenizer (400 pieces) and a new one (420) trained on toy sentences that also
    hold words the old vocabulary never saw."""
    from tests.conftest import toy_sentences

    lines = toy_sentences(1500, seed=8)
    lines = [f"{line} {NEW_WORDS[i % len(NEW_WORDS)]}" for i, line in enumerate(lines)]
    new = SubwordTokenizer.train(lines, vocab_size=420)
    return toy_tokenizer.model_proto, new.model_proto, new


def test_new_pieces_are_spelled_by_old_pieces(vocabularies):
    old_proto, new_proto, _ = vocabularies
    old, new = (spm.SentencePieceProcessor(model_proto=p) for p in (old_proto, new_proto))
    mapping = vocabulary_map(old_proto, new_proto)
    assert mapping.added >= 10 and mapping.kept + mapping.added == new.get_piece_size()
    for i, (source, spelled) in enumerate(zip(mapping.old_id, mapping.spelling)):
        piece = new.id_to_piece(i)
        if source >= 0:
            assert old.id_to_piece(int(source)) == piece and spelled == []
        else:
            assert _text([old.id_to_piece(j) for j in spelled]) == piece


def _text(pieces):
    """The text of pieces, byte pieces (``<0x71>``) read as their UTF-8 byte."""
    byte = re.compile(r"<0x([0-9A-F]{2})>")
    return b"".join(
        bytes([int(byte.fullmatch(p)[1], 16)]) if byte.fullmatch(p) else p.encode() for p in pieces
    ).decode("utf-8")


def test_shared_pieces_keep_their_logits_right_after_the_update(vocabularies):
    """A sentence made only of pieces of both vocabularies: the updated model's logits of the
    shared pieces equal the old model's (to float32 rounding), before any training; a new
    piece's embedding row is the mean of its spelling's rows."""
    old_proto, new_proto, _ = vocabularies
    old, new = (spm.SentencePieceProcessor(model_proto=p) for p in (old_proto, new_proto))
    mapping = vocabulary_map(old_proto, new_proto)
    keras.utils.set_random_seed(1)
    old_model = build_transformer(TransformerConfig.tiny(old.get_piece_size(), dropout=0.0))
    new_model = build_transformer(TransformerConfig.tiny(new.get_piece_size(), dropout=0.0))
    moved = transfer_weights(old_model, new_model, mapping)
    assert moved == ["shared_embedding/embeddings"]

    new_ids = new.encode("The dog sees a cat near the house.")
    assert all(mapping.old_id[i] >= 0 for i in new_ids), "the sentence must be shared pieces"
    old_ids = [int(mapping.old_id[i]) for i in new_ids]
    shared = np.flatnonzero(mapping.old_id >= 0)

    def logits(model, ids):
        source = tf.constant([ids + [EOS_ID]])
        target = tf.constant([[BOS_ID] + ids])
        return model({"source": source, "target": target}).numpy()[0]

    np.testing.assert_allclose(
        logits(new_model, new_ids)[:, shared],
        logits(old_model, old_ids)[:, mapping.old_id[shared]],
        atol=1e-5,
    )
    old_rows = old_model.get_layer("shared_embedding").embeddings.numpy()
    new_rows = new_model.get_layer("shared_embedding").embeddings.numpy()
    added = int(np.flatnonzero(mapping.old_id < 0)[0])
    np.testing.assert_allclose(
        new_rows[added], old_rows[mapping.spelling[added]].mean(axis=0), atol=1e-7
    )
