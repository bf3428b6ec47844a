"""Loads the export of ``export_tiny.py`` in TF Serving's runtime and compares what it serves
with what the project's TensorFlow served (``expected.json``). Run in a venv holding only
``tensorflow`` and ``tensorflow-text`` of TF Serving's version, isolated from the project
(``python -I``: no PYTHONPATH, no script folder on the path):

    python -I scripts/tf_serving_runtime/check.py FOLDER

Text and alignments must be equal, scores equal to 1e-4 (relative); exit status 1 otherwise.
"""

import json
import pathlib
import sys

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the export uses)

SCORE_RTOL = 1e-4


def main(folder) -> int:
    folder = pathlib.Path(folder)
    assert "keras_transformer" not in sys.modules
    expected = json.loads((folder / "expected.json").read_text())
    loaded = tf.saved_model.load(str(folder / "saved_model"))
    problems = []
    for name, outputs in expected["outputs"].items():
        signature = loaded.signatures[name]
        specs = signature.structured_input_signature[1]
        request = expected["requests"][name]
        got = signature(**{k: tf.constant(v, specs[k].dtype) for k, v in request.items()})
        for key, want in outputs.items():
            value = got[key].numpy()
            if value.dtype == object:
                text = np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(value)
                same = text.tolist() == want
            elif np.issubdtype(value.dtype, np.floating):
                want = np.array(want, dtype=value.dtype)
                same = value.shape == want.shape and np.allclose(
                    value, want, rtol=SCORE_RTOL, atol=0, equal_nan=True
                )
            else:
                same = value.tolist() == want
            if not same:
                problems.append(f"{name}.{key}: {value.tolist()} != {want}")
    versions = f"TensorFlow {tf.__version__} against {expected['tensorflow']}"
    if problems:
        print(f"{folder}: served differently under {versions}:", *problems, sep="\n  ")
        return 1
    print(f"{folder}: {', '.join(expected['outputs'])} serve alike under {versions}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
