"""Benchmarks against the dev control plane (see bench/README.md)."""
