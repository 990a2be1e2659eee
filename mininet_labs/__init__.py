"""Mininet scenarios: the fabric intent run end to end with real packets
(docs/architecture.md §8)."""
