"""The CTranslate2 export: the engine computes our model, and translates as our SavedModel does.

A tiny model is trained, exported both ways and used through the command line in fresh
processes, as a user types it; the spec itself is checked per token against the Keras model for
every architecture variant the converter handles.
"""

import json
import os
import shutil

import ctranslate2
import keras
import numpy as np
import pytest
import tensorflow as tf
import yaml

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.inference import text as text_io
from keras_transformer.inference.ctranslate2 import CTranslate2Translator, export_ctranslate2
from keras_transformer.inference.formats import load_translator
from keras_transformer.inference.saved_model import export_translator
from keras_transformer.text.tokenizer import BOS_ID, EOS_ID, PAD_ID

SENTENCES = 100
# Scores of either engine against the Keras model's own log-probabilities of the same tokens
# (_reference_scores): one float32 model computed by other kernels. A score sums a log-probability
# per token scored (then divides by the GNMT penalty, >= 1), so its rounding grows with the
# length: measured at most 1.5e-6 per token (1.5e-5 per score) over every line of the tests below
# (three models, both engines); the tolerance is 3 times that. The PAD and BOS mass the two
# engines treat differently (1.6e-3 to 4e-2 per score on these models) is far outside it.
SCORE_TOLERANCE_PER_TOKEN = 5e-6
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


def _score_tolerance(scored):
    """The score tolerance of each translation of ``scored`` (the ids each score counts)."""
    return SCORE_TOLERANCE_PER_TOKEN * np.array([len(ids) for ids in scored])


def _reference_scores(model, sources, targets, alpha=0.6):
    """The independent reference for scores: ``(full, without_pad_bos)``, the GNMT scores
    ``log P(y) / ((5 + |y|) / 6) ** alpha`` of every target (ids, EOS last when the translation
    ended) given its source (ids, no EOS), from one teacher-forced pass of the Keras ``model``
    (float64 log-softmax of its float32 logits). ``full``: P over the whole vocabulary, as our
    search takes it (it masks PAD and BOS after the softmax); ``without_pad_bos``: P over the
    vocabulary less PAD and BOS, as CTranslate2 takes it (``suppress_sequences`` removes them
    from its softmax)."""
    source = np.zeros((len(sources), max(map(len, sources)) + 1), np.int32)
    decoder_input = np.zeros((len(targets), max(map(len, targets))), np.int32)
    for row, (ids, target) in enumerate(zip(sources, targets, strict=True)):
        source[row, : len(ids) + 1] = list(ids) + [EOS_ID]
        decoder_input[row, : len(target)] = [BOS_ID] + list(target[:-1])
    logits = model({"source": source, "target": decoder_input})
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float64)).numpy()
    full, without_pad_bos = [], []
    for row, target in enumerate(targets):
        steps = log_probs[row, : len(target)]
        picked = steps[np.arange(len(target)), target]
        kept = np.log1p(-np.exp(steps[:, PAD_ID]) - np.exp(steps[:, BOS_ID]))
        penalty = ((5.0 + len(target)) / 6.0) ** alpha
        full.append(picked.sum() / penalty)
        without_pad_bos.append((picked - kept).sum() / penalty)
    return np.array(full), np.array(without_pad_bos)


@pytest.fixture(scope="module")
def folders(tmp_path_factory, run_cli, data_dir, multi30k_dir, multi30k_tokenizer):
    """A trained tiny run, its CTranslate2 and SavedModel exports (greedy), 100 test sentences
    (``test.en``) and the SavedModel's translation of them by the CLI as typed (``saved.de``:
    ``translate --model saved --input test.en --output saved.de``), the reference of the
    greedy and ensemble tests.

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
    _ok(run_cli("translate", "--model", root / "saved", "--input", root / "test.en", "--output",
                root / "saved.de", cwd=root))  # fmt: skip
    return root


# The model of ``folders`` (60 steps) says "Ein Mann in einem Büchen." to all 100 test lines with
# beam 4, with CTranslate2's own length penalty as with ours, and attends so evenly that 890 of
# the 900 alignment arg-maxes are ties within 1e-5: no test of beam search or alignments. A model
# trained to copy its source reads it: other text per line, its own length (EOS learned), and
# one source subword clearly attended per target subword.
COPY_WIDTH = 32  # source subwords + EOS of the training pairs, and of the lines translated
COPY_STEPS = 300


def _copier(multi30k_dir, tokenizer, pairs, epochs):
    """A tiny model trained here to copy the first ``pairs`` Multi30k English sentences of under
    32 subwords, ``epochs`` times over, 64 pairs a step."""
    keras.utils.set_random_seed(0)
    lines = (multi30k_dir / "train.en").read_text(encoding="utf-8").splitlines()
    copied = [ids for ids in map(tokenizer.encode, lines) if len(ids) < COPY_WIDTH][:pairs]
    source, target, labels = (np.zeros((len(copied), COPY_WIDTH), np.int32) for _ in range(3))
    for row, ids in enumerate(copied):
        source[row, : len(ids) + 1] = ids + [EOS_ID]
        target[row, : len(ids) + 1] = [BOS_ID] + ids
        labels[row, : len(ids) + 1] = ids + [EOS_ID]
    model = build_transformer(TransformerConfig.tiny(tokenizer.vocab_size, dropout=0.0))
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD_ID),
    )
    inputs = {"source": source, "target": target}
    model.fit(inputs, labels, batch_size=64, epochs=epochs, verbose=0)
    return model


@pytest.fixture(scope="module")
def copy_model(multi30k_dir, multi30k_tokenizer):
    """A rough copier (300 steps, 20-30 s): beam search and greedy search differ on about half
    the lines, and the length penalty decides some of them."""
    return _copier(multi30k_dir, multi30k_tokenizer, 64 * COPY_STEPS, epochs=1)


@pytest.fixture(scope="module")
def confident_copy_model(multi30k_dir, multi30k_tokenizer):
    """A copier trained 3 times over every pair of under 32 subwords (about 1,370 steps, two
    minutes): few near-ties between its best two tokens, as in a model trained to use."""
    return _copier(multi30k_dir, multi30k_tokenizer, 10**6, epochs=3)


@pytest.fixture(scope="module")
def copy_lines(multi30k_dir, multi30k_tokenizer):
    """The Multi30k test lines of under 32 subwords (876 of the 1,000), the lengths the copy
    model was trained on."""
    lines = (multi30k_dir / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if len(multi30k_tokenizer.encode(line)) < COPY_WIDTH]


def test_greedy_translations_equal_the_saved_model_through_the_cli(folders, run_cli):
    """``translate --output`` of the CTranslate2 folder writes the SavedModel's translations
    (``saved.de``, by the same command in ``folders``); with batches of 8 on two workers both
    engines print them too."""
    outputs = {"saved": (folders / "saved.de").read_text(encoding="utf-8").splitlines()}
    out = folders / "ct2.de"
    _ok(run_cli("translate", "--model", folders / "ct2", "--input", folders / "test.en",
                "--output", out, cwd=folders))  # fmt: skip
    outputs["ct2"] = out.read_text(encoding="utf-8").splitlines()
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
    """Greedy tokens of both engines are equal for a model whose output depends on its input
    (random weights: a 60-step model says nearly the same for every input), and their scores
    are the Keras model's log-probabilities of the tokens kept, also where a translation is cut
    at its own limit inside a batch decoded to a longer one's."""
    from keras_transformer.inference.saved_model import Translator

    keras.utils.set_random_seed(9)
    model = build_transformer(TransformerConfig.tiny(multi30k_tokenizer.vocab_size, dropout=0.0))
    ours = Translator(model, multi30k_tokenizer, beam_size=1, max_extra_length=8)
    export_ctranslate2(model, multi30k_tokenizer, tmp_path / "m", beam_size=1, max_extra_length=8)
    lines = (multi30k_dir / "val.en").read_text(encoding="utf-8").splitlines()[:40]
    sources = ours.tokenize(tf.constant(lines))["tokens"]
    served = ours.translate_tokens(sources)
    found = CTranslate2Translator(tmp_path / "m").translate_hypotheses(lines)
    targets = [[int(i) for i in row if i] for row in served["tokens"].numpy()]
    want = [[multi30k_tokenizer.id_to_piece(i) for i in row] for row in targets]
    assert [h[0].tokens for h in found] == want
    assert len({tuple(t) for t in want}) > 10  # outputs depend on the input
    # Most run to their own limit (source + EOS + 8) inside a batch decoded to the longest
    # one's: the scores are those of the tokens kept (EOS only where the translation ended).
    sources = [[int(i) for i in row if i] for row in sources.numpy()]
    limits = [len(ids) + 9 for ids in sources]
    assert len(set(limits)) > 5 and sum(len(t) == n for t, n in zip(targets, limits)) > 5
    scored = [t + [EOS_ID] if len(t) < n else t for t, n in zip(targets, limits)]
    full, without_pad_bos = _reference_scores(model, sources, scored)
    tolerance = _score_tolerance(scored)
    np.testing.assert_array_less(np.abs(served["score"] - full), tolerance)
    # CTranslate2's own scores leave PAD and BOS out of the softmax; a translation it cut at the
    # sentence's limit is rescored by score_batch, which keeps them: either reference, exactly.
    engine = np.array([h[0].score for h in found])
    nearest = np.minimum(np.abs(engine - full), np.abs(engine - without_pad_bos))
    np.testing.assert_array_less(nearest, tolerance)
    assert np.all(np.abs(full - without_pad_bos) > 10 * tolerance)


def test_max_batch_tokens_bounds_the_engine_batches(folders):
    """The folder's ``max_batch_tokens`` (the export's, 4096 by default) cuts a request into
    batches of at most that many source ids (rows x longest + EOS), as the SavedModel's
    sub-batches; the translations are those of one unbounded request (50 lines)."""
    lines = (folders / "test.en").read_text(encoding="utf-8").splitlines()[:50]
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
    assert len(shapes) > len(lines) * 20 // 60 and sum(rows for rows, _ in shapes) == len(lines)


def test_tokens_and_scores_equal_the_saved_model(folders):
    """Greedy tokens of the two exports are equal, and each engine's score is the Keras
    model's GNMT-normalized log-probability of them to float32 rounding: over the whole
    vocabulary for the SavedModel, without PAD and BOS for CTranslate2."""
    lines = (folders / "test.en").read_text(encoding="utf-8").splitlines()[:32]
    ct2 = CTranslate2Translator(folders / "ct2")
    saved = load_translator(folders / "saved").loaded
    found = ct2.translate_hypotheses(lines)
    sources = saved.signatures["tokenize"](text=tf.constant(lines))["tokens"]
    served = saved.signatures["translate_tokens"](tokens=sources)
    sources = [[int(i) for i in row if i] for row in sources.numpy()]
    targets = [[int(i) for i in row if i] for row in served["tokens"].numpy()]
    for hypotheses, ids in zip(found, targets, strict=True):
        assert hypotheses[0].tokens == [ct2.processor.id_to_piece(i) for i in ids]
    # A line that ended before its limit (source + EOS + 50) has its EOS scored; one cut at the
    # limit is scored on its tokens alone. Which lines end depends on the 60-step model, so on
    # the CPU's rounding: all 32 on an Intel Xeon, none on an AMD EPYC (it loops).
    model = keras.models.load_model(folders / "run" / "model.keras", compile=False)
    cut = np.array([len(t) == len(s) + 51 for s, t in zip(sources, targets)])
    assert all(len(t) <= len(s) + 51 for s, t in zip(sources, targets))
    scored = [t if was_cut else t + [EOS_ID] for t, was_cut in zip(targets, cut)]
    full, without_pad_bos = _reference_scores(model, sources, scored)
    tolerance = _score_tolerance(scored)
    np.testing.assert_array_less(np.abs(served["score"] - full), tolerance)
    # CTranslate2 removes PAD and BOS from the softmax; we mask them after it: the scores differ
    # by the probability mass the model gives those two ids. A translation cut at its limit
    # inside a batch decoded to a longer one's is rescored by score_batch, which keeps them:
    # either reference for a cut line, exactly.
    engine = np.array([h[0].score for h in found])
    off = np.abs(engine - without_pad_bos)
    off[cut] = np.minimum(off[cut], np.abs(engine - full)[cut])
    np.testing.assert_array_less(off, tolerance)
    # The two references lie apart by several tolerances (so matching one is telling): 4-8x on
    # the AMD EPYC's looping model, 30x on the Intel Xeon's.
    assert np.all(without_pad_bos - full > 4 * tolerance)
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


def test_beam_search_text_alignments_and_scores_equal_the_saved_model(
    copy_model, copy_lines, multi30k_tokenizer, tmp_path
):
    """Beam 4 (the exports' default): the CTranslate2 folder's best translation of every line
    is the SavedModel's text, also where the engine's own length penalty would pick another
    (the GNMT re-ranking decides), with the same (source, target) alignment pairs, both the
    arg-max of the Keras model's attention, and scores that are the Keras model's
    log-probabilities of it."""
    from keras_transformer.model import attention_weights

    tok = multi30k_tokenizer
    export_translator(copy_model, tok, tmp_path / "saved", beam_size=4)
    export_ctranslate2(copy_model, tok, tmp_path / "ct2", beam_size=4)
    saved, ct2 = load_translator(tmp_path / "saved"), load_translator(tmp_path / "ct2")
    assert saved.settings["beam_size"] == ct2.settings["beam_size"] == 4
    # The first 64 lines, and every line where CTranslate2's own length penalty (len ** alpha)
    # picks another of its hypotheses than the GNMT re-ranking (2% of the lines).
    gnmt = ct2.translate(copy_lines)  # the folder's beam size
    own_penalty = ct2.translate(copy_lines, length_penalty="ctranslate2")
    decided = [i for i, (a, b) in enumerate(zip(gnmt, own_penalty)) if a != b]
    assert len(decided) >= 5, decided  # 19 measured; none: the GNMT re-ranking is not applied
    lines = [copy_lines[i] for i in sorted(set(range(64)) | set(decided))]
    ours = saved.translate_aligned(lines)
    found = ct2.translate_aligned(lines)
    sources = [tok.encode(line) for line in lines]
    # inference/ctranslate2.py: beam search is exact when no hypothesis reaches its limit
    # (source + EOS + 50); this model ends every line well before.
    assert all(len(h.tokens) + 1 < len(s) + 51 for h, s in zip(found, sources))
    assert len({h.text for h in found}) > 0.9 * len(lines)  # outputs depend on the input
    greedy = ct2.translate(lines, beam_size=1)
    assert sum(g != h.text for g, h in zip(greedy, found)) > len(lines) // 4  # the beam matters

    assert [h.text for h in found] == [h.text for h in ours]
    pairs = [[(s, t) for t, s in enumerate(h.alignment)] for h in found]
    assert [[(s, t) for t, s in enumerate(h.alignment)] for h in ours] == pairs
    # The reference: the last layer's encoder-decoder attention, heads averaged, source EOS
    # left out. Its best and second-best source subwords are 1.2e-5 or more apart on these
    # lines (measured), the engine's attention within 1e-6 of it (the test of the first token's
    # attention above): no arg-max here is a coin toss.
    targets = [[tok.piece_to_id(p) for p in h.tokens] for h in found]
    width = max(map(len, targets)) + 1
    source_ids = [s + [EOS_ID] + [PAD_ID] * (COPY_WIDTH - len(s) - 1) for s in sources]
    target_ids = [[BOS_ID] + t + [PAD_ID] * (width - len(t) - 1) for t in targets]
    cross = attention_weights(copy_model, source_ids, target_ids)["decoder_cross"][-1]
    cross = cross.mean(axis=1)  # [line, target subword, source subword]
    want = [
        [(int(np.argmax(cross[row, t, : len(s)])), t) for t in range(len(target))]
        for row, (s, target) in enumerate(zip(sources, targets))
    ]
    assert pairs == want

    scored = [t + [EOS_ID] for t in targets]
    full, without_pad_bos = _reference_scores(copy_model, sources, scored)
    tolerance = _score_tolerance(scored)
    np.testing.assert_array_less(np.abs([h.score for h in ours] - full), tolerance)
    np.testing.assert_array_less(np.abs([h.score for h in found] - without_pad_bos), tolerance)


def test_int8_and_int16_exports_translate_as_float32(
    confident_copy_model, copy_lines, multi30k_tokenizer, tmp_path
):
    """Quantized exports (``quantization`` int16 and int8; this engine build takes both) store
    their weights in 2 and 1 bytes, load, and translate as the float32 export: the same greedy
    tokens on at least 90% of the lines, and per-token log-probabilities near float32's."""
    found, sizes, errors = {}, {}, {}
    for quantization in ("float32", "int16", "int8"):
        folder = tmp_path / quantization
        export_ctranslate2(
            confident_copy_model,
            multi30k_tokenizer,
            folder,
            beam_size=1,
            quantization=quantization,
        )
        translator = CTranslate2Translator(folder)
        found[quantization] = [h[0].tokens for h in translator.translate_hypotheses(copy_lines)]
        sizes[quantization] = os.path.getsize(folder / "model.bin")
        s = translator.settings
        sources = [
            text_io.source_pieces(translator.processor, line, s["max_input_chars"], 10**6)
            for line in copy_lines
        ]
        # this engine's log-probabilities of the float32 export's tokens, step by step
        scored = translator.engine.score_batch(sources, found["float32"])
        errors[quantization] = np.concatenate([r.log_probs for r in scored])
    for quantization in ("int16", "int8"):
        errors[quantization] = np.abs(errors[quantization] - errors["float32"])
    # not 1/2 and 1/4: the layer norms, biases and positional tables stay float32
    # (measured 0.55 and 0.34 of float32's size)
    assert 0.45 * sizes["float32"] < sizes["int16"] < 0.6 * sizes["float32"]
    assert sizes["int8"] < 0.4 * sizes["float32"]
    same = {
        q: sum(a == b for a, b in zip(found[q], found["float32"], strict=True))
        for q in ("int16", "int8")
    }
    # Measured on the 876 lines with this model: int16 99.5% of the lines, int8 95.7%. On the
    # rough 300-step copier int8 kept only 78% (85% after one pass over every pair): where its
    # line departed, float32 rated its own token above int8's by 0.12 nats (median), near-ties
    # that rounding tips (int8 moves a log-probability by 0.005, median; int16 by 0.0007).
    assert same["int16"] >= 0.9 * len(copy_lines), same
    assert same["int8"] >= 0.9 * len(copy_lines), same
    assert np.median(errors["int16"]) < 0.003 and np.median(errors["int8"]) < 0.02


def _repeated_ngrams(tokens, n):
    grams = [tuple(tokens[j : j + n]) for j in range(len(tokens) - n + 1)]
    return len(grams) - len(set(grams))


def test_the_repetition_guard_in_both_engines(copy_model, copy_lines, multi30k_tokenizer, tmp_path):
    """``no_repeat_ngram_size=2`` (greedy): copying a line that repeats a subword bigram is
    refused in both engines alike (the same text), no output repeats a bigram, and the lines
    whose unguarded copy repeats none are translated as without the guard."""
    tok = multi30k_tokenizer
    outputs = {}
    for guard in (0, 2):
        export_translator(copy_model, tok, tmp_path / f"saved{guard}", beam_size=1,
                          no_repeat_ngram_size=guard)  # fmt: skip
        export_ctranslate2(copy_model, tok, tmp_path / f"ct2{guard}", beam_size=1,
                           no_repeat_ngram_size=guard)  # fmt: skip
        ct2 = CTranslate2Translator(tmp_path / f"ct2{guard}")
        assert ct2.settings["no_repeat_ngram_size"] == guard
        found = [h[0] for h in ct2.translate_hypotheses(copy_lines)]
        saved = load_translator(tmp_path / f"saved{guard}").translate(copy_lines)
        assert [h.text for h in found] == saved
        outputs[guard] = found
    repeating = [i for i, h in enumerate(outputs[0]) if _repeated_ngrams(h.tokens, 2)]
    assert len(repeating) >= 20, len(repeating)  # the copier repeats what its lines repeat
    assert all(_repeated_ngrams(h.tokens, 2) == 0 for h in outputs[2])
    unchanged = [i for i in range(len(copy_lines)) if i not in repeating]
    assert [outputs[2][i].text for i in unchanged] == [outputs[0][i].text for i in unchanged]


def test_sampling_through_the_cli_repeats_with_its_seed_in_fresh_processes(
    folders, run_cli, tmp_path
):
    """``translate --sampling-topk 0 --seed S --n-best 2`` prints 2 samples per line; a fresh
    process prints the rows of the same command run in this process (``cli.main``), and in
    process the SavedModel samples the same at another batch size, CTranslate2 other samples
    with another seed;
    an export made to sample (``export --sampling-topk``) samples without flags; sampling with
    a beam, and alignments of samples, are refused with one line and exit status 2."""
    from keras_transformer import cli

    def command(name, seed, batch):
        args = ["--model", folders / name, "--input", folders / "test.en", "--n-best", "2"]
        return [*args, "--sampling-topk", "0", "--seed", str(seed), "--batch-size", str(batch)]

    def in_process(name, seed, batch):
        out = tmp_path / f"{name}_{seed}_{batch}.txt"
        argv = ["translate", *command(name, seed, batch), "--output", out]
        assert cli.main(list(map(str, argv))) == 0
        return out.read_text(encoding="utf-8").splitlines()

    texts = lambda rows: [row.split(" ||| ")[2] for row in rows]  # noqa: E731
    outputs = {}
    for name in ("saved", "ct2"):
        rows = _ok(run_cli("translate", *command(name, 3, 64), cwd=folders)).stdout.splitlines()
        assert len(rows) == 2 * SENTENCES and rows[1].startswith("0 ||| ")
        assert len(set(texts(rows))) > SENTENCES  # samples differ between lines and draws
        assert in_process(name, 3, 64) == rows  # the same seed: the same rows and scores
        outputs[name] = rows
    # CTranslate2 repeats a sample only at the same batch size: no batch of 7 for it; the
    # SavedModel's samples depend on the seed in test_sampling.py (in process)
    assert texts(in_process("saved", 3, 7)) == texts(outputs["saved"])
    assert in_process("ct2", 4, 64) != outputs["ct2"]

    _ok(run_cli("export", "--run", folders / "run", "--output", folders / "sampler", "--seed",
                "3", "--beam-size", "1", "--sampling-topk", "0", cwd=folders))  # fmt: skip
    plain = run_cli("translate", "--model", folders / "sampler", "--input", folders / "test.en",
                    cwd=folders)  # fmt: skip
    _ok(plain)
    flagged = outputs["saved"][0::2]  # each line's first sample, seed 3
    assert plain.stdout.splitlines() == texts(flagged)
    refused = run_cli("translate", "--model", folders / "ct2", "--input", folders / "test.en",
                      "--beam-size", "4", "--sampling-topk", "5", cwd=folders)  # fmt: skip
    assert refused.returncode == 2 and "sampling takes beam size 1" in refused.stderr
    aligned = run_cli("translate", "--model", folders / "sampler", "--input", folders / "test.en",
                      "--alignments", cwd=folders)  # fmt: skip
    assert aligned.returncode == 2 and "--alignments come from the beam search" in aligned.stderr


def test_an_ensemble_export_through_the_cli(folders, run_cli):
    """``export --run R --ensemble R``: one SavedModel holding both members (here the same
    run twice, so it translates as R alone), ``translator.json`` saying 2 models; the
    CTranslate2 format refuses an ensemble with one line and exit status 2."""
    run, lines = folders / "run", folders / "test.en"
    _ok(run_cli("export", "--run", run, "--ensemble", run, "--output", folders / "pair",
                "--beam-size", "1", cwd=folders))  # fmt: skip
    record = json.loads((folders / "pair" / "assets.extra" / "translator.json").read_text())
    assert record["translator"]["models"] == 2
    single = (folders / "saved.de").read_text(encoding="utf-8")  # R's export, by the CLI
    pair = run_cli("translate", "--model", folders / "pair", "--input", lines, cwd=folders)
    _ok(pair)
    assert pair.stdout == single and len(pair.stdout.splitlines()) == SENTENCES
    refused = run_cli("export", "--run", run, "--ensemble", run, "--format", "ctranslate2",
                      "--output", folders / "no", cwd=folders)  # fmt: skip
    assert refused.returncode == 2 and "does not take --ensemble" in refused.stderr
    assert not (folders / "no").exists()
    # the same ensemble from the run config's export section (export.ensemble: [RUN])
    configured = folders / "run_with_ensemble"
    shutil.copytree(run, configured, ignore=shutil.ignore_patterns("checkpoints"))
    config = yaml.safe_load((configured / "config.yaml").read_text())
    config["export"]["ensemble"] = [str(run)]
    (configured / "config.yaml").write_text(yaml.safe_dump(config))
    _ok(run_cli("export", "--run", configured, "--output", folders / "pair_from_config",
                "--beam-size", "1", cwd=folders))  # fmt: skip
    record = json.loads(
        (folders / "pair_from_config" / "assets.extra" / "translator.json").read_text()
    )
    assert record["translator"]["models"] == 2 and "ensemble" not in record["translator"]
