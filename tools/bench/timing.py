"""Timing shared by the cases and their workers: medians of paired and interleaved runs."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

__all__ = ["interleaved", "paired"]


def _nothing() -> None:
    return None


def paired(
    a: Callable[[], object],
    b: Callable[[], object],
    *,
    number: int,
    repeat: int = 41,
    before: tuple[Callable[[], object], Callable[[], object]] | None = None,
) -> tuple[float, float, float]:
    """Seconds per call of ``a`` and ``b`` and their ratio, robust to drift and order.

    Each round times ``a`` and ``b`` back to back, in alternating order; the result is
    the median time of each and the median of the per-round ratios ``a / b``.
    ``before``, when given, is a pair of untimed calls that put the process in the state
    ``a`` and ``b`` are each measured in (run before each of their timed runs).
    """
    ta: list[float] = []
    tb: list[float] = []
    ratios: list[float] = []
    setup_a, setup_b = before if before is not None else (_nothing, _nothing)
    for round_ in range(repeat):
        order = ((a, ta, setup_a), (b, tb, setup_b))
        if round_ % 2:
            order = order[::-1]
        for fn, out, setup in order:
            setup()
            start = time.perf_counter()
            for _ in range(number):
                fn()
            out.append((time.perf_counter() - start) / number)
        ratios.append(ta[-1] / tb[-1])
    return statistics.median(ta), statistics.median(tb), statistics.median(ratios)


def interleaved(
    a: Callable[[], object],
    b: Callable[[], object],
    *,
    number: int,
    repeat: int = 9,
    sync: Callable[[], object] | None = None,
) -> tuple[float, float]:
    """Medians of seconds per call for ``a`` and ``b``, measured in alternation.

    ``sync``, when given, runs before each measurement: the workers pass
    ``dist.barrier``, so every rank times the same call at the same moment.
    """
    ta: list[float] = []
    tb: list[float] = []
    for _ in range(repeat):
        for fn, out in ((a, ta), (b, tb)):
            if sync is not None:
                sync()
            start = time.perf_counter()
            for _ in range(number):
                fn()
            out.append((time.perf_counter() - start) / number)
    return statistics.median(ta), statistics.median(tb)
