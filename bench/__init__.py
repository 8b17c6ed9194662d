"""Benchmarks of the sandbox against the alternatives (``make bench``; see bench/README.md)."""
