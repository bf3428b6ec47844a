"""A tiny SavedModel export and what the project's own TensorFlow serves from it, for
``check.py`` to compare under TF Serving's runtime (``run.sh``).

    python scripts/tf_serving_runtime/export_tiny.py FOLDER

Writes ``FOLDER/saved_model`` (a 2-layer model of random weights, a 400-piece SentencePiece
tokenizer trained here on made-up sentences, beam 2 so that n-best has two rows) and
``FOLDER/expected.json``: the requests and the outputs of ``serving_default``,
``translate_nbest``, ``translate_aligned`` and ``translate_sampled`` for ``INPUTS``, from the
export reloaded by this TensorFlow.
"""

from __future__ import annotations

import json
import pathlib
import random
import sys

import numpy as np

# Text the tokenizer learns from, and what the export is asked to translate: plain, empty,
# accented and emoji input.
WORDS = "a dog cat man woman child runs sits on the in red blue street park ball water".split()
INPUTS = ["A dog runs in the park.", "Two children play with a red ball.", "", "Ünïcödé 😀 text"]
SIGNATURES = ("serving_default", "translate_nbest", "translate_aligned", "translate_sampled")
# Each signature's request: the text, and for sampling a seed, top-k, top-p and temperature a line.
SAMPLING = {
    "seed": [1, 2, 3, 4],
    "topk": [0, 5, 0, 3],
    "topp": [1.0, 0.9, 0.8, 1.0],
    "temperature": [1.0, 1.0, 0.7, 1.5],
}
REQUESTS = {name: {"text": INPUTS} for name in SIGNATURES}
REQUESTS["translate_sampled"].update(SAMPLING)


def made_up_sentences(count: int) -> list[str]:
    rng = random.Random(0)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 10))).capitalize() + "."
        for _ in range(count)
    ]


def served(loaded, name: str) -> dict:
    """A signature's outputs for its request as JSON-ready lists (strings decoded)."""
    signature = loaded.signatures[name]
    outputs = signature(**request_tensors(signature, REQUESTS[name]))
    return {key: as_lists(tensor.numpy()) for key, tensor in outputs.items()}


def request_tensors(signature, request: dict) -> dict:
    """A JSON request as the signature's input tensors (each of its declared dtype); the same
    function as in ``check.py``, which may not import this project."""
    import tensorflow as tf

    specs = signature.structured_input_signature[1]
    return {key: tf.constant(value, specs[key].dtype) for key, value in request.items()}


def as_lists(value):
    """A numpy array as nested lists, its byte strings decoded (UTF-8)."""
    if value.dtype == object:
        return np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(value).tolist()
    return value.tolist()


def main(folder) -> int:
    import keras
    import tensorflow as tf

    from keras_transformer import TransformerConfig, build_transformer, export_translator
    from keras_transformer.text.tokenizer import SubwordTokenizer

    folder = pathlib.Path(folder)
    keras.utils.set_random_seed(0)
    tokenizer = SubwordTokenizer.train(made_up_sentences(2000), vocab_size=400)
    model = build_transformer(TransformerConfig.tiny(tokenizer.vocab_size))
    export = folder / "saved_model"
    export_translator(model, tokenizer, export, beam_size=2, max_extra_length=6)
    loaded = tf.saved_model.load(str(export))
    expected = {name: served(loaded, name) for name in SIGNATURES}
    record = {"tensorflow": tf.__version__, "requests": REQUESTS, "outputs": expected}
    (folder / "expected.json").write_text(json.dumps(record, indent=1, ensure_ascii=False))
    print(f"exported {export} with TensorFlow {tf.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
