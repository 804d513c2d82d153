"""What the cases share: a table row, the paired timing, a child process checked."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.procs import run_processes

__all__ = ["ROOT", "SPEED_UP", "Measured", "Row", "format_value", "paired", "row", "run_checked"]

ROOT = Path(__file__).resolve().parents[2]
SPEED_UP = "alternative / helios (speed-up)"
_SCALES = {
    "s": ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")),
    "GB/s": ((1.0, "GB/s"), (1e-3, "MB/s"), (1e-6, "kB/s"), (1e-9, "B/s")),
    "B": ((2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"), (1.0, "B")),
}


@dataclass(frozen=True)
class Row:
    case: str
    helios: str
    alternative: str
    helios_value: float
    alternative_value: float
    unit: str
    ratio: float
    ratio_meaning: str
    goal: str
    met: bool
    headline: bool = False
    """Quoted in the README's table."""


Call = Callable[[], object]
Measured = tuple[list[Row], dict[str, Any]]
"""What a case gives back: its rows, and the data its plot is drawn from."""


def row(
    case: str,
    helios: str,
    alternative: str,
    measured: Sequence[float],
    *,
    unit: str = "s",
    speed_up: bool = False,
    meaning: str = "helios / alternative",
    goal: str = "report",
    headline: bool = False,
) -> Row:
    """helios's value, the alternative's, and the ratio: ``measured[2]`` where given (the
    median ratio of :func:`paired`), else ``measured[0] / measured[1]``, turned over by
    ``speed_up``. A goal ``<= x`` or ``>= x`` is on the ratio, ``helios <= x ms`` on
    helios's time; any other (``report``) has none."""
    ours, theirs = measured[0], measured[1]
    ratio = measured[2] if len(measured) > 2 else ours / theirs
    if speed_up:
        ratio, meaning = 1 / ratio, SPEED_UP
    op, _, limit = goal.removeprefix("helios ").removesuffix(" ms").partition(" ")
    value = ours * 1e3 if goal.startswith("helios ") else ratio
    met = value <= float(limit) if op == "<=" else value >= float(limit) if op == ">=" else True
    return Row(case, helios, alternative, ours, theirs, unit, ratio, meaning, goal, met, headline)


def format_value(value: float, unit: str) -> str:
    if unit in _SCALES:
        scale, name = next((s for s in _SCALES[unit] if value >= s[0]), _SCALES[unit][-1])
        return f"{value / scale:.3g} {name}"
    return f"{value:,.0f} {unit}" if unit == "instructions" else f"{value:.3g} {unit}"


def paired(
    a: Call, b: Call, *, number: int, repeat: int = 41, before: Call | None = None
) -> tuple[float, float, float]:
    """Median seconds per call of ``a`` and ``b``, and median ratio, of rounds that time
    ``number`` calls of each in turn, which goes first alternating, after ``before``."""
    times: tuple[list[float], list[float]] = ([], [])
    for round_ in range(repeat):
        for fn, out in ((a, times[0]), (b, times[1]))[:: -1 if round_ % 2 else 1]:
            if before is not None:
                before()
            start = time.perf_counter()
            for _ in range(number):
                fn()
            out.append((time.perf_counter() - start) / number)
    ratios = [x / y for x, y in zip(*times, strict=True)]
    return statistics.median(times[0]), statistics.median(times[1]), statistics.median(ratios)


def run_checked(command: list[str], env: Mapping[str, str], limit: float, cwd: str = ".") -> str:
    """Run ``command`` in a session of its own, killed at ``limit`` s: its stdout, or
    RuntimeError with its output if it failed."""
    [finished] = run_processes([(command, env)], limit=limit, cwd=cwd)
    if finished.returncode != 0:
        raise RuntimeError(f"{command[:4]} failed:\n{finished.describe()[-4000:]}")
    return finished.stdout
