"""``inference/batching.py``: batches one after another or several at once, in order."""

import threading

import pytest

from keras_transformer.inference.batching import map_batches

# Only keeps a broken pool from hanging the test forever: no assertion is about speed.
HANG_GUARD_S = 60


def test_two_batches_run_at_once_and_come_back_in_order():
    """Each of the first two calls waits inside ``run`` for the other to arrive: both return only
    if they ran at the same time, in two threads of the pool."""
    both_running = threading.Barrier(2, timeout=HANG_GUARD_S)
    threads = {}

    def run(chunk):
        threads[chunk[0]] = threading.get_ident()
        if chunk[0] < 2:
            both_running.wait()
        return [i * 10 for i in chunk]

    chunks = [[0], [1], [2, 3], [4]]
    assert list(map_batches(run, chunks, parallel=2)) == [
        ([0], [0]),
        ([1], [10]),
        ([2, 3], [20, 30]),
        ([4], [40]),
    ]
    assert not both_running.broken
    assert threads[0] != threads[1] and threading.get_ident() not in threads.values()


def test_one_at_a_time_runs_each_batch_in_the_callers_thread_after_the_last():
    """``parallel=1``: every call runs in the consumer's own thread, so no two overlap; each
    starts when the consumer asks for its result."""
    calls = []

    def run(chunk):
        calls.append((chunk, threading.get_ident()))
        return chunk * 10

    me = threading.get_ident()
    results = map_batches(run, [0, 1, 2], parallel=1)
    assert next(results) == (0, 0)
    assert calls == [(0, me)]  # nothing ran ahead
    assert list(results) == [(1, 10), (2, 20)]
    assert calls == [(0, me), (1, me), (2, me)]


def test_an_error_reaches_the_caller_and_an_early_stop_cancels_the_rest():
    started = []

    def run(chunk):
        started.append(chunk)
        if chunk == 1:
            raise ValueError("bad batch 1")
        return chunk

    with pytest.raises(ValueError, match="bad batch 1"):
        list(map_batches(run, [0, 1, 2], parallel=2))
    started.clear()
    results = map_batches(lambda c: started.append(c) or c, list(range(100)), parallel=1)
    assert next(results) == (0, 0)
    results.close()  # the consumer stops: nothing more runs
    assert started == [0]
