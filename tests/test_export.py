"""The translation SavedModel: self-contained, movable, loadable elsewhere, robust to bad input."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.inference.saved_model import SETTINGS_FILE, Translator, export_translator
from keras_transformer.text.tokenizer import EOS_ID, PAD_ID

MAX_SOURCE_LENGTH = 24
MAX_EXTRA_LENGTH = 6

BAD_INPUTS = [
    "",
    "   \t \n ",
    "Ein Hund läuft. " * 625,  # 10,000 characters
    "\U0001f600\U0001f436 犬が走る。 Собака бежит. كلب يجري",
    "tab\tnew\nline\x00nul\x07bell",
]
INVALID_UTF8 = [b"\xff\xfe broken \xc3", b"caf\xe9 au lait", b"\xed\xa0\x80 surrogate"]


def test_a_saved_model_serves_what_the_translator_gives_in_memory(toy_tokenizer, tmp_path):
    """The fast tier's export (no corpora): the SavedModel, loaded back, gives the in-memory
    Translator's translations and scores on every signature, and translator.json records the
    settings the export was made with, defaults from ``SearchSettings`` included."""
    from keras_transformer.inference.settings import SearchSettings
    from tests.conftest import toy_sentences

    keras.utils.set_random_seed(5)
    model = build_transformer(TransformerConfig.tiny(toy_tokenizer.vocab_size, dropout=0.0))
    translator = Translator(model, toy_tokenizer, max_extra_length=MAX_EXTRA_LENGTH, beam_size=2)
    texts = tf.constant(toy_sentences(5, seed=1) + BAD_INPUTS[:2])
    translator.save(tmp_path / "export")
    loaded = tf.saved_model.load(str(tmp_path / "export"))
    assert_signatures_serve_alike(loaded, translator, texts)
    record = json.loads((tmp_path / "export" / SETTINGS_FILE).read_text())["translator"]
    assert (record["beam_size"], record["max_extra_length"]) == (2, MAX_EXTRA_LENGTH)
    assert record["alpha"] == SearchSettings().alpha and record["format"] == "saved_model"


def assert_signatures_serve_alike(loaded, translator, texts):
    """A loaded export's ``serving_default`` and ``translate_nbest`` give the in-memory
    translator's outputs: text and ids equal, scores to 1e-5."""
    for name, signature in (
        ("serving_default", translator.translate),
        ("translate_nbest", translator.translate_nbest),
    ):
        got, want = loaded.signatures[name](text=texts), signature(texts)
        for key in want:
            if want[key].dtype.is_floating:
                np.testing.assert_allclose(got[key], want[key], atol=1e-5)
            else:
                np.testing.assert_array_equal(got[key], want[key])


@pytest.fixture(scope="module")
def translator(multi30k_tokenizer):
    keras.utils.set_random_seed(11)
    model = build_transformer(TransformerConfig.tiny(multi30k_tokenizer.vocab_size, dropout=0.0))
    return Translator(
        model,
        multi30k_tokenizer,
        beam_size=4,
        alpha=0.6,
        max_extra_length=MAX_EXTRA_LENGTH,
        max_source_length=MAX_SOURCE_LENGTH,
    )


@pytest.fixture(scope="module")
def sentences(multi30k_dir):
    lines = (multi30k_dir / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    return lines[:6]


def _same_translator(translator):
    """A second Translator with the same model, tokenizer and settings."""
    return Translator(
        translator.model,
        translator.tokenizer,
        beam_size=4,
        alpha=0.6,
        max_extra_length=MAX_EXTRA_LENGTH,
        max_source_length=MAX_SOURCE_LENGTH,
    )


@pytest.fixture(scope="module")
def exported(translator, sentences, tmp_path_factory):
    """The SavedModel folder, after a move, and the in-memory results to compare with."""
    texts = sentences + BAD_INPUTS
    expected = translator.translate(tf.constant(texts))
    path = tmp_path_factory.mktemp("export") / "translator"
    saved = _same_translator(translator)
    saved.save(path)
    moved = tmp_path_factory.mktemp("moved") / "somewhere_else"
    shutil.move(str(path), str(moved))
    return moved, texts, expected, saved


def _texts(tensor):
    return [t.decode("utf-8") for t in tensor.numpy()]


def _run(args, timeout=240):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


# ---------------------------------------------------------------------- in memory
def test_translations_are_strings_with_scores(translator, sentences):
    out = translator.translate(tf.constant(sentences))
    assert out["translation"].dtype == tf.string and out["translation"].shape == (len(sentences),)
    assert all(_texts(out["translation"]))
    assert np.all(out["score"].numpy() < 0)


def _count_decoder_steps(translator):
    """A counter of the decoder steps ``translator``'s search runs (one per position of the
    search loop), to trace into its signatures: call before their first use."""
    layers = translator.searcher._layers
    steps = tf.Variable(0, dtype=tf.int64, trainable=False)
    decode_step = layers.decode_step

    def counted(*args, **kwargs):
        with tf.control_dependencies([steps.assign_add(1)]):
            return decode_step(*args, **kwargs)

    layers.decode_step = counted  # this Translator's own TransformerLayers
    return steps


def test_bad_inputs_give_a_translation_in_bounded_work(translator):
    """Whatever the input, the work is bounded by the settings, not by the input: the source is
    cut to MAX_SOURCE_LENGTH ids (EOS included), the search runs at most that source's length +
    MAX_EXTRA_LENGTH decoder steps, and the translation has at most that many subwords."""
    counting = _same_translator(translator)
    steps = _count_decoder_steps(counting)
    for text in BAD_INPUTS + INVALID_UTF8:
        steps.assign(0)
        out = counting.translate(tf.constant([text]))
        assert out["translation"].shape == (1,) and np.isfinite(out["score"].numpy()).all()
        out["translation"].numpy()[0].decode("utf-8")  # valid UTF-8
        # The same translation through the token signatures, to count its ids.
        tokens = translator.tokenize(tf.constant([text]))["tokens"]
        assert tokens.shape[1] <= translator.max_input_chars  # the text was cut first
        source, _ = translator._source_ids(tf.RaggedTensor.from_tensor(tokens, padding=PAD_ID))
        assert source.shape[1] <= MAX_SOURCE_LENGTH
        limit = int(np.sum(source.numpy() != PAD_ID)) + MAX_EXTRA_LENGTH  # at most 24 + 6
        # Measured: this untrained model never emits EOS, so every search runs to its limit.
        assert 1 <= int(steps) <= limit, (text[:20], int(steps), limit)
        ids = translator.translate_tokens(tokens)["tokens"]
        assert ids.shape[1] <= limit
        want = translator.detokenize(ids)["text"] if ids.shape[1] else tf.constant([""])
        assert _texts(out["translation"]) == _texts(want)
    empty = translator.translate(tf.constant(["", "  \t\n "]))
    assert _texts(empty["translation"]) == ["", ""]
    np.testing.assert_array_equal(empty["score"], [0.0, 0.0])
    none = translator.translate(tf.zeros([0], tf.string))
    assert none["translation"].shape == (0,) and none["score"].shape == (0,)


def test_a_sentence_translates_alike_alone_and_in_a_mixed_batch(translator, sentences):
    batch = [sentences[0], BAD_INPUTS[2], "Hi", sentences[1], ""]
    together = translator.translate(tf.constant(batch))
    for i, text in enumerate(batch):
        alone = translator.translate(tf.constant([text]))
        assert _texts(alone["translation"]) == _texts(together["translation"])[i : i + 1]
        np.testing.assert_allclose(alone["score"], together["score"][i : i + 1], atol=1e-4)


def test_long_inputs_are_truncated_keeping_eos(translator):
    long_text = BAD_INPUTS[2]
    tokens = translator.tokenize(tf.constant([long_text]))["tokens"]
    assert tokens.shape[1] > MAX_SOURCE_LENGTH
    source, _ = translator._source_ids(tf.RaggedTensor.from_tensor(tokens, padding=PAD_ID))
    assert source.shape == (1, MAX_SOURCE_LENGTH) and int(source[0, -1]) == EOS_ID
    cut = translator.translate_tokens(tokens[:, : MAX_SOURCE_LENGTH - 1])
    full = translator.translate_tokens(tokens)
    np.testing.assert_array_equal(cut["tokens"], full["tokens"])
    assert full["tokens"].shape[1] <= MAX_SOURCE_LENGTH + MAX_EXTRA_LENGTH


def test_token_signatures_compose_to_the_text_signature(translator, sentences):
    text = translator.translate(tf.constant(sentences))
    tokens = translator.translate_tokens(translator.tokenize(tf.constant(sentences))["tokens"])
    assert EOS_ID not in tokens["tokens"].numpy()
    np.testing.assert_allclose(tokens["score"], text["score"], atol=1e-5)
    detok = translator.detokenize(tokens["tokens"])["text"]
    assert _texts(detok) == _texts(text["translation"])
    odd = translator.translate_tokens(tf.constant([[5, 10**6, -7, 0], [0, 0, 0, 0]]))
    assert odd["tokens"].shape[0] == 2 and not odd["tokens"].numpy()[1].any()
    assert translator.detokenize(tf.constant([[10**6, -1, 0]]))["text"].shape == (1,)
    assert translator.detokenize(tf.zeros([0, 0], tf.int32))["text"].shape == (0,)
    assert translator.tokenize(tf.zeros([0], tf.string))["tokens"].shape[0] == 0


def test_vocabulary_mismatch_is_rejected(multi30k_tokenizer):
    model = build_transformer(TransformerConfig.tiny(100))
    with pytest.raises(ValueError, match="tokenizer has"):
        Translator(model, multi30k_tokenizer)


# ---------------------------------------------------------------------- SavedModel
def test_fresh_process_loads_the_moved_folder_and_translates_alike(exported):
    path, texts, expected, _ = exported
    assert not any(path.parent.parent.glob("export*/translator"))  # the original is gone
    script = textwrap.dedent("""
        import json, sys
        import tensorflow as tf
        import tensorflow_text  # registers the SentencePiece ops
        import keras

        path, texts = sys.argv[1], json.loads(sys.argv[2])
        loaded = tf.saved_model.load(path)
        serve = loaded.signatures["serving_default"]
        out = serve(text=tf.constant(texts))
        layer = keras.layers.TFSMLayer(path, call_endpoint="serving_default")
        layer_out = layer(tf.constant(texts))
        singles = []
        bad = [t.encode() for t in texts[-5:]] + [b"\\xff\\xfe broken \\xc3", b""]
        for text in bad:
            singles.append(serve(text=tf.constant([text]))["translation"].numpy()[0].hex())
        # The subwords in and out of each bad input's search, to bound its work.
        subwords = loaded.signatures["tokenize"](text=tf.constant(bad))["tokens"]
        out_ids = loaded.signatures["translate_tokens"](tokens=subwords)["tokens"]
        sizes = [tf.reduce_sum(tf.cast(t != 0, tf.int32), axis=1).numpy().tolist()
                 for t in (subwords, out_ids)] + [int(out_ids.shape[1])]
        none = serve(text=tf.zeros([0], tf.string))
        method = loaded.translate(tf.constant(texts))["translation"]
        tokens = loaded.signatures["tokenize"](text=tf.constant(texts[:2]))["tokens"]
        ids = loaded.signatures["translate_tokens"](tokens=tokens)["tokens"]
        detok = loaded.signatures["detokenize"](tokens=ids)["text"]
        print(json.dumps({
            "translation": [t.hex() for t in out["translation"].numpy()],
            "score": out["score"].numpy().tolist(),
            "layer": [t.hex() for t in layer_out["translation"].numpy()],
            "method": [t.hex() for t in method.numpy()],
            "singles": singles, "sizes": sizes,
            "none": [list(none["translation"].shape), list(none["score"].shape)],
            "detok": [t.hex() for t in detok.numpy()],
        }))
    """)
    output = _run([sys.executable, "-c", script, str(path), json.dumps(texts)])
    result = json.loads(output.strip().splitlines()[-1])
    want = [t.hex() for t in expected["translation"].numpy()]
    assert result["translation"] == want
    assert result["layer"] == want
    assert result["method"] == want
    np.testing.assert_allclose(result["score"], expected["score"], atol=1e-4)
    assert result["singles"][:5] == want[-5:]
    assert result["singles"][-1] == ""
    # Each bad input's search is bounded by the settings the export carries: the source cut to
    # MAX_SOURCE_LENGTH ids (EOS included), at most that + MAX_EXTRA_LENGTH subwords out.
    subwords, emitted, width = result["sizes"]
    limits = [min(n, MAX_SOURCE_LENGTH - 1) + 1 + MAX_EXTRA_LENGTH for n in subwords]
    assert all(e <= limit for e, limit in zip(emitted, limits)), (subwords, emitted)
    assert width <= max(limits) == MAX_SOURCE_LENGTH + MAX_EXTRA_LENGTH  # one input was cut
    assert result["none"] == [[0], [0]]
    assert result["detok"] == want[:2]
    settings = json.loads((path / SETTINGS_FILE).read_text())
    assert settings["translator"]["beam_size"] == 4
    assert settings["translator"]["max_source_length"] == MAX_SOURCE_LENGTH


def test_the_export_traces_each_signature_and_search_once(exported, loaders):
    """tf.saved_model.save traces the module's functions in a save context of its own: given
    concrete functions traced before it, the export traced (and stored) every graph twice."""
    saved = exported[3]
    functions = [getattr(saved, name) for name in ("translate", "translate_nbest", "tokenize")]
    functions += [saved.searcher.beam_search, saved.searcher.nbest]
    assert [f.experimental_get_tracing_count() for f in functions] == [1] * len(functions)
    # A beam export builds no greedy search, so the SavedModel stores none.
    assert "greedy" not in vars(saved.searcher)
    loaded = loaders[1]  # the export, loaded once for the module by TF2's loader
    assert hasattr(loaded.searcher, "beam_search") and not hasattr(loaded.searcher, "greedy")


def test_a_loaded_export_holds_no_gradient_functions(exported):
    """Saved without tf.custom_gradient's gradient functions (SaveOptions): a served model needs
    none, and the export no longer traces them."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel.FromString(
        (exported[0] / "saved_model.pb").read_bytes()
    )
    library = saved_model.meta_graphs[0].graph_def.library
    assert library.function and not library.registered_gradients  # 80 of them before
    # and no op that asks for one: each made tf.saved_model.load warn of "unsaved custom
    # gradients" (the layer norm's fast path is traced without its tf.custom_gradient)
    marked = [
        node.name
        for function in library.function
        for node in function.node_def
        if "_gradient_op_type" in node.attr
    ]
    assert not marked


def test_saved_model_cli_shows_and_runs_the_signatures(exported):
    path, texts, expected, _ = exported
    shown = _run(
        [
            os.path.join(os.path.dirname(sys.executable), "saved_model_cli"),
            "show",
            "--dir",
            str(path),
            "--all",
        ]
    )
    for name in (
        "serving_default",
        "translate_tokens",
        "tokenize",
        "detokenize",
        "inputs['text']",
        "outputs['translation']",
        "outputs['score']",
    ):
        assert name in shown
    ran = _run(
        [
            sys.executable,
            "-m",
            "keras_transformer.inference.saved_model",
            "run",
            "--dir",
            str(path),
            "--tag_set",
            "serve",
            "--signature_def",
            "serving_default",
            "--input_exprs",
            f"text={json.dumps(texts[:2])}",
        ]
    )
    assert "Result for output key translation" in ran and "Result for output key score" in ran
    for translation in expected["translation"].numpy()[:2]:
        assert repr(translation)[2:-1][:40] in ran


DOCS_SERVING = pathlib.Path(__file__).resolve().parents[1] / "docs" / "serving.md"


def _documented_rest_bodies():
    """(request, reply) pairs of JSON bodies in docs/serving.md's TF Serving section, in order."""
    section = DOCS_SERVING.read_text(encoding="utf-8").split("## Requests to TF Serving")[1]
    section = section.split("\n## ")[0]
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", section, re.S)]
    assert len(blocks) >= 10 and len(blocks) % 2 == 0
    return list(zip(blocks[0::2], blocks[1::2], strict=True))


def _signature_dtypes(loaded, name):
    _, inputs = loaded.signatures[name].structured_input_signature
    return {key: spec.dtype.as_numpy_dtype for key, spec in inputs.items()}


def _rest_feed(body, dtypes):
    """A REST request's inputs as arrays, by TF Serving's rules: row format (``instances``: one
    object a row, or bare values for a one-input signature) or columnar (``inputs``)."""
    if "instances" in body:
        rows = body["instances"]
        if all(isinstance(row, dict) for row in rows):
            columns = {key: [row[key] for row in rows] for key in rows[0]}
        else:
            columns = {next(iter(dtypes)): rows}
    else:
        columns = (
            body["inputs"]
            if isinstance(body["inputs"], dict)
            else {next(iter(dtypes)): body["inputs"]}
        )
    assert set(columns) == set(dtypes), (body, sorted(dtypes))
    return {
        key: np.array([v.encode("utf-8") for v in values], dtype=object)
        if dtypes[key] is object
        else np.asarray(values, dtype=dtypes[key])
        for key, values in columns.items()
    }


class _GraphLoader:
    """What ``saved_model_cli run`` does (and TF Serving's C++ loader): the SavedModel loaded
    into a session by the graph loader, a signature run by its tensor names; loaded once."""

    def __init__(self, path):
        import tensorflow_text  # noqa: F401  (the SentencePiece ops, as in the model server)

        self.session = tf.compat.v1.Session(graph=tf.Graph())
        with self.session.graph.as_default():
            meta_graph = tf.compat.v1.saved_model.loader.load(self.session, ["serve"], str(path))
        self.signatures = meta_graph.signature_def

    def run(self, name, feed):
        signature = self.signatures[name]
        fed = {signature.inputs[key].name: value for key, value in feed.items()}
        keys = sorted(signature.outputs)
        values = self.session.run([signature.outputs[k].name for k in keys], feed_dict=fed)
        return dict(zip(keys, values, strict=True))


def _rest_reply(outputs, row_format):
    """The JSON a REST client receives for these outputs (strings as UTF-8 text)."""

    def plain(value):
        if isinstance(value, bytes):
            return value.decode("utf-8")
        return [plain(v) for v in value] if isinstance(value, list) else value

    lists = {key: plain(value.tolist()) for key, value in outputs.items()}
    if not row_format:
        return {"outputs": lists}
    rows = len(next(iter(lists.values())))
    return {"predictions": [{key: lists[key][i] for key in lists} for i in range(rows)]}


def _json_shape(value):
    """A JSON value's structure: kinds and keys, list lengths left out."""
    if isinstance(value, dict):
        return {key: _json_shape(v) for key, v in value.items()}
    if isinstance(value, list):
        return ["list", sorted({json.dumps(_json_shape(v), sort_keys=True) for v in value})]
    return "text" if isinstance(value, str) else "number"


@pytest.fixture(scope="module")
def loaders(exported):
    """The export loaded twice: by the graph loader (as the model server) and by TF2's."""
    return _GraphLoader(exported[0]), tf.saved_model.load(str(exported[0]))


def test_the_documented_rest_bodies_run_through_the_graph_loader(loaders):
    graph, loaded = loaders
    bodies = _documented_rest_bodies()
    assert {request["signature_name"] for request, _ in bodies} == {
        "serving_default", "translate_nbest", "translate_aligned", "translate_sampled"
    }  # fmt: skip
    for request, documented in bodies:
        name = request["signature_name"]
        feed = _rest_feed(request, _signature_dtypes(loaded, name))
        served = graph.run(name, feed)
        expected = loaded.signatures[name](**{k: tf.constant(v) for k, v in feed.items()})
        assert set(served) == set(expected), name
        for key, value in expected.items():
            if value.dtype.is_floating:
                np.testing.assert_allclose(served[key], value.numpy(), rtol=1e-5, err_msg=name)
            else:
                np.testing.assert_array_equal(served[key], value.numpy(), err_msg=name)
        reply = _rest_reply(served, "instances" in request)
        assert _json_shape(reply) == _json_shape(documented), name
        rows = reply.get("predictions") or next(iter(reply["outputs"].values()))
        assert len(rows) == len(next(iter(feed.values()))), name


def test_the_documented_grpc_request_gets_its_reply_from_a_prediction_service(loaders):
    import concurrent.futures

    import grpc
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    (graph, loaded), calls = loaders, []

    class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request, context):  # noqa: N802 - the gRPC method's name
            calls.append((request.model_spec.name, request.model_spec.signature_name))
            feed = {key: tf.make_ndarray(proto) for key, proto in request.inputs.items()}
            outputs = graph.run(calls[-1][1], feed)
            response = predict_pb2.PredictResponse()
            for key, value in outputs.items():
                response.outputs[key].CopyFrom(tf.make_tensor_proto(value))
            return response

    server = grpc.server(concurrent.futures.ThreadPoolExecutor(1))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(PredictionService(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        text = DOCS_SERVING.read_text(encoding="utf-8").split("**gRPC**")[1]
        snippet = re.search(r"```python\n(.*?)```", text, re.S).group(1)
        assert "localhost:8500" in snippet
        namespace = {}
        exec(snippet.replace("localhost:8500", f"127.0.0.1:{port}"), namespace)  # noqa: S102
    finally:
        server.stop(None)
    assert calls == [("en_de", "serving_default")]
    expected = loaded.signatures["serving_default"](text=tf.constant(["A dog runs in the snow."]))
    assert namespace["translations"] == _texts(expected["translation"])
    np.testing.assert_allclose(namespace["scores"], expected["score"].numpy(), rtol=1e-5)


def test_bfloat16_export_serves_in_bfloat16_and_matches_memory(translator, sentences, tmp_path):
    path = export_translator(
        translator.model,
        translator.tokenizer,
        tmp_path / "bf16",
        beam_size=4,
        alpha=0.6,
        max_extra_length=MAX_EXTRA_LENGTH,
        max_source_length=MAX_SOURCE_LENGTH,
        dtype="bfloat16",
    )
    settings = json.loads((tmp_path / "bf16" / SETTINGS_FILE).read_text())["translator"]
    assert settings["dtype"] == "bfloat16"
    in_memory = Translator(
        translator.model,
        translator.tokenizer,
        beam_size=4,
        alpha=0.6,
        max_extra_length=MAX_EXTRA_LENGTH,
        max_source_length=MAX_SOURCE_LENGTH,
        dtype="bfloat16",
    )
    assert translator.model.get_layer("decoder_block_0").compute_dtype == "float32"  # not changed
    loaded = tf.saved_model.load(str(path))
    weights = loaded.signatures["serving_default"].variables
    assert weights and {v.dtype for v in weights if v.dtype.is_floating} == {tf.bfloat16}
    expected = in_memory.translate(tf.constant(sentences))
    served = loaded.signatures["serving_default"](text=tf.constant(sentences))
    np.testing.assert_array_equal(served["translation"].numpy(), expected["translation"].numpy())


def test_beam_size_1_serves_greedy_search_with_beam_scores(translator, sentences):
    greedy = Translator(
        translator.model,
        translator.tokenizer,
        beam_size=1,
        alpha=0.6,
        max_extra_length=MAX_EXTRA_LENGTH,
        max_source_length=MAX_SOURCE_LENGTH,
    )
    tokens = greedy._tokenize(tf.constant(sentences))
    ids, scores = greedy._translate_ids(tokens)
    source, _ = greedy._source_ids(tokens)
    beam_ids, beam_scores = greedy.searcher.beam_search(source)  # a beam of 1, the slow way
    beam_ids = tf.where(tf.equal(beam_ids, EOS_ID), PAD_ID, beam_ids)
    np.testing.assert_array_equal(ids.numpy(), beam_ids.numpy())
    np.testing.assert_allclose(scores.numpy(), beam_scores.numpy(), rtol=1e-5)


def test_input_cleaning_replaces_controls_collapses_whitespace_and_cuts(translator):
    cases = {
        "tab\tnew\nline\x00nul\x07bell": "tab new line nul bell",
        "  A \t\r\n dog\x0b\x0c runs.  ": "A dog runs.",
        "\x1b[31mred\x7f": "[31mred",
        "   \t \n ": "",
        "caf\u00e9 \u00a0 \u2003x": "caf\u00e9 \u00a0 \u2003x",  # non-ASCII spaces are kept
    }
    cleaned = translator._clean(tf.constant(list(cases)))
    assert [t.decode("utf-8") for t in cleaned.numpy()] == list(cases.values())
    broken = translator._clean(tf.constant([b"caf\xe9 ok", b"\xff\xfe"])).numpy()
    assert broken[0].decode("utf-8") == "caf\ufffd ok" and set(broken[1].decode()) == {"\ufffd"}
    limit = translator.max_input_chars
    long = "\U0001f600" * (limit + 7)  # 4-byte characters: the cut counts characters
    cut = translator._clean(tf.constant([long, "a" * (limit + 1)])).numpy()
    assert cut[0].decode("utf-8") == "\U0001f600" * limit and len(cut[1]) == limit
    # tokenize sees the cleaned text: the same ids as the tokenizer on the cleaned string
    ids = translator.tokenize(tf.constant(list(cases)[:2]))["tokens"].numpy()
    want = translator.tokenizer.tokenize(tf.constant(list(cases.values())[:2])).to_tensor()
    np.testing.assert_array_equal(ids, want.numpy())


def test_search_switches_translate_alike_and_are_recorded(translator, sentences):
    """The search's speed switches against the default translator: the plain loop over every row
    (``drop_finished=False``) gives the same translations, n-best lists and scores; the settings
    record the switches (``xla_max_batch``'s search: ``tests/test_decoding.py``)."""
    settings = dict(
        beam_size=4,
        alpha=0.6,
        max_extra_length=MAX_EXTRA_LENGTH,
        max_source_length=MAX_SOURCE_LENGTH,
    )
    text = tf.constant(sentences)
    assert translator.settings["drop_finished"] and translator.settings["xla_max_batch"] is None
    plain = Translator(translator.model, translator.tokenizer, drop_finished=False, **settings)
    assert not plain.settings["drop_finished"]
    for name in ("translate", "translate_nbest"):
        got, want = getattr(plain, name)(text), getattr(translator, name)(text)
        for key in want:
            if want[key].dtype == tf.string:
                np.testing.assert_array_equal(got[key].numpy(), want[key].numpy())
            else:
                np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), atol=1e-5)
    xla = Translator(translator.model, translator.tokenizer, xla_max_batch=1, **settings)
    assert xla.settings["xla_max_batch"] == 1 and xla.searcher._small_batches.jit_compile
