"""Attention weights for plots (causal mask, normalisation) and the matplotlib helpers."""

import matplotlib  # the dev extra
import numpy as np
import pytest

matplotlib.use("Agg")

from keras_transformer import TransformerConfig, build_transformer  # noqa: E402
from keras_transformer.model import attention_weights  # noqa: E402
from keras_transformer.text.tokenizer import BOS_ID, EOS_ID  # noqa: E402
from tests.conftest import TEST_VOCAB_SIZE  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _assert_png(path, min_bytes=5000):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert len(data) > min_bytes, f"{path} is suspiciously small ({len(data)} bytes)"


@pytest.fixture(scope="module")
def tiny_model():
    # Dropout everywhere (attention dropout too): the weights used for plots are inference weights.
    return build_transformer(
        TransformerConfig.tiny(vocab_size=TEST_VOCAB_SIZE, attention_dropout=0.1)
    )


def test_decoder_self_attention_is_causal_and_rows_sum_to_one(tiny_model):
    rng = np.random.default_rng(0)
    source = rng.integers(4, TEST_VOCAB_SIZE, size=(3, 9)).astype("int32")
    source[:, -1] = EOS_ID
    source[1, 5:] = 0  # padding: a shorter sentence
    source[1, 4] = EOS_ID
    target = rng.integers(4, TEST_VOCAB_SIZE, size=(3, 7)).astype("int32")
    target[:, 0] = BOS_ID

    weights = attention_weights(tiny_model, source, target)
    layers, heads = 2, 4
    assert weights["encoder"].shape == (layers, 3, heads, 9, 9)
    assert weights["decoder_self"].shape == (layers, 3, heads, 7, 7)
    assert weights["decoder_cross"].shape == (layers, 3, heads, 7, 9)

    decoder_self = weights["decoder_self"]
    above_diagonal = np.triu(np.ones((7, 7), bool), k=1)
    assert np.all(decoder_self[..., above_diagonal] == 0.0), "future positions got attention"
    # ... and the diagonal and below are real weights, not masked away as well.
    assert np.all(decoder_self[..., ~above_diagonal] > 0.0)
    assert np.all(decoder_self[..., 0, 0] == pytest.approx(1.0, abs=1e-6))
    for name in ("encoder", "decoder_self", "decoder_cross"):
        np.testing.assert_allclose(weights[name].sum(axis=-1), 1.0, atol=1e-5, err_msg=name)
        assert np.all(weights[name] >= 0.0)
    # Source padding is never attended to, by the encoder or by the decoder.
    assert np.all(weights["encoder"][:, 1, :, :, 5:] == 0.0)
    assert np.all(weights["decoder_cross"][:, 1, :, :, 5:] == 0.0)


def test_token_labels_strip_the_word_start_mark(multi30k_tokenizer):
    from keras_transformer.plotting import token_labels

    ids = multi30k_tokenizer.encode("Two dogs play in the snow.")
    labels = token_labels(multi30k_tokenizer, [BOS_ID, *ids, EOS_ID, 0])
    assert labels[0] == "<s>" and labels[-2] == "</s>" and labels[-1] == ""
    pieces = [multi30k_tokenizer.id_to_piece(i) for i in ids]
    assert pieces[0] == "\u2581Two" and labels[1] == "Two"
    assert labels[1:-2] == [piece.lstrip("\u2581") or piece for piece in pieces]


def test_plot_sentence_attention_shows_tokens_and_the_causal_mask(
    tiny_model, multi30k_tokenizer, tmp_path
):
    from keras_transformer import plotting

    output = tmp_path / "figures" / "attention.png"
    fig = plotting.plot_sentence_attention(
        tiny_model,
        multi30k_tokenizer,
        "A dog runs on the beach.",
        layer=-1,
        output=output,
        translation="Ein Hund rennt am Strand.",
    )
    _assert_png(output)
    encoder_fig, self_fig, cross_fig = fig.subfigs
    source_tokens = plotting.token_labels(
        multi30k_tokenizer, multi30k_tokenizer.encode("A dog runs on the beach.")
    )
    first = encoder_fig.axes[0]
    assert [t.get_text() for t in first.get_yticklabels()] == source_tokens + ["</s>"]
    assert [t.get_text() for t in first.get_xticklabels()] == source_tokens + ["</s>"]
    self_axes = [ax for ax in self_fig.axes if ax.images]
    assert len(self_axes) == 4  # one heat map per head
    labels = [t.get_text() for t in self_axes[0].get_xticklabels()]
    assert labels[0] == "<s>" and "Hund" in labels
    for ax in self_axes:  # the image drawn is causal: exactly 0 above the diagonal
        image = np.asarray(ax.images[0].get_array())
        assert np.all(image[np.triu_indices_from(image, k=1)] == 0.0)
        np.testing.assert_allclose(image.sum(axis=-1), 1.0, atol=1e-5)
    cross = [ax for ax in cross_fig.axes if ax.images][0]
    assert [t.get_text() for t in cross.get_yticklabels()][-1] == "</s>"
    with pytest.raises(ValueError, match="layer=5"):
        plotting.plot_sentence_attention(
            tiny_model, multi30k_tokenizer, "A dog.", layer=5, translation="Ein Hund."
        )


def test_plot_sentence_attention_decodes_when_no_translation_given(tiny_model, multi30k_tokenizer):
    from keras_transformer import plotting

    result = plotting.attention_for_sentence(
        tiny_model, multi30k_tokenizer, "A man sleeps.", max_extra_length=4
    )
    source_length = len(result["source_ids"])
    assert 1 <= len(result["output_ids"]) <= source_length + 4
    assert result["decoder_input_ids"][0] == BOS_ID
    assert result["decoder_self"].shape[-1] == len(result["decoder_input_tokens"])
    assert isinstance(result["translation"], str)


def test_cli_attention_writes_a_png(tiny_model, multi30k_tokenizer, tmp_path):
    from keras_transformer import cli
    from keras_transformer.training import TrainingConfig

    run = tmp_path / "run"
    run.mkdir()
    config = TrainingConfig(model=TransformerConfig.tiny(vocab_size=TEST_VOCAB_SIZE).to_dict())
    config.save(run / "config.yaml")
    tiny_model.save(run / "model.keras")
    multi30k_tokenizer.save(run / "tokenizer")
    output = tmp_path / "cli.png"
    cli.main(
        [
            "attention",
            "--run",
            str(run),
            "--text",
            "Two dogs play.",
            "--layer",
            "0",
            "--output",
            str(output),
        ]
    )
    _assert_png(output)


def test_plot_positional_encoding_and_attention_heads_write_pngs(tmp_path):
    from keras_transformer import plotting

    plotting.plot_positional_encoding(50, 64, output=tmp_path / "pe.png")
    _assert_png(tmp_path / "pe.png")
    weights = np.random.default_rng(0).dirichlet(np.ones(5), size=(2, 3))  # [heads, 3, 5]
    fig = plotting.plot_attention_heads(
        weights, list("abc"), list("vwxyz"), title="two heads", output=tmp_path / "heads.png"
    )
    assert len([ax for ax in fig.axes if ax.images]) == 2
    _assert_png(tmp_path / "heads.png", min_bytes=2000)
    with pytest.raises(ValueError, match="labels"):
        plotting.plot_attention_heads(weights, list("ab"), list("vwxyz"))


def test_plot_training_history_from_dict_and_csv(tmp_path):
    from keras_transformer import plotting

    history = {
        "loss": [9.0, 7.5, 6.0, 5.2],
        "val_loss": [8.0, 7.0, 6.1, 5.9],
        "learning_rate": [1e-4, 2e-4, 3e-4, 2.5e-4],
        "masked_accuracy": [0.1, 0.2, 0.3, 0.35],
    }
    fig = plotting.plot_training_history(history, output=tmp_path / "dict.png", steps_per_epoch=10)
    _assert_png(tmp_path / "dict.png")
    assert list(fig.axes[0].get_lines()[0].get_xdata()) == [10, 20, 30, 40]
    # With the schedule, the learning rate of every step: warmup to step 10, then 1/sqrt(step).
    from keras_transformer.schedules import TransformerSchedule

    fig = plotting.plot_training_history(
        history, steps_per_epoch=10, schedule=TransformerSchedule(32, warmup_steps=10)
    )
    every_step = fig.axes[1].get_lines()[0]
    assert list(every_step.get_xdata()) == list(range(1, 41))
    rates = np.asarray(every_step.get_ydata())
    assert np.argmax(rates) == 9 and rates[9] == pytest.approx(32**-0.5 * 10**-0.5, rel=1e-5)
    csv_path = tmp_path / "history.csv"
    csv_path.write_text("epoch,learning_rate,loss,val_loss\n0,0.0001,9.0,8.5\n1,0.0002,7.0,7.1\n")
    plotting.plot_training_history(csv_path, output=tmp_path / "csv.png")
    _assert_png(tmp_path / "csv.png")
    with pytest.raises(ValueError, match="step axis"):
        plotting.plot_training_history(csv_path, schedule=lambda step: 1e-3)
    with pytest.raises(ValueError, match="neither"):
        plotting.plot_training_history({"accuracy": [0.1]})
