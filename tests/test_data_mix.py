"""``data.mix``: more training corpora drawn in with weights, optionally tagged (the
back-translation workflow: real pairs plus synthetic ones)."""

import itertools
import re

import pytest

from keras_transformer.training.inputs import _mixed_pairs
from keras_transformer.training.run_config import DataSettings, TrainingConfig


@pytest.fixture
def corpora(tmp_path):
    for name, count in (("main", 100), ("extra", 50)):
        for side in ("src", "tgt"):
            lines = [f"{name} {side} {i}" for i in range(count)]
            (tmp_path / f"{name}.{side}").write_text("\n".join(lines) + "\n")
    return tmp_path


def _draws(data, count):
    pairs = itertools.islice(_mixed_pairs(data).as_numpy_iterator(), count)
    return [(s.decode(), t.decode()) for s, t in pairs]


def test_pairs_are_drawn_in_proportion_to_size_times_weight_and_tagged(corpora):
    """50 extra pairs at weight 2 against 100 main pairs: half the draws are extra pairs (within
    0.03 of 4,000 draws), each extra source after its tag, main sources untouched, every pair
    kept whole; the same seed gives the same stream."""
    data = DataSettings(
        train_source=str(corpora / "main.src"),
        train_target=str(corpora / "main.tgt"),
        mix=[{"source": str(corpora / "extra.src"), "target": str(corpora / "extra.tgt"),
              "weight": 2, "tag": "<BT>"}],
    )  # fmt: skip
    draws = _draws(data, 4000)
    extra = [(s, t) for s, t in draws if t.startswith("extra")]
    assert abs(len(extra) / len(draws) - 0.5) < 0.03
    assert all(
        s.startswith("<BT> extra src ") and s[5:].replace("src", "tgt") == t for s, t in extra
    )
    main = [(s, t) for s, t in draws if t.startswith("main")]
    assert all(s.replace("src", "tgt") == t for s, t in main)
    assert len({t for _, t in extra}) == 50  # every extra pair drawn
    assert _draws(data, 500) == draws[:500]


@pytest.mark.parametrize(
    "mix, words",
    [
        ([{"source": "a"}], "data.mix[0]"),
        ([{"source": "a", "target": "b", "weight": 0}], "data.mix[0].weight=0"),
        ([{"source": "a", "target": "b", "weigth": 2}], "unknown key(s) ['weigth']"),
        ([{"source": "a", "target": "b", "tag": " "}], "data.mix[0].tag"),
    ],
)
def test_a_bad_mix_is_refused_naming_the_entry(tmp_path, mix, words):
    path = tmp_path / "c.yaml"
    import yaml

    path.write_text(yaml.safe_dump({"data": {"mix": mix}}))
    with pytest.raises(ValueError, match=re.escape(words)):
        TrainingConfig.load(path)


def test_the_back_translation_workflow_through_the_cli(tmp_path, multi30k_dir, multi30k_tokenizer):
    """As a user types it, at a tiny scale: train a de->en model, export it, sample English for
    monolingual German (``translate --sampling-topk``), then train en->de on the real pairs plus
    the tagged synthetic ones (``data.mix``); the run records the mix and finishes."""
    import yaml

    from tests.conftest import _run_cli, small_multi30k

    data = small_multi30k(multi30k_dir, tmp_path, multi30k_tokenizer, 400, 20)
    german = (multi30k_dir / "train.de").read_text(encoding="utf-8").splitlines()[400:600]
    (tmp_path / "mono.de").write_text("\n".join(german) + "\n", encoding="utf-8")
    # the plain loss: XLA's compile of each batch shape costs more than these steps (the two
    # losses train alike: test_training_settings.py)
    training = {"max_steps": 6, "steps_per_epoch": 3, "warmup_steps": 2, "xla_loss": False}
    model = {"preset": "tiny", "d_model": 32, "d_ff": 64}
    reverse = {**data, "train_source": data["train_target"], "train_target": data["train_source"],
               "validation_source": data["validation_target"],
               "validation_target": data["validation_source"]}  # fmt: skip
    cli = lambda *a: _run_cli(*a, cwd=tmp_path, timeout=400)  # noqa: E731

    def ok(result):
        assert result.returncode == 0, result.stderr[-3000:]
        return result

    config = tmp_path / "reverse.yaml"
    config.write_text(yaml.safe_dump({"model": model, "data": reverse, "training": training}))
    ok(cli("train", "--config", config, "--run", tmp_path / "de_en"))
    ok(cli("export", "--run", tmp_path / "de_en", "--output", tmp_path / "de_en_model"))
    ok(cli("translate", "--model", tmp_path / "de_en_model", "--input", tmp_path / "mono.de",
           "--output", tmp_path / "bt.en", "--sampling-topk", "10", "--seed", "1"))  # fmt: skip
    synthetic = (tmp_path / "bt.en").read_text(encoding="utf-8").splitlines()
    assert len(synthetic) == 200

    mix = [{"source": str(tmp_path / "bt.en"), "target": str(tmp_path / "mono.de"),
            "weight": 1, "tag": "<BT>"}]  # fmt: skip
    config = tmp_path / "forward.yaml"
    config.write_text(
        yaml.safe_dump({"model": model, "data": {**data, "mix": mix}, "training": training})
    )
    ok(cli("train", "--config", config, "--run", tmp_path / "en_de"))
    recorded = TrainingConfig.load(tmp_path / "en_de" / "config.yaml")
    assert recorded.data.mix == mix
    assert (tmp_path / "en_de" / "model.keras").is_file()


def _mixture(data, tokenizer, skip=0, reads=None):
    """``train``'s stream of a mixture (segments of 5 batches here, 2,000 by default)."""
    import tensorflow as tf

    from keras_transformer.data import segments

    def sample_pairs(seed):
        pairs = _mixed_pairs(data, seed)
        if reads is None:
            return pairs

        def counted(source, target):
            with tf.control_dependencies([reads.assign_add(1)]):
                return tf.identity(source), tf.identity(target)

        return pairs.map(counted)

    return segments.mixture_stream(
        sample_pairs, tokenizer, tokens_per_batch=64, max_sentence_length=16, seed=3,
        shuffle_buffer=50, skip=skip, batches_per_segment=5,
    )  # fmt: skip


def _labels(dataset, count):
    return [labels.numpy() for _, labels in dataset.take(count)]


def test_a_resumed_mixture_starts_in_its_segment_with_the_batches_from_b(corpora, toy_tokenizer):
    """A ``data.mix`` stream started at batch b gives the batches the stream from 0 gives from
    b, reading no segment before b's; its first segment is the stream of make_dataset (as
    before segments), later ones draw afresh."""
    import numpy as np
    import tensorflow as tf

    from keras_transformer import data as kt_data

    data = DataSettings(
        train_source=str(corpora / "main.src"),
        train_target=str(corpora / "main.tgt"),
        shuffle_seed=3,
        mix=[{"source": str(corpora / "extra.src"), "target": str(corpora / "extra.tgt")}],
    )
    whole = _labels(_mixture(data, toy_tokenizer), 40)
    for skip in (2, 5, 13, 37):
        started = _labels(_mixture(data, toy_tokenizer, skip), 3)
        for expected, got in zip(whole[skip : skip + 3], started, strict=True):
            np.testing.assert_array_equal(expected, got, err_msg=f"skip {skip}")
    plain = kt_data.make_dataset(
        _mixed_pairs(data), toy_tokenizer, 64, 16, shuffle_buffer=50, seed=3, repeat=True
    )
    plain = _labels(plain, 10)
    for expected, got in zip(plain[:5], whole[:5], strict=True):
        np.testing.assert_array_equal(expected, got)
    assert any(a.shape != b.shape or (a != b).any() for a, b in zip(plain[5:], whole[5:10]))
    reads = {}
    for name, skip, count in (("two segments from 0", 0, 10), ("segment 20", 101, 2)):
        reads[name] = tf.Variable(0, dtype=tf.int64)
        _labels(_mixture(data, toy_tokenizer, skip, reads[name]), count)
    # a segment and the pipeline's read-ahead (whole tokenizing batches, more under load); a
    # replay of the 20 segments before reads about 10 times the first two segments' pairs
    assert int(reads["segment 20"].numpy()) < 4 * int(reads["two segments from 0"].numpy())
