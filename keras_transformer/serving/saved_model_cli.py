"""``python -m keras_transformer.export``: TensorFlow's saved_model_cli, SentencePiece ops on."""

import sys


def saved_model_cli(argv=None) -> int:
    """TensorFlow's ``saved_model_cli`` with the tensorflow_text (SentencePiece) ops registered.

    Example (shell)::

        python -m keras_transformer.export run --dir saved_models/en_de --tag_set serve \\
            --signature_def serving_default --input_exprs 'text=["A dog runs."]'
    """
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
    from tensorflow.python.tools import saved_model_cli as cli

    sys.argv = ["saved_model_cli", *(sys.argv[1:] if argv is None else argv)]
    return cli.main()
