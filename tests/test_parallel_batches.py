"""``inference/batching.py``: batches one after another or several at once, in order."""

import threading

import pytest

from keras_transformer.inference.batching import map_batches


def test_two_batches_run_at_once_and_come_back_in_order():
    both_running = threading.Barrier(2, timeout=2)  # breaks unless two calls overlap

    def run(chunk):
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
    with pytest.raises(threading.BrokenBarrierError):  # one at a time: the barrier times out
        list(map_batches(run, chunks[:2], parallel=1))


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
