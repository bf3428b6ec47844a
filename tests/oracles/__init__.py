"""Independent references the tests compare the library with: the uncached decoder and
fixed-size batches (benchmarks use them as baselines)."""
