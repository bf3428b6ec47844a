"""Batches of a request translated one after another, or several at once (either engine).

Both engines run a batch outside Python's GIL (TensorFlow's executor, CTranslate2's workers), so
``parallel`` Python threads keep that many batches in flight: CTranslate2's ``inter_threads``,
and for the SavedModel as many concurrent signature calls (``SavedModelTranslator``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor


def map_batches(
    run: Callable, chunks: Sequence, parallel: int = 1, progress: bool = False
) -> Iterator:
    """``(chunk, run(chunk))`` for every chunk, in order; ``parallel`` chunks at once."""
    pool = ThreadPoolExecutor(parallel, thread_name_prefix="translate") if parallel > 1 else None
    results = (pool.map if pool else map)(lambda chunk: (chunk, run(chunk)), chunks)
    if progress:
        from tqdm import tqdm

        results = tqdm(results, "translating", len(chunks), unit="batch", file=sys.stderr)
    try:
        yield from results
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
