"""Work in steps: a generator that pauses (a bare yield) between steps and returns its result,
so that a long answer (a page of links, a diagnosis) can be run in slices of the event loop
by the admin service, or at once by everyone else."""

from __future__ import annotations

from collections.abc import Generator
from typing import TypeVar

T = TypeVar("T")


def finish(steps: Generator[None, None, T]) -> T:
    """Run `steps` to its end at once; its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: T = done.value
            return result
