"""The CTranslate2 export: the engine computes our model, and translates as our SavedModel does.

A tiny model is trained, exported both ways and used through the command line in fresh
processes, as a user types it; the spec itself is checked per token against the Keras model for
every architecture variant the converter handles.
"""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.inference import text as text_io
from keras_transformer.inference.ctranslate2 import CTranslate2Translator, export_ctranslate2
from keras_transformer.inference.formats import load_translator
from keras_transformer.text.tokenizer import BOS_ID, EOS_ID

pytest.importorskip("ctranslate2")

SENTENCES = 100
TRAIN = [
    "model.preset=tiny",
    "model.num_layers=2",
    "model.d_model=64",
    "model.d_ff=128",
    "model.dropout=0.0",
    "data.vocab_size=1000",
    "data.tokens_per_batch=2048",
    "training.max_steps=60",
    "training.steps_per_epoch=60",
    "training.warmup_steps=30",
    "training.max_minutes=null",
    "training.mixed_precision=null",
    "training.xla_loss=false",
]


def _ok(result):
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def folders(tmp_path_factory, run_cli, data_dir, multi30k_dir, multi30k_tokenizer):
    """A trained tiny run, its CTranslate2 and SavedModel exports (greedy), 100 test sentences.

    (``multi30k_tokenizer`` first: building a SubwordTokenizer after a SavedModel with
    SentencePiece ops was loaded in the same process fails with TF 2.21.)"""
    root = tmp_path_factory.mktemp("ct2")
    env = {"KT_DATA_DIR": str(data_dir)}
    config = os.path.join(os.path.dirname(__file__), "..", "configs", "quickstart.yaml")
    _ok(run_cli("train", "--config", config, "--run", root / "run", *TRAIN, cwd=root, env=env))
    for name, extra in (("ct2", ["--format", "ctranslate2"]), ("saved", [])):
        _ok(
            run_cli(
                "export",
                "--run",
                root / "run",
                "--output",
                root / name,
                "--beam-size",
                "1",
                *extra,
                cwd=root,
            )
        )
    lines = (multi30k_dir / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    (root / "test.en").write_text("\n".join(lines[:SENTENCES]) + "\n", encoding="utf-8")
    return root


def test_greedy_translations_equal_the_saved_model_through_the_cli(folders, run_cli):
    outputs = {}
    for name in ("ct2", "saved"):
        out = folders / f"{name}.de"
        _ok(
            run_cli(
                "translate",
                "--model",
                folders / name,
                "--input",
                folders / "test.en",
                "--output",
                out,
                cwd=folders,
            )
        )
        outputs[name] = out.read_text(encoding="utf-8").splitlines()
    assert len(outputs["ct2"]) == SENTENCES
    assert sum(bool(line) for line in outputs["ct2"]) == SENTENCES
    assert outputs["ct2"] == outputs["saved"]
    # batches of 8, two at a time on one thread each: the same lines, in order
    for name in ("ct2", "saved"):
        options = ["--batch-size", "8", "--threads", "1", "--parallel", "2"]
        args = ["translate", "--model", folders / name, "--input", folders / "test.en", *options]
        assert _ok(run_cli(*args, cwd=folders)).stdout.splitlines() == outputs["saved"], name


def test_greedy_tokens_of_a_model_that_reads_its_input_equal(
    multi30k_tokenizer, multi30k_dir, tmp_path
):
    """A 60-step model says nearly the same for every input; random weights do not."""
    from keras_transformer.inference.saved_model import Translator

    keras.utils.set_random_seed(9)
    model = build_transformer(TransformerConfig.tiny(multi30k_tokenizer.vocab_size, dropout=0.0))
    ours = Translator(model, multi30k_tokenizer, beam_size=1, max_extra_length=8)
    export_ctranslate2(model, multi30k_tokenizer, tmp_path / "m", beam_size=1, max_extra_length=8)
    lines = (multi30k_dir / "val.en").read_text(encoding="utf-8").splitlines()[:40]
    served = ours.translate_tokens(ours.tokenize(tf.constant(lines))["tokens"])
    found = CTranslate2Translator(tmp_path / "m").translate_hypotheses(lines)
    want = [[multi30k_tokenizer.id_to_piece(int(i)) for i in row if i] for row in served["tokens"]]
    assert [h[0].tokens for h in found] == want
    assert len({tuple(t) for t in want}) > 10  # outputs depend on the input
    # Most run to their own limit (source + EOS + 8) inside a batch decoded to the longest
    # one's: the scores are those of the tokens kept.
    limits = (ours.tokenize(tf.constant(lines))["tokens"].numpy() != 0).sum(axis=1) + 9
    assert len(set(limits)) > 5 and sum(len(t) == n for t, n in zip(want, limits)) > 5
    np.testing.assert_allclose([h[0].score for h in found], served["score"], rtol=1e-3)


def test_max_batch_tokens_bounds_the_engine_batches(folders):
    """The folder's ``max_batch_tokens`` (the export's, 4096 by default) cuts a request into
    batches of at most that many source ids (rows x longest + EOS), as the SavedModel's
    sub-batches; the translations are those of one unbounded request."""
    lines = (folders / "test.en").read_text(encoding="utf-8").splitlines()
    translator = CTranslate2Translator(folders / "ct2")
    assert translator.settings["max_batch_tokens"] == 4096
    translator.settings["max_batch_tokens"] = None
    unbounded = translator.translate(lines)
    engine, shapes = translator.engine, []

    class Recorder:  # the engine, with the shape of every batch it is given
        def __getattr__(self, name):
            return getattr(engine, name)

        def translate_batch(self, batch, **options):
            shapes.append((len(batch), max(len(pieces) for pieces in batch) + 1))
            return engine.translate_batch(batch, **options)

    translator.engine = Recorder()
    translator.settings["max_batch_tokens"] = 60
    assert translator.translate(lines) == unbounded
    assert all(rows * width <= 60 or rows == 1 for rows, width in shapes)
    assert len(shapes) > SENTENCES * 20 // 60 and sum(rows for rows, _ in shapes) == SENTENCES


def test_tokens_and_scores_equal_the_saved_model(folders):
    lines = (folders / "test.en").read_text(encoding="utf-8").splitlines()[:32]
    ct2 = CTranslate2Translator(folders / "ct2")
    saved = load_translator(folders / "saved").loaded
    found = ct2.translate_hypotheses(lines)
    served = saved.signatures["translate_tokens"](
        tokens=saved.signatures["tokenize"](text=tf.constant(lines))["tokens"]
    )
    for hypotheses, ids, score in zip(found, served["tokens"].numpy(), served["score"].numpy()):
        ours = [ct2.processor.id_to_piece(int(i)) for i in ids if i]
        assert hypotheses[0].tokens == ours
        # CTranslate2 removes PAD and BOS from the softmax; we mask them after it: the scores
        # differ by the probability mass a trained model gives those two ids.
        assert abs(hypotheses[0].score - score) < 0.02 * abs(score) + 1e-3
    assert (
        json.loads((folders / "ct2" / "translator.json").read_text())["translator"]["beam_size"]
        == 1
    )


def test_input_cleaning_gives_the_saved_models_source_ids(folders):
    from tests.test_export import BAD_INPUTS

    ct2 = CTranslate2Translator(folders / "ct2")
    saved = load_translator(folders / "saved").loaded
    s = ct2.settings
    texts = BAD_INPUTS + ["  A  dog\u00a0runs.\r\n", "x" * (s["max_input_chars"] + 50)]
    ours = saved.signatures["tokenize"](text=tf.constant(texts))["tokens"].numpy()
    for text, ids in zip(texts, ours):
        pieces = text_io.source_pieces(ct2.processor, text, s["max_input_chars"], 10**6)
        assert [ct2.processor.piece_to_id(p) for p in pieces] == [int(i) for i in ids if i]
    cut = text_io.source_pieces(ct2.processor, BAD_INPUTS[2], s["max_input_chars"], 24)
    assert len(cut) == 23  # EOS makes the 24th


@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"norm": "pre"},
        {"positional": "learned"},
        {"shared_embeddings": False, "layer_norm_epsilon": 1e-3},
    ],
    ids=["post-norm", "pre-norm", "learned-positions", "separate-embeddings"],
)
def test_engine_log_probs_equal_the_keras_model(
    variant, multi30k_tokenizer, multi30k_dir, tmp_path
):
    import ctranslate2

    keras.utils.set_random_seed(5)
    config = TransformerConfig.tiny(multi30k_tokenizer.vocab_size, dropout=0.0, **variant)
    model = build_transformer(config)
    export_ctranslate2(model, multi30k_tokenizer, tmp_path / "m")
    engine = ctranslate2.Translator(str(tmp_path / "m"))
    tok = multi30k_tokenizer
    pairs = zip(
        (multi30k_dir / "val.en").read_text(encoding="utf-8").splitlines()[:4],
        (multi30k_dir / "val.de").read_text(encoding="utf-8").splitlines()[:4],
    )
    for source, target in pairs:
        source_ids, target_ids = tok.encode(source) + [EOS_ID], tok.encode(target) + [EOS_ID]
        scored = engine.score_batch(
            [[tok.id_to_piece(i) for i in source_ids[:-1]]],
            [[tok.id_to_piece(i) for i in target_ids[:-1]]],
        )[0]
        logits = model(
            {"source": np.array([source_ids]), "target": np.array([[BOS_ID] + target_ids[:-1]])}
        )
        log_probs = tf.nn.log_softmax(logits[0]).numpy()
        want = log_probs[np.arange(len(target_ids)), target_ids]
        np.testing.assert_allclose(scored.log_probs, want, atol=2e-4)


def test_n_best_and_alignments(folders):
    from keras_transformer.model import attention_weights

    lines = (folders / "test.en").read_text(encoding="utf-8").splitlines()[:8]
    ct2 = CTranslate2Translator(folders / "ct2")
    best = ct2.translate_hypotheses(lines, 1, beam_size=4)
    nbest = ct2.translate_hypotheses(lines, 3, beam_size=4, align=True)
    for one, three in zip(best, nbest):
        assert len(three) == 3 and three[0].text == one[0].text
        scores = [h.score for h in three]
        assert scores == sorted(scores, reverse=True)
    model = keras.models.load_model(folders / "run" / "model.keras", compile=False)
    s = ct2.settings
    greedy = ct2.translate_aligned(lines, beam_size=1)
    for line, top in zip(lines * 2, [h[0] for h in nbest] + greedy):
        source = text_io.source_pieces(ct2.processor, line, s["max_input_chars"], 64)
        source_ids = [ct2.processor.piece_to_id(p) for p in source] + [EOS_ID]
        target_ids = [BOS_ID] + [ct2.processor.piece_to_id(p) for p in top.tokens]
        cross = attention_weights(model, [source_ids], [target_ids])["decoder_cross"]
        ours = cross[-1, 0].mean(axis=0)[: len(top.tokens), :-1]  # last layer, heads averaged
        assert len(top.alignment) == len(top.tokens)
        # A short-trained model attends almost uniformly: the engine's choice must be a maximum
        # of our attention up to float noise (the arg-max itself can flip between near-ties).
        chosen = ours[np.arange(len(top.tokens)), top.alignment]
        np.testing.assert_array_less(ours.max(axis=-1) - chosen, 1e-5)


def test_beam_search_attention_of_the_engine_is_wrong_at_the_first_token(folders):
    """Why beam-search alignments come from a forced greedy pass (CTranslate2 4.8.5)."""
    from keras_transformer.model import attention_weights

    ct2 = CTranslate2Translator(folders / "ct2")
    model = keras.models.load_model(folders / "run" / "model.keras", compile=False)
    lines = (folders / "test.en").read_text(encoding="utf-8").splitlines()[:4]
    sources = [text_io.source_pieces(ct2.processor, line, 10**4, 64) for line in lines]
    errors = {}
    for beam in (1, 4):
        # A bounded length: a 60-step model may repeat a piece past the exported positional
        # table (source + 50 positions) without emitting EOS.
        results = ct2.engine.translate_batch(
            sources, beam_size=beam, return_attention=True, max_decoding_length=48
        )
        for source, result in zip(sources, results):
            tokens, engine = list(result.hypotheses[0]), np.array(result.attention[0])
            ids = [[ct2.processor.piece_to_id(p) for p in source] + [EOS_ID]]
            target = [[BOS_ID] + [ct2.processor.piece_to_id(p) for p in tokens]]
            cross = attention_weights(model, ids, target)["decoder_cross"][-1, 0].mean(axis=0)
            diff = np.abs(engine[: len(tokens)] - cross[: len(tokens), :-1]).max(axis=-1)
            errors.setdefault(beam, []).append(diff)
    assert max(d.max() for d in errors[1]) < 1e-6  # greedy: exact, EOS column left out
    assert max(d[1:].max() for d in errors[4]) < 1e-6
    if max(d[0] for d in errors[4]) < 1e-6:
        pytest.fail("CTranslate2 fixed its first-step beam attention: drop _realign")


def test_n_best_through_the_cli(folders, run_cli):
    result = _ok(
        run_cli(
            "translate",
            "--model",
            folders / "ct2",
            "--input",
            folders / "test.en",
            "--beam-size",
            "4",
            "--n-best",
            "4",
            "--batch-size",
            "16",
            cwd=folders,
        )
    )
    rows = [line.split(" ||| ") for line in result.stdout.splitlines()]
    assert [int(r[0]) for r in rows] == [i for i in range(SENTENCES) for _ in range(4)]
    for i in range(0, len(rows), 4):
        scores = [float(r[1]) for r in rows[i : i + 4]]
        assert scores == sorted(scores, reverse=True)


def test_alignments_of_both_engines_agree_through_the_cli(folders, run_cli):
    outputs = {}
    for name in ("ct2", "saved"):
        result = _ok(
            run_cli(
                "translate",
                "--model",
                folders / name,
                "--input",
                folders / "test.en",
                "--alignments",
                cwd=folders,
            )
        )
        outputs[name] = result.stdout.splitlines()
    assert len(outputs["ct2"]) == SENTENCES
    for line in outputs["ct2"]:
        text, pairs = line.split(" ||| ")
        targets = [int(p.split("-")[1]) for p in pairs.split()]
        assert targets == list(range(len(targets))) and len(targets) >= len(text.split())
    for ct2_line, saved_line in zip(outputs["ct2"], outputs["saved"]):
        ct2_text, ct2_pairs = ct2_line.split(" ||| ")
        saved_text, saved_pairs = saved_line.split(" ||| ")
        assert ct2_text == saved_text and len(ct2_pairs.split()) == len(saved_pairs.split())
