"""What a benchmark case gives back: its table rows, and the settings it runs with."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CaseResult", "Point", "Row", "Settings", "at_most"]


@dataclass(frozen=True)
class Settings:
    """The command line's knobs that the cases read."""

    repeat: int
    """Repetitions per measurement (import, init)."""
    timeout: float
    """Seconds allowed to one run of the multi-process workers."""


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


def at_most(
    case: str,
    helios: str,
    alternative: str,
    values: tuple[float, float],
    unit: str,
    goal: float,
    *,
    ratio: float | None = None,
) -> Row:
    """A row whose goal is the ratio of helios's value to the alternative's, at most ``goal``.

    ``ratio`` is ``ours / theirs`` unless given (a median of paired ratios, say).
    """
    ours, theirs = values
    if ratio is None:
        ratio = ours / theirs
    return Row(
        case=case,
        helios=helios,
        alternative=alternative,
        helios_value=ours,
        alternative_value=theirs,
        unit=unit,
        ratio=ratio,
        ratio_meaning="helios / alternative",
        goal=f"<= {goal:g}",
        met=ratio <= goal,
    )


@dataclass(frozen=True)
class CaseResult:
    """What one case measured: its table rows, and any data its figures are drawn from."""

    rows: list[Row]
    data: dict[str, Any] = field(default_factory=dict)


Point = dict[str, Any]
"""One message size of a bus-bandwidth sweep, as the sweeps and bench.json hold it."""
