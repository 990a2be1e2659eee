"""Benchmarks that print figures, each with its sample (`python -m bench.NAME --help`)."""
