"""SubwordTokenizer: reserved ids, round trips on real corpora, graph use, SavedModel reloads."""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.text.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    SubwordTokenizer,
    with_eos,
)
from tests.conftest import TEST_VOCAB_SIZE


def _lines(path, limit=None):
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    return lines[:limit] if limit else lines


def _round_trip_rate(tokenizer, lines):
    ids = tokenizer.tokenize(tf.constant(lines))
    back = [text.decode("utf-8") for text in tokenizer.detokenize(ids).numpy()]
    for line, text in zip(lines, back, strict=True):
        # The only change allowed: runs of spaces and trailing spaces collapse (SentencePiece's
        # remove_extra_whitespaces); case, punctuation and every character are kept.
        assert re.sub(" +", " ", line).strip(" ") == text, (line, text)
    return sum(a == b for a, b in zip(lines, back, strict=True)) / len(lines)


def test_reserved_ids_and_vocab(multi30k_tokenizer):
    tok = multi30k_tokenizer
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert [tok.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tok.vocab_size == TEST_VOCAB_SIZE
    assert int(tok.get_vocab_size()) == TEST_VOCAB_SIZE
    ids = tok.tokenize(tf.constant(["A dog runs.", ""]))
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    assert ids.row_lengths().numpy()[1] == 0
    values = ids.flat_values.numpy()
    assert not np.isin(values, [PAD_ID, BOS_ID, EOS_ID]).any()  # no BOS/EOS added
    assert ids[0].numpy().tolist() == tok.encode("A dog runs.")


@pytest.mark.parametrize(
    "folder, stems",
    [
        ("multi30k", ["val", "test_2016_flickr"]),
        ("wmt14_en_de", ["newstest2014"]),
    ],
)
def test_round_trip_rate(multi30k_tokenizer, data_dir, folder, stems):
    for stem in stems:
        for lang in ("en", "de"):
            lines = _lines(data_dir / folder / f"{stem}.{lang}")
            rate = _round_trip_rate(multi30k_tokenizer, lines)
            assert rate >= 0.99, f"{folder}/{stem}.{lang}: round trip {rate:.4f}"


def test_round_trip_train_sample_keeps_case_and_punctuation(multi30k_tokenizer, multi30k_dir):
    lines = _lines(multi30k_dir / "train.de", 5000)
    assert _round_trip_rate(multi30k_tokenizer, lines) >= 0.99
    text = 'Zwei Männer, ein Hund & "Käse": ÄÖÜ ß? 100%!'
    ids = multi30k_tokenizer.tokenize(tf.constant([text]))
    assert multi30k_tokenizer.detokenize(ids).numpy()[0].decode("utf-8") == text


def test_detokenize_dense_padded_stops_at_eos(multi30k_tokenizer):
    tok = multi30k_tokenizer
    texts = ["A man in an orange hat.", "Zwei Hunde spielen im Schnee."]
    rows = [tok.encode(t) for t in texts]
    width = max(len(r) for r in rows) + 5
    dense = np.zeros([2, width], np.int32)
    dense[0, : len(rows[0]) + 4] = [BOS_ID] + rows[0] + [EOS_ID] + rows[1][:2]  # junk after EOS
    dense[1, : len(rows[1]) + 1] = rows[1] + [EOS_ID]
    expected = [t.encode("utf-8") for t in texts]
    assert tok.detokenize(dense).numpy().tolist() == expected
    assert tok.detokenize(tf.constant(dense, tf.int64)).numpy().tolist() == expected
    assert tok.detokenize(tf.ragged.constant(rows, dtype=tf.int32)).numpy().tolist() == expected
    assert tok.detokenize(dense[1]).numpy() == expected[1]  # 1-D -> scalar
    assert tok.decode(dense[0].tolist()) == texts[0]


def test_detokenize_keeps_the_batch_size_of_empty_inputs(multi30k_tokenizer):
    tok = multi30k_tokenizer
    assert tok.detokenize(tf.zeros([0, 0], tf.int32)).shape == (0,)
    assert tok.detokenize(tf.zeros([3, 0], tf.int32)).numpy().tolist() == [b"", b"", b""]


def test_pieces_for_attention_labels(multi30k_tokenizer):
    tok = multi30k_tokenizer
    ids = tok.tokenize(tf.constant(["A little girl."]))[0]
    pieces = [p.decode("utf-8") for p in tok.pieces(ids).numpy()]
    assert "".join(pieces).replace("\u2581", " ").strip() == "A little girl."
    assert tok.pieces(tf.constant([BOS_ID, EOS_ID])).numpy().tolist() == [b"<s>", b"</s>"]
    assert tok.piece_to_id("</s>") == EOS_ID


def test_training_is_deterministic_and_accepts_texts_and_gz(multi30k_dir, tmp_path):
    import gzip

    lines = _lines(multi30k_dir / "val.en") + _lines(multi30k_dir / "val.de")
    first = SubwordTokenizer.train(lines, vocab_size=800, output_dir=tmp_path / "a")
    second = SubwordTokenizer.train(lines, vocab_size=800)
    assert first.model_proto == second.model_proto
    assert os.path.isfile(first.model_path) and first.model_path.endswith("sentencepiece.model")
    assert (tmp_path / "a" / "sentencepiece.vocab").is_file()
    packed = tmp_path / "val.txt.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    from_file = SubwordTokenizer.train([packed], vocab_size=800)
    assert from_file.model_proto == first.model_proto
    sampled = SubwordTokenizer.train(lines, vocab_size=500, max_sentences=500, seed=3)
    assert sampled.vocab_size == 500
    assert SubwordTokenizer.load(first.model_path).model_proto == first.model_proto


def test_rejects_models_with_other_reserved_ids(tmp_path, multi30k_dir):
    import io

    import sentencepiece as spm

    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_lines(multi30k_dir / "val.en")),
        model_writer=buffer,
        vocab_size=300,
        minloglevel=2,
    )
    with pytest.raises(ValueError, match="reserved ids"):
        SubwordTokenizer(buffer.getvalue())
    with pytest.raises(FileNotFoundError, match="nowhere.model"):
        SubwordTokenizer(tmp_path / "nowhere.model")


def test_inside_dataset_map(multi30k_tokenizer, multi30k_dir):
    tok = multi30k_tokenizer
    lines = _lines(multi30k_dir / "val.en", 10)
    ds = tf.data.Dataset.from_tensor_slices(lines).batch(4).map(tok.tokenize).unbatch()
    rows = [row.numpy().tolist() for row in ds]
    assert rows == [tok.encode(line) for line in lines]
    texts = (
        tf.data.Dataset.from_tensor_slices(lines)
        .batch(4)
        .map(lambda s: tok.detokenize(tok.tokenize(s)))
        .unbatch()
    )
    assert [t.decode("utf-8") for t in texts.as_numpy_iterator()] == lines


class _Exporter(tf.Module):
    """What the serving export does: hold the tokenizer, call it in a string-signature function."""

    def __init__(self, tokenizer):
        super().__init__()
        self.tokenizer = tokenizer

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(self, text):
        ids = self.tokenizer.tokenize(text)
        dense = tf.concat([tf.fill([ids.nrows(), 1], BOS_ID), ids.to_tensor()], axis=1)
        return {
            "text": self.tokenizer.detokenize(dense),
            "length": tf.cast(ids.row_lengths(), tf.int32),
            "first_piece": self.tokenizer.pieces(ids[:, :1].flat_values),
        }


def test_embedded_in_exported_module(multi30k_tokenizer, tmp_path):
    exporter = _Exporter(multi30k_tokenizer)
    out = exporter.round_trip(tf.constant(["A dog.", "Ein Hund."]))
    assert out["text"].numpy().tolist() == [b"A dog.", b"Ein Hund."]
    tf.saved_model.save(exporter, str(tmp_path / "exported"))
    loaded = tf.saved_model.load(str(tmp_path / "exported"))
    again = loaded.round_trip(tf.constant(["A dog.", "Ein Hund."]))
    assert again["text"].numpy().tolist() == [b"A dog.", b"Ein Hund."]
    np.testing.assert_array_equal(again["length"], out["length"])
    # The tokenizer can be recovered from a bigger SavedModel that embeds it.
    recovered = SubwordTokenizer.load(tmp_path / "exported")
    assert recovered.model_proto == multi30k_tokenizer.model_proto


def test_save_and_load_in_a_fresh_process(multi30k_tokenizer, tmp_path):
    saved = multi30k_tokenizer.save(tmp_path / "tok")
    moved = tmp_path / "elsewhere" / "tok"
    shutil.move(saved, moved)
    # In-process: the full object back.
    again = SubwordTokenizer.load(moved)
    assert again.model_proto == multi30k_tokenizer.model_proto
    # A fresh interpreter that never imports keras_transformer: the folder is self-contained.
    script = textwrap.dedent(f"""
        import tensorflow as tf, tensorflow_text  # registers the SentencePiece ops
        tok = tf.saved_model.load({str(moved)!r})
        ids = tok.tokenize(tf.constant(["Two dogs play in the snow."]))
        dense = tf.pad(ids.to_tensor(), [[0, 0], [0, 3]])
        print(tok.detokenize(ids).numpy()[0].decode(), "|",
              tok.detokenize(dense).numpy()[0].decode(), "|", int(tok.get_vocab_size()), "|",
              ids.flat_values.numpy().tolist())
    """)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    text, dense_text, vocab, ids = [p.strip() for p in result.stdout.strip().split("|")]
    assert text == dense_text == "Two dogs play in the snow."
    assert vocab == str(TEST_VOCAB_SIZE)
    assert ids == str(multi30k_tokenizer.encode("Two dogs play in the snow."))


def test_survives_set_random_seed(multi30k_tokenizer):
    """tf.random.set_seed clears the eager kernel cache (tensorflow/text#570); ids must survive."""
    import keras

    before = multi30k_tokenizer.tokenize(tf.constant(["A dog runs."]))
    tf.random.set_seed(7)
    keras.utils.set_random_seed(8)
    after = multi30k_tokenizer.tokenize(tf.constant(["A dog runs."]))
    assert after.to_list() == before.to_list()
    assert multi30k_tokenizer.detokenize(after).numpy().tolist() == [b"A dog runs."]
    other = SubwordTokenizer.load(multi30k_tokenizer.model_path)  # same model, shared resource
    tf.random.set_seed(9)
    assert other.tokenize(tf.constant(["A dog runs."])).to_list() == before.to_list()


def test_with_eos_cuts_to_max_length_minus_one_then_eos():
    rows = [[17, 5, 9], [23], []]
    assert with_eos(rows, max_length=3) == [[17, 5, EOS_ID], [23, EOS_ID], [EOS_ID]]
    assert with_eos(rows) == [[17, 5, 9, EOS_ID], [23, EOS_ID], [EOS_ID]]
    assert with_eos([np.array([4, 5, 6], np.int32)], 2) == [[4, EOS_ID]]
    ragged = tf.ragged.constant(rows, dtype=tf.int32)
    assert with_eos(ragged, 3).to_list() == with_eos(rows, max_length=3)
    assert with_eos(ragged).dtype == tf.int32
    # In graph mode, inside tf.data, with a tensor length.
    dataset = tf.data.Dataset.from_tensor_slices(tf.ragged.constant(rows, dtype=tf.int64))
    cut = dataset.ragged_batch(3).map(lambda ids: with_eos(ids, tf.constant(2, tf.int64)))
    assert next(iter(cut)).to_list() == [[17, EOS_ID], [23, EOS_ID], [EOS_ID]]
    with pytest.raises(ValueError, match="no room for EOS"):
        with_eos(rows, max_length=0)
