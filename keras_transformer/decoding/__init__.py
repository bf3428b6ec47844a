"""Old home of the search, kept for one release: the names live in
:mod:`keras_transformer.inference` now (``inference/search.py``)."""

from keras_transformer.inference.search import (  # noqa: F401
    Searcher,
    beam_search,
    get_searcher,
    greedy_decode,
    trim_padding,
)
from keras_transformer.inference.strategies import (  # noqa: F401
    BeamSearch,
    GreedySearch,
    length_penalty,
)

__all__ = [
    "BeamSearch",
    "GreedySearch",
    "Searcher",
    "beam_search",
    "get_searcher",
    "greedy_decode",
    "length_penalty",
    "trim_padding",
]
