"""A line plot with both axes logarithmic, written as a standalone SVG document."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

__all__ = ["Series", "svg_plot"]


@dataclass(frozen=True)
class Series:
    """One line of a plot: its legend label, its (x, y) points, colour and dash."""

    label: str
    points: Sequence[tuple[float, float]]
    color: str
    dashed: bool = False


def svg_plot(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_ticks: Sequence[tuple[float, str]],
    y_format: Callable[[float], str],
    width: int = 760,
    height: int = 470,
) -> str:
    """A line plot with both axes logarithmic, as a standalone SVG document.

    Args:
        series: The lines; every point must be positive.
        title: The text above the plot.
        x_label: The horizontal axis's name.
        y_label: The vertical axis's name.
        x_ticks: Where the horizontal axis is labelled, and with what.
        y_format: How a value of the vertical axis is written; the axis is labelled at
            every power of ten in range.
        width: The document's width in pixels.
        height: The document's height in pixels.

    Returns:
        The SVG text.

    Raises:
        ValueError: A point is not positive, or there are no points at all.
    """
    xs = [x for s in series for x, _ in s.points]
    ys = [y for s in series for _, y in s.points]
    if not xs or min(xs) <= 0 or min(ys) <= 0:
        message = "svg_plot needs at least one point, and only positive x and y on log axes"
        raise ValueError(message)
    left, right, top, bottom = 92, 24, 46, 58
    plot_w, plot_h = width - left - right, height - top - bottom
    pad = 0.08 * (math.log10(max(xs)) - math.log10(min(xs)) or 1.0)
    x_lo, x_hi = math.log10(min(xs)) - pad, math.log10(max(xs)) + pad
    y_lo, y_hi = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    if y_hi == y_lo:
        y_hi += 1

    def px(x: float) -> float:
        return left + (math.log10(x) - x_lo) / (x_hi - x_lo) * plot_w

    def py(y: float) -> float:
        return top + (y_hi - math.log10(y)) / (y_hi - y_lo) * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="13">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{left + plot_w / 2:.1f}" y="26" text-anchor="middle" font-size="15" '
        f'fill="#222222">{escape(title)}</text>',
    ]
    for exponent in range(y_lo, y_hi + 1):
        y = py(10.0**exponent)
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#e2e2e2"/>'
        )
        out.append(
            f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end" fill="#333333">'
            f"{escape(y_format(10.0**exponent))}</text>"
        )
    for x_value, label in x_ticks:
        x = px(x_value)
        out.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" stroke="#e2e2e2"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{top + plot_h + 20}" text-anchor="middle" fill="#333333">'
            f"{escape(label)}</text>"
        )
    out.append(
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" '
        'stroke="#555555"/>'
    )
    out.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 12}" text-anchor="middle" '
        f'fill="#222222">{escape(x_label)} (log scale)</text>'
    )
    out.append(
        f'<text x="18" y="{top + plot_h / 2:.1f}" text-anchor="middle" fill="#222222" '
        f'transform="rotate(-90 18 {top + plot_h / 2:.1f})">{escape(y_label)} (log scale)'
        "</text>"
    )

    def marker(x: float, y: float, s: Series) -> str:
        # Dashed lines get open squares, solid lines filled dots: told apart without colour.
        if s.dashed:
            return (
                f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6" fill="#ffffff" '
                f'stroke="{s.color}" stroke-width="1.5"/>'
            )
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{s.color}"/>'

    for s in series:
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s.points)
        dash = ' stroke-dasharray="7 4"' if s.dashed else ""
        out.append(
            f'<polyline points="{coords}" fill="none" stroke="{s.color}" stroke-width="2"{dash}/>'
        )
        out.extend(marker(px(x), py(y), s) for x, y in s.points)
    row_h = 20
    legend_w = 12 + 36 + 8 + 7 * max(len(s.label) for s in series) + 12
    out.append(
        f'<rect x="{left + 12}" y="{top + 12}" width="{legend_w}" '
        f'height="{row_h * len(series) + 12}" fill="#ffffff" fill-opacity="0.92" '
        'stroke="#bbbbbb"/>'
    )
    for i, s in enumerate(series):
        y = top + 12 + 6 + row_h * i + row_h / 2
        x0 = left + 24
        dash = ' stroke-dasharray="7 4"' if s.dashed else ""
        out.append(
            f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + 36}" y2="{y:.1f}" stroke="{s.color}" '
            f'stroke-width="2"{dash}/>'
        )
        out.append(marker(x0 + 18, y, s))
        out.append(f'<text x="{x0 + 44}" y="{y + 4:.1f}" fill="#222222">{escape(s.label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
