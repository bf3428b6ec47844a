"""Input pipeline: corpus readers and their errors, batch contract, bucketing, shards, TFDS."""

import gzip

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import data
from keras_transformer.text import lines as textfile
from keras_transformer.text.tokenizer import BOS_ID, EOS_ID, PAD_ID
from tests.oracles.fixed_batches import make_fixed_batch_dataset, padding_efficiency


def _write(path, text, mode="w"):
    if mode == "wb":
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _batches(dataset, limit=None):
    out = []
    for inputs, labels in dataset.take(limit) if limit else dataset:
        out.append((inputs["source"].numpy(), inputs["target"].numpy(), labels.numpy()))
    return out


# ---------------------------------------------------------------------------- readers


def test_read_parallel_text_real_files(multi30k_dir):
    pairs = data.read_parallel_text(multi30k_dir / "val.en", multi30k_dir / "val.de")
    first = next(iter(pairs))
    assert first[0].numpy().decode() == "A group of men are loading cotton onto a truck"
    german = "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen"
    assert first[1].numpy().decode() == german
    assert sum(1 for _ in pairs) == 1014


def test_line_count_mismatch_names_both_files_and_counts(tmp_path):
    source = _write(tmp_path / "a.en", "one\ntwo\nthree\n")
    target = _write(tmp_path / "a.de", "eins\nzwei\n")
    with pytest.raises(data.DataError) as err:
        data.read_parallel_text(source, target)
    message = str(err.value)
    assert str(source) in message and str(target) in message
    assert "3 lines" in message and "2 lines" in message


def test_non_utf8_names_file_and_line(tmp_path):
    source = _write(tmp_path / "b.en", "fine\nalso fine\nalso fine\n")
    target = _write(tmp_path / "b.de", b"gut\nauch gut\nkaputt \xff\xfe\n", mode="wb")
    with pytest.raises(data.DataError, match=rf"{tmp_path / 'b.de'}, line 3: not valid UTF-8"):
        data.read_parallel_text(source, target)


def test_missing_file_names_the_path(tmp_path):
    present = _write(tmp_path / "c.en", "x\n")
    with pytest.raises(data.MissingDataError, match="c.de"):
        data.read_parallel_text(present, tmp_path / "c.de")
    with pytest.raises(FileNotFoundError):  # also a FileNotFoundError, and a ValueError
        data.read_tsv(tmp_path / "nothing.tsv")


def test_gzip_and_crlf(tmp_path):
    source = tmp_path / "d.en.gz"
    with gzip.open(source, "wb") as handle:
        handle.write(b"A dog.\r\nA cat.\r\n")
    target = _write(tmp_path / "d.de", "Ein Hund.\nEine Katze.")  # no final newline
    pairs = list(data.read_parallel_text(source, target).as_numpy_iterator())
    assert pairs == [(b"A dog.", b"Ein Hund."), (b"A cat.", b"Eine Katze.")]


def test_textfile_reads_strict_utf8_lines(tmp_path):
    plain = _write(tmp_path / "t.txt", "eins\r\nzwei\n\ndrei")
    assert textfile.read_lines(plain) == ["eins", "zwei", "", "drei"]
    assert textfile.read_lines(plain, limit=2) == ["eins", "zwei"]
    packed = tmp_path / "t.txt.gz"
    with gzip.open(packed, "wb") as handle:
        handle.write("Männer\nB\u00fcsche\n".encode())
    assert list(textfile.iter_lines(packed)) == ["Männer", "Büsche"]
    bad = _write(tmp_path / "bad.txt", b"ok\nok\nnot \xff ok\n", mode="wb")
    lines = textfile.iter_lines(bad)
    assert next(lines) == "ok"
    with pytest.raises(data.DataError, match=rf"{tmp_path / 'bad.txt'}, line 3: not valid UTF-8"):
        list(lines)
    with pytest.raises(data.MissingDataError, match="nothing.txt"):
        textfile.read_lines(tmp_path / "nothing.txt")
    assert (
        data.DataError is textfile.DataError and data.MissingDataError is textfile.MissingDataError
    )


def test_read_tsv_columns_and_errors(tmp_path):
    path = _write(tmp_path / "e.tsv", "src\ttgt\tnote\nHello\tHola\tx\nBye\tAdios\ty\n")
    pairs = list(data.read_tsv(path, 1, 0, skip_header=True).as_numpy_iterator())
    assert pairs == [(b"Hola", b"Hello"), (b"Adios", b"Bye")]
    bad = _write(tmp_path / "f.tsv", "Hello\tHola\nonly one column\n")
    with pytest.raises(data.DataError, match=r"f.tsv, line 2: 1 tab-separated column"):
        data.read_tsv(bad)


# ---------------------------------------------------------------------------- TFDS


def _mock_as_dataset(self, split, *args, **kwargs):
    return tf.data.Dataset.from_tensor_slices(
        {"de": ["Ein Hund.", "Zwei Katzen."], "en": ["A dog.", "Two cats."]}
    )


def test_load_tfds_direction_chosen_by_caller(tmp_path):
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(as_dataset_fn=_mock_as_dataset):
        en_de = data.load_tfds("wmt14_translate/de-en", "train", "en", "de", data_dir=tmp_path)
        assert list(en_de.as_numpy_iterator()) == [
            (b"A dog.", b"Ein Hund."),
            (b"Two cats.", b"Zwei Katzen."),
        ]
        de_en = data.load_tfds("wmt14_translate/de-en", "train", "de", "en", data_dir=tmp_path)
        assert next(de_en.as_numpy_iterator()) == (b"Ein Hund.", b"A dog.")
        with pytest.raises(data.DataError, match=r"languages \['de', 'en'\], not 'fr'"):
            data.load_tfds("wmt14_translate/de-en", "train", "fr", "en", data_dir=tmp_path)


def test_load_tfds_not_prepared_names_the_folder(tmp_path):
    with pytest.raises(data.MissingDataError, match=str(tmp_path)):
        data.load_tfds("ted_hrlr_translate/pt_to_en", "validation", "pt", "en", data_dir=tmp_path)


# ---------------------------------------------------------------------------- batches


@pytest.fixture(scope="module")
def val_pairs(multi30k_dir):
    return data.read_parallel_text(multi30k_dir / "val.en", multi30k_dir / "val.de")


def test_batch_contract(val_pairs, multi30k_tokenizer):
    budget = 1024
    dataset = data.make_dataset(val_pairs, multi30k_tokenizer, tokens_per_batch=budget, seed=3)
    spec_inputs, spec_labels = dataset.element_spec
    assert set(spec_inputs) == {"source", "target"}
    for spec in (spec_inputs["source"], spec_inputs["target"], spec_labels):
        assert spec.dtype == tf.int32 and spec.shape.as_list() == [None, None]
    total = 0
    for source, target, labels in _batches(dataset):
        assert source.shape[0] == target.shape[0] == labels.shape[0]
        assert target.shape == labels.shape
        assert source.shape[0] * max(source.shape[1], target.shape[1]) <= budget
        total += source.shape[0]
        assert (target[:, 0] == BOS_ID).all()
        for row in range(labels.shape[0]):
            n = int((labels[row] != PAD_ID).sum())
            assert labels[row, n - 1] == EOS_ID and (labels[row, n:] == PAD_ID).all()
            assert (target[row, 1:n] == labels[row, : n - 1]).all()  # shifted by one
            assert (target[row, n:] == PAD_ID).all()
            m = int((source[row] != PAD_ID).sum())
            assert source[row, m - 1] == EOS_ID and (source[row, m:] == PAD_ID).all()
            assert EOS_ID not in target[row] and BOS_ID not in labels[row]
    assert total == 1014


def test_batches_decode_to_the_corpus(multi30k_tokenizer, multi30k_dir):
    pairs = data.read_parallel_text(
        multi30k_dir / "test_2016_flickr.en", multi30k_dir / "test_2016_flickr.de"
    )
    dataset = data.make_dataset(pairs, multi30k_tokenizer, shuffle=False)
    decoded = set()
    for source, _, labels in _batches(dataset):
        decoded.update(
            zip(
                multi30k_tokenizer.detokenize(source).numpy(),
                multi30k_tokenizer.detokenize(labels).numpy(),
                strict=True,
            )
        )
    assert decoded == set(pairs.as_numpy_iterator())


def test_deterministic_with_seed(val_pairs, multi30k_tokenizer):
    def run(seed):
        return _batches(data.make_dataset(val_pairs, multi30k_tokenizer, 1024, seed=seed), 6)

    first, second, other = run(11), run(11), run(12)
    assert len(first) == len(second) == 6
    for a, b in zip(first, second, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    assert any(
        a[0].shape != b[0].shape or (a[0] != b[0]).any() for a, b in zip(first, other, strict=True)
    )


def test_drops_empty_and_too_long_pairs(tmp_path, multi30k_tokenizer):
    source = _write(tmp_path / "g.en", "A dog.\n\nA very " + "very " * 60 + "long line.\nA cat.\n")
    target = _write(tmp_path / "g.de", "Ein Hund.\nLeer?\nLang.\n   \n")
    pairs = data.read_parallel_text(source, target)
    counts = data.count_pairs(pairs, multi30k_tokenizer, max_sentence_length=32)
    assert counts["total"] == 4 and counts["kept"] == 1
    assert counts["empty"] == 2 and counts["too_long"] == 1
    kept = _batches(
        data.make_dataset(pairs, multi30k_tokenizer, 64, max_sentence_length=32, shuffle=False)
    )
    assert sum(batch[0].shape[0] for batch in kept) == 1
    assert multi30k_tokenizer.detokenize(kept[0][0]).numpy().tolist() == [b"A dog."]


def test_padding_efficiency_on_multi30k_train(multi30k_dir, multi30k_tokenizer):
    pairs = data.read_parallel_text(multi30k_dir / "train.en", multi30k_dir / "train.de")
    ours = padding_efficiency(
        data.make_dataset(pairs, multi30k_tokenizer, tokens_per_batch=4096, seed=1)
    )
    fixed = padding_efficiency(
        make_fixed_batch_dataset(pairs, multi30k_tokenizer, batch_size=64, seed=1)
    )
    print(f"padding efficiency: token-budget buckets {ours:.3f}, fixed 64 {fixed:.3f}")
    assert ours >= 0.85
    assert ours > fixed


def test_fixed_batch_dataset_shapes(val_pairs, multi30k_tokenizer):
    batches = _batches(make_fixed_batch_dataset(val_pairs, multi30k_tokenizer, 64, shuffle=False))
    assert [b[0].shape[0] for b in batches] == [64] * 15 + [54]
    assert all(b[1].shape == b[2].shape for b in batches)


def test_arguments_are_checked(val_pairs, multi30k_tokenizer):
    with pytest.raises(ValueError, match="tokens_per_batch"):
        data.make_dataset(
            val_pairs, multi30k_tokenizer, tokens_per_batch=100, max_sentence_length=256
        )
    with pytest.raises(ValueError, match="tokenizer"):
        data.make_dataset(val_pairs, None)
    assert data.bucket_boundaries(32) == list(range(2, 21)) + [22, 24, 26, 28, 30]


# ---------------------------------------------------------------------------- TFRecord shards


def test_serialized_records_do_not_depend_on_the_process():
    # Map entries in key order ("source" before "target"), not protobuf's per-process order.
    assert data.serialize_pair([17, 5, 9], [23, 8]) == (
        b"\n%\n\x11\n\x06source\x12\x07\x1a\x05\n\x03\x11\x05\t"
        b"\n\x10\n\x06target\x12\x06\x1a\x04\n\x02\x17\x08"
    )
    parsed = data.parse_pairs(tf.constant([data.serialize_pair([17, 5, 9], [23, 8])]))
    assert [p.to_list() for p in parsed] == [[[17, 5, 9]], [[23, 8]]]


def test_tfrecord_write_then_read_feeds_the_same_batches(tmp_path, val_pairs, multi30k_tokenizer):
    ids = list(data.tokenize_pairs(val_pairs, multi30k_tokenizer).as_numpy_iterator())
    for index in range(2):  # pair i in shard i % 2, as pipelines.prepare writes them
        with tf.io.TFRecordWriter(str(tmp_path / f"train-{index:05d}-of-00002.tfrecord")) as w:
            for source, target in ids[index::2]:
                w.write(data.serialize_pair(source.tolist(), target.tolist()))
    (tmp_path / "train-00001-of-00002.tfrecord.tmp-123-ab").write_bytes(b"half-written garbage")
    read = list(data.read_tfrecord_shards(tmp_path, split="train").as_numpy_iterator())
    assert len(read) == len(ids)
    for (s1, t1), (s2, t2) in zip(ids, read, strict=True):
        assert s2.dtype == np.int32
        np.testing.assert_array_equal(s1, s2)
        np.testing.assert_array_equal(t1, t2)
    # Shards and text feed the same batching: same seed, same batches.
    from_text = _batches(data.make_dataset(val_pairs, multi30k_tokenizer, 1024, seed=5))
    from_shards = _batches(
        data.make_dataset(
            data.read_tfrecord_shards(str(tmp_path / "train-*.tfrecord")), None, 1024, seed=5
        )
    )
    assert len(from_text) == len(from_shards)
    for a, b in zip(from_text, from_shards, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    with pytest.raises(data.MissingDataError, match="validation-"):
        data.read_tfrecord_shards(tmp_path, split="validation")
