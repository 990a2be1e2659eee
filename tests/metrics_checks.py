"""What the metrics tests share: a scrape of a daemon's /metrics, `promtool check metrics` on it
(Debian's promtool, package `prometheus`; a test that needs it is skipped, saying so, where it
is not installed), a scrape's samples by name and labels, and what a registry exports."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

PROMTOOL = shutil.which("promtool")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return str(reply.read().decode())


def promtool_check(text: str) -> None:
    """`promtool check metrics` finds nothing to say about `text` (lint included)."""
    if PROMTOOL is None:
        pytest.skip("promtool is not installed (Debian package prometheus, scripts/setup.sh)")
    done = subprocess.run(
        [PROMTOOL, "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr + done.stdout


def samples(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, frozenset(labels.items())))


def exported(registry: CollectorRegistry) -> dict[str, set[str]]:
    """Every sample name the registry's collectors export -> the label names it carries.
    Collects, so call it off the daemon's event loop (the collectors snapshot on it)."""
    out: dict[str, set[str]] = {}
    for family in registry.collect():
        labels = set(getattr(family, "_labelnames", ()))
        names = {
            "counter": [f"{family.name}_total"],
            "histogram": [f"{family.name}_{s}" for s in ("bucket", "count", "sum")],
            "info": [f"{family.name}_info"],
        }.get(family.type, [family.name])
        for name in names:
            out.setdefault(name, set()).update(labels)
        for s in family.samples:
            out.setdefault(s.name, set()).update(s.labels)
    return out
