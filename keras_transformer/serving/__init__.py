"""Serving the exported models: CTranslate2 export and translation, atomic export folders, one
loader for either export format (``load_translator``).

The names load on first use (``keras_transformer.lazy``): ``formats`` imports no TensorFlow, so
the command line checks an export folder before TensorFlow loads."""

from keras_transformer.lazy import lazy_names

__all__, __getattr__, __dir__ = lazy_names(
    __name__,
    {
        "atomic": ("atomic_folder",),
        "ctranslate2_export": ("ctranslate2_spec", "export_ctranslate2"),
        "ctranslate2_translate": ("CTranslate2Translator", "Hypothesis"),
        "engines": ("SavedModelTranslator", "load_translator", "set_tf_threads"),
        "formats": ("NotAnExportError", "check_export"),
    },
)
