"""Mininet scenarios: the fabric intent run end to end with real packets (ARCHITECTURE §8)."""
