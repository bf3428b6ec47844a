# Paper sections 3.2.3, 3.4 and 6.1: the auto-regressive decoder searched with beam 4, alpha 0.6.
"""Inference: the one search, its settings, its batching, and the two export formats.

* ``settings.py``: :class:`SearchSettings` and :class:`ServingSettings`, every default once;
* ``search.py``: :class:`Searcher`, the one cached search loop (greedy, beam, n-best as
  strategies of ``strategies.py``; next-token choice in ``tokens.py``; finished sentences
  leaving the batch in ``finished_rows.py``), and ``greedy_decode`` / ``beam_search``;
* ``batching.py``: length-sorted batches under a token budget (graph and Python);
* ``saved_model.py``: :class:`Translator`, the string-to-string SavedModel, and its reader;
* ``ctranslate2.py``: the CTranslate2 export and its reader; ``text.py``: the SavedModel's
  input handling in Python for it;
* ``formats.py``: which export a folder is, and ``load_translator`` for either.

The names load on first use (``keras_transformer.lazy``): ``settings`` and ``formats`` import
no TensorFlow, so the command line checks its flags and an export folder before TensorFlow loads.
"""

from keras_transformer.lazy import lazy_names

__all__, __getattr__, __dir__ = lazy_names(
    __name__,
    {
        "settings": ("SearchSettings", "ServingSettings"),
        "search": ("Searcher", "beam_search", "get_searcher", "greedy_decode", "trim_padding"),
        "strategies": ("BeamSearch", "GreedySearch", "NBestBeamSearch", "length_penalty"),
        "batching": ("length_sorted_batches", "map_batches", "search_in_sub_batches"),
        "saved_model": (
            "SavedModelTranslator",
            "Translator",
            "export_translator",
            "saved_model_cli",
            "set_tf_threads",
        ),
        "ctranslate2": (
            "CTranslate2Translator",
            "Hypothesis",
            "ctranslate2_spec",
            "export_ctranslate2",
        ),
        "formats": ("NotAnExportError", "check_export", "load_translator"),
    },
)
