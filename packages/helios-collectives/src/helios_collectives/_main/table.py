"""Aligned text tables for the main job's report."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["table"]


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> str:
    """Lay out rows under headers, with a rule, columns ``right`` aligned to the right.

    Args:
        headers: The column names.
        rows: The cells, one sequence per row, as many as there are headers.
        right: Indexes of the columns aligned to the right (numbers).

    Returns:
        The lines, without a trailing newline.
    """
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])
