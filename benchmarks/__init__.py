"""Benchmark scripts and the benchmark-only helpers they share (not part of the library API)."""
