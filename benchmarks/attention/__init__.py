"""Benchmarks: see benchmarks/README.md."""
