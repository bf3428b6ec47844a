"""Serving the SavedModel: bounded sub-batches, threads, a killed export, bad command lines."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.inference.saved_model import SETTINGS_FILE, Translator, export_translator
from tests.conftest import fresh_process_environment
from tests.test_cli import _assert_user_error
from tests.test_export import BAD_INPUTS, INVALID_UTF8


@pytest.fixture(scope="module")
def model(multi30k_tokenizer):
    keras.utils.set_random_seed(21)
    return build_transformer(TransformerConfig.tiny(multi30k_tokenizer.vocab_size, dropout=0.0))


@pytest.fixture(scope="module")
def sentences(multi30k_dir):
    return (multi30k_dir / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()[:24]


def _translator(model, tokenizer, beam_size_override=4, **settings):
    return Translator(
        model,
        tokenizer,
        beam_size=beam_size_override,
        max_extra_length=6,
        max_source_length=32,
        **settings,
    )


@pytest.fixture(scope="module")
def whole(model, multi30k_tokenizer):
    """A translator without a token budget (one search of the whole batch); its signatures are
    traced once for the module's tests."""
    return _translator(model, multi30k_tokenizer, max_batch_tokens=None)


@pytest.fixture(scope="module")
def small(model, multi30k_tokenizer):
    """A translator under a budget of 40 source ids: sub-batches of one or two rows."""
    return _translator(model, multi30k_tokenizer, max_batch_tokens=40)


def test_sub_batches_under_a_token_budget_give_the_whole_batchs_outputs(
    model, multi30k_tokenizer, sentences, whole, small
):
    texts = sentences + BAD_INPUTS
    expected = whole.translate(tf.constant(texts))
    got = small.translate(tf.constant(texts))
    np.testing.assert_array_equal(got["translation"].numpy(), expected["translation"].numpy())
    np.testing.assert_allclose(got["score"], expected["score"], atol=1e-4)
    singles = [small.translate(tf.constant([t]))["translation"].numpy()[0] for t in texts[:4]]
    assert singles == list(expected["translation"].numpy()[:4])
    tokens = small.tokenize(tf.constant(sentences))["tokens"]
    np.testing.assert_array_equal(
        small.translate_tokens(tokens)["tokens"], whole.translate_tokens(tokens)["tokens"]
    )
    assert small.translate(tf.zeros([0], tf.string))["translation"].shape == (0,)
    assert _translator(model, multi30k_tokenizer, max_batch_tokens=0).max_batch_tokens is None
    with pytest.raises(ValueError, match="max_batch_tokens=-1"):
        _translator(model, multi30k_tokenizer, max_batch_tokens=-1)


def test_n_best_and_alignments_search_in_the_same_sub_batches(sentences, whole, small):
    """``translate_nbest`` and ``translate_aligned`` go through the token budget as
    ``serving_default`` does: the same outputs with sub-batches of one or two rows."""
    texts = sentences + BAD_INPUTS
    for signature in ("translate_nbest", "translate_aligned"):
        expected = getattr(whole, signature)(tf.constant(texts))
        got = getattr(small, signature)(tf.constant(texts))
        assert set(got) == set(expected)
        for name in got:
            if got[name].dtype.is_floating:
                np.testing.assert_allclose(got[name], expected[name], atol=1e-4)
            else:
                np.testing.assert_array_equal(got[name].numpy(), expected[name].numpy())


# A fresh process: peak anonymous memory (RssAnon, sampled every 2 ms: the heap, not the shared
# libraries' pages, which the kernel may drop and fault in again) of one signature on a request
# of N sentences, over what the process held after the same signature answered 4 (traced).
_PEAK_SCRIPT = """
import sys, threading, time
import keras, tensorflow as tf
from keras_transformer import Translator
from keras_transformer.text.tokenizer import SubwordTokenizer
model_path, tokenizer_path, signature, budget, count = sys.argv[1:6]
model = keras.models.load_model(model_path, compile=False)
translator = Translator(model, SubwordTokenizer.load(tokenizer_path),
                        max_batch_tokens=int(budget) or None, max_source_length=32)
lines = open(tokenizer_path + "/../lines.txt", encoding="utf-8").read().splitlines()
lines = (lines * (int(count) // len(lines) + 1))[: int(count)]
getattr(translator, signature)(tf.constant(lines[:4]))
def anon_kb():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
peak, done = [anon_kb()], threading.Event()
def sample():
    while not done.is_set():
        peak.append(max(peak[-1], anon_kb()))
        time.sleep(0.002)
before = peak[0]
sampler = threading.Thread(target=sample)
sampler.start()
getattr(translator, signature)(tf.constant(lines))
done.set()
sampler.join()
print(max(peak[-1], anon_kb()) - before)
"""


@pytest.mark.slow
def test_a_large_n_best_request_stays_within_serving_defaults_memory(
    model, multi30k_tokenizer, sentences, tmp_path
):
    """Peak memory growth of a 1,500-sentence request (beam 4, an untrained model that runs to
    the length limit): ``translate_nbest`` and ``translate_aligned`` within 1.25x of
    ``serving_default``'s (+ 40 MB) under a budget of 1,024 source ids; without a budget n-best
    takes more than twice that (measured: about 170-210 MB against 670 MB), so the comparison
    catches a signature that skips the budget, as n-best and alignments did before."""
    model.save(tmp_path / "model.keras")
    multi30k_tokenizer.save(tmp_path / "tok")
    (tmp_path / "lines.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")

    def peak_mb(signature, budget):
        args = [tmp_path / "model.keras", tmp_path / "tok", signature, budget, 1500]
        result = subprocess.run(
            [sys.executable, "-c", _PEAK_SCRIPT, *map(str, args)],
            env=fresh_process_environment(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        return int(result.stdout.split()[-1]) / 1024

    served = peak_mb("translate", 1024)
    for signature in ("translate_nbest", "translate_aligned"):
        assert peak_mb(signature, 1024) <= 1.25 * served + 40, signature
    assert peak_mb("translate_nbest", 0) > 2 * (served + 40)


def test_n_best_lists_are_sorted_and_the_first_is_serving_default(
    model, multi30k_tokenizer, sentences, whole
):
    texts = sentences[:8] + ["", "Hi"]
    translator = whole  # beam 4; its signatures traced once for the module
    best = translator.translate(tf.constant(texts))
    nbest = translator.translate_nbest(tf.constant(texts))
    assert nbest["translations"].shape == (len(texts), 4) and nbest["scores"].shape == (10, 4)
    np.testing.assert_array_equal(nbest["translations"][:, 0], best["translation"])
    np.testing.assert_allclose(nbest["scores"][:, 0], best["score"], atol=1e-5)
    scores = nbest["scores"].numpy()
    assert (np.diff(scores, axis=1) <= 0).all()
    for row, text in zip(nbest["translations"].numpy()[:8], texts):
        assert len(set(row)) > 1, text  # other hypotheses, not copies of the best
    assert list(nbest["translations"].numpy()[8]) == [b""] * 4
    greedy = _translator(model, multi30k_tokenizer, beam_size_override=1)
    one = greedy.translate_nbest(tf.constant(texts))
    assert one["translations"].shape == (len(texts), 1)
    np.testing.assert_array_equal(
        one["translations"][:, 0], greedy.translate(tf.constant(texts))["translation"]
    )


def test_alignments_are_the_arg_max_of_the_cross_attention(model, sentences, whole):
    from keras_transformer.model import attention_weights
    from keras_transformer.text.tokenizer import BOS_ID

    translator = whole  # beam 4, max_source_length 32
    out = translator.translate_aligned(tf.constant(sentences[:6]))
    best = translator.translate(tf.constant(sentences[:6]))
    np.testing.assert_array_equal(out["translation"], best["translation"])
    tokens = translator.tokenize(tf.constant(sentences[:6]))["tokens"]
    ids = translator.translate_tokens(tokens)["tokens"].numpy()
    for row, source_row, alignment in zip(ids, tokens.numpy(), out["alignment"].numpy()):
        target = [int(i) for i in row if i]
        source = [int(i) for i in source_row if i][:31] + [3]  # EOS, max_source_length 32
        assert (alignment >= 0).sum() == len(target)  # one source position per target token
        assert alignment[len(target) :].tolist() == [-1] * (len(alignment) - len(target))
        weights = attention_weights(model, [source], [[BOS_ID] + target])["decoder_cross"]
        want = weights[-1, 0].mean(axis=0)[: len(target), :-1].argmax(axis=-1)  # EOS: no subword
        assert alignment[: len(target)].tolist() == want.tolist()
        assert max(alignment) < len(source) - 1


@pytest.fixture(scope="module")
def exported(model, multi30k_tokenizer, tmp_path_factory):
    path = tmp_path_factory.mktemp("serving") / "translator"
    export_translator(
        model, multi30k_tokenizer, path, beam_size=2, max_extra_length=6, max_source_length=32
    )
    return path


@pytest.fixture(scope="module")
def loaded(exported):
    """The export loaded once in this process, for the tests' reference answers."""
    import tensorflow_text  # noqa: F401

    return tf.saved_model.load(str(exported))


def test_eight_threads_get_the_sequential_answers(loaded, sentences):
    serve = loaded.signatures["serving_default"]
    requests = [sentences[i : i + 3] for i in range(0, 12, 3)]
    requests += [[t] for t in BAD_INPUTS] + [[b] for b in INVALID_UTF8] + [[]]
    expected = [serve(text=tf.constant(r, tf.string))["translation"].numpy() for r in requests]
    results, errors = {}, []
    barrier = threading.Barrier(8)

    def worker(thread):
        try:
            barrier.wait()
            for round_ in range(3):
                for j in range(thread % 4, len(requests), 2):
                    out = serve(text=tf.constant(requests[j], tf.string))["translation"].numpy()
                    results[(thread, round_, j)] = out
        except Exception as error:  # noqa: BLE001  (reported below)
            errors.append(repr(error))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(results) > 8 * 3 * 5
    for (_, _, j), out in results.items():
        np.testing.assert_array_equal(out, expected[j])


def test_the_saved_model_has_the_n_best_and_aligned_signatures(loaded, sentences):
    text = tf.constant(sentences[:3])
    best = loaded.signatures["serving_default"](text=text)
    nbest = loaded.signatures["translate_nbest"](text=text)
    aligned = loaded.signatures["translate_aligned"](text=text)
    np.testing.assert_array_equal(nbest["translations"][:, 0], best["translation"])
    np.testing.assert_array_equal(aligned["translation"], best["translation"])
    assert aligned["alignment"].dtype == tf.int32 and aligned["alignment"].shape[0] == 3


def test_a_killed_export_leaves_the_earlier_export_whole(
    exported, loaded, multi30k_tokenizer, sentences, tmp_path
):
    import shutil

    import tensorflow_text  # noqa: F401

    destination = tmp_path / "dest"
    shutil.copytree(exported, destination)
    tokenizer_dir = tmp_path / "tok"
    multi30k_tokenizer.save(tokenizer_dir)
    keras.utils.set_random_seed(22)  # other weights than the earlier export's
    other = build_transformer(TransformerConfig.tiny(multi30k_tokenizer.vocab_size, dropout=0.0))
    other.save(tmp_path / "other.keras")
    script = textwrap.dedent("""
        import sys
        import keras
        from keras_transformer import SubwordTokenizer
        from keras_transformer.inference.saved_model import export_translator
        tokenizer = SubwordTokenizer.load(sys.argv[2])
        model = keras.models.load_model(sys.argv[3], compile=False)
        while True:  # exports until killed
            export_translator(model, tokenizer, sys.argv[1], beam_size=3)
    """)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    args = [script, str(destination), str(tokenizer_dir), str(tmp_path / "other.keras")]
    child = subprocess.Popen([sys.executable, "-c", *args], env=env)
    deadline = time.time() + 240
    try:
        while not list(tmp_path.glob(".dest.tmp-*/variables")):
            assert child.poll() is None and time.time() < deadline, "the export did not start"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)  # during the write of variables and assets
    finally:
        child.kill()
        child.wait()
    assert list(tmp_path.glob(".dest.tmp-*")), "nothing was being written when killed"
    # The earlier export (beam 2), or a whole new one (beam 3, the other weights): the folder
    # serves exactly what that export serves, its settings and its weights together.
    texts = tf.constant(["A dog.", *sentences[:3]])
    settings = json.loads((destination / SETTINGS_FILE).read_text())["translator"]
    assert settings["beam_size"] in (2, 3)
    if settings["beam_size"] == 2:
        want = loaded.signatures["serving_default"](text=texts)  # the earlier export
    else:
        new_export = Translator(other, multi30k_tokenizer, beam_size=3)  # held: tf.function
        want = new_export.translate(texts)  # methods keep only a weak reference to it
    got = tf.saved_model.load(str(destination)).signatures["serving_default"](text=texts)
    assert got["translation"].shape == (4,)
    np.testing.assert_array_equal(got["translation"].numpy(), want["translation"].numpy())
    np.testing.assert_allclose(got["score"], want["score"], atol=1e-5)
    export_translator(
        build_transformer(TransformerConfig.tiny(multi30k_tokenizer.vocab_size)),
        multi30k_tokenizer,
        destination,
        beam_size=1,
    )
    assert not list(tmp_path.glob(".dest.tmp-*"))  # the rerun cleans up
    assert json.loads((destination / SETTINGS_FILE).read_text())["translator"]["beam_size"] == 1


def test_export_refuses_a_folder_that_is_not_an_export(model, multi30k_tokenizer, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not an export"):
        export_translator(model, multi30k_tokenizer, folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


# ---------------------------------------------------------------------- bad command lines
def _cli(run_cli, tmp_path, *args):
    return run_cli(*args, cwd=tmp_path, timeout=240)


@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_a_folder_that_is_not_an_export_of_ours_is_named(run_cli, tmp_path, command):
    folder = tmp_path / "foreign"
    tf.saved_model.save(tf.Module(), str(folder))  # a SavedModel, but not a translator
    (tmp_path / "in.en").write_text("A dog.\n")
    extra = ["--input", "in.en"] if command == "translate" else ["--src", "in.en", "--ref", "in.en"]
    result = _cli(run_cli, tmp_path, command, "--model", folder, *extra)
    _assert_user_error(result, str(folder), "not a translator")
    empty = tmp_path / "empty"
    empty.mkdir()
    _assert_user_error(_cli(run_cli, tmp_path, command, "--model", empty, *extra), "empty")


def test_translate_bad_arguments_are_one_line_and_write_nothing(run_cli, exported, tmp_path):
    (tmp_path / "empty.en").write_text("")
    (tmp_path / "one.en").write_text("A dog runs.\n")
    out = tmp_path / "out.de"
    base = ["translate", "--model", exported, "--output", out]
    _assert_user_error(
        _cli(run_cli, tmp_path, *base, "--input", "empty.en"), "empty.en", "no lines"
    )
    _assert_user_error(_cli(run_cli, tmp_path, *base, "--input", "missing.en"), "missing.en")
    result = _cli(run_cli, tmp_path, *base, "--input", "one.en", "--batch-size", "four")
    _assert_user_error(result, "--batch-size", "four")
    result = _cli(run_cli, tmp_path, *base, "--input", "one.en", "--beam-size", "2")
    _assert_user_error(result, "--beam-size")
    assert not out.exists()
    _assert_user_error(
        _cli(
            run_cli,
            tmp_path,
            "evaluate",
            "--model",
            exported,
            "--src",
            "empty.en",
            "--ref",
            "empty.en",
        ),
        "empty.en",
    )


def test_export_bad_arguments_are_one_line_and_write_nothing(run_cli, tmp_path):
    run = tmp_path / "run"
    (run / "tokenizer").mkdir(parents=True)
    out = tmp_path / "out"
    base = ["export", "--run", run, "--output", out]
    _assert_user_error(_cli(run_cli, tmp_path, *base, "--beam-size", "four"), "--beam-size")
    _assert_user_error(
        _cli(run_cli, tmp_path, *base, "--format", "ctranslate2", "--quantization", "int4"),
        "--quantization",
    )
    _assert_user_error(_cli(run_cli, tmp_path, *base, "--weights", "nope.keras"), "nope.keras")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("keep me")
    result = _cli(run_cli, tmp_path, "export", "--run", run, "--output", taken)
    _assert_user_error(result, str(taken), "not an export")
    assert not out.exists() and [p.name for p in taken.iterdir()] == ["notes.txt"]


@pytest.fixture(scope="module")
def cli_translations(run_cli, exported, sentences, tmp_path_factory):
    """``translate --threads 1`` through the CLI as typed (one thread a batch, one batch at a
    time) on the first 9 sentences, once for the module: the folder of ``in.en`` and the
    output lines."""
    folder = tmp_path_factory.mktemp("cli")
    (folder / "in.en").write_text("\n".join(sentences[:9]) + "\n", encoding="utf-8")
    base = ["translate", "--model", exported, "--input", "in.en"]
    result = _cli(run_cli, folder, *base, "--threads", "1")
    assert result.returncode == 0, result.stderr
    return folder, result.stdout.splitlines()


def test_translate_n_best_through_the_cli(run_cli, exported, cli_translations):
    folder, best = cli_translations  # the CLI's translations of in.en, without --n-best
    base = ["translate", "--model", exported, "--input", "in.en"]
    nbest = _cli(run_cli, folder, *base, "--n-best", "2")
    assert nbest.returncode == 0, nbest.stderr
    rows = [line.split(" ||| ") for line in nbest.stdout.splitlines()]
    assert [int(r[0]) for r in rows] == [i for i in range(9) for _ in range(2)]
    assert [r[2] for r in rows[::2]] == best
    assert all(float(a[1]) >= float(b[1]) for a, b in zip(rows[::2], rows[1::2]))
    _assert_user_error(_cli(run_cli, folder, *base, "--n-best", "3"), "beam size 2")


def test_thread_pools_are_sized_in_a_fresh_process_and_refused_once_fixed(
    run_cli, exported, loaded, sentences, cli_translations
):
    from keras_transformer.inference.formats import load_translator
    from tests.conftest import fresh_process_environment

    script = textwrap.dedent(
        f"""
        import json, tensorflow as tf
        from keras_transformer.inference.formats import load_translator
        translator = load_translator({str(exported)!r}, intra_threads=1, inter_threads=3)
        texts = translator.translate({sentences[:9]!r}, batch_size=2)  # 3 batches at once
        threading = tf.config.threading
        pools = [threading.get_intra_op_parallelism_threads(),
                 threading.get_inter_op_parallelism_threads()]
        print(json.dumps([pools, texts]))
        """
    )
    env = fresh_process_environment()
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=240
    )
    assert result.returncode == 0, result.stderr
    pools, texts = json.loads(result.stdout.splitlines()[-1])
    assert pools == [1, 3]
    # the sequential answers: the export in this process, and the CLI's --threads 1
    sequential = loaded.signatures["serving_default"](text=tf.constant(sentences[:9]))
    assert texts == [t.decode("utf-8") for t in sequential["translation"].numpy()]
    folder, one = cli_translations
    assert one == texts
    # this process has run TensorFlow ops: its pools are fixed, and another size is refused
    with pytest.raises(RuntimeError, match="intra_threads=7"):
        load_translator(exported, intra_threads=7)
    with pytest.raises(TypeError, match="compute_type"):
        load_translator(exported, compute_type="int8")
    base = ["translate", "--model", exported, "--input", "in.en"]
    _assert_user_error(_cli(run_cli, folder, *base, "--threads", "-1"), "--threads")
