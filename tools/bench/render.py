"""``bench.md``, the table docs/benchmarks.md includes, and the README's table of the
``headline`` rows, rendered from ``bench.json``'s cases."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tools.bench.common import SPEED_UP, Row, format_value

__all__ = ["README_TABLE", "bench_table", "readme_table", "rewrite_readme"]

Cases = Mapping[str, Mapping[str, Any]]
"""bench.json's ``cases``: by case name, its ``meta``, ``rows`` and optional ``data``."""
README_TABLE = re.compile(r"^\| case \| helios \| alternative \| ratio \|\n(?:\|.*\n)+", re.M)


def bench_table(cases: Cases) -> str:
    """A line naming the runs behind ``cases`` (and the cases each measured), the table."""
    runs: dict[str, str] = {}
    for name, entry in cases.items():
        m = entry["meta"]
        run = f"Python {m['python']}, torch {m['torch']}, {m['machine']}, {m['date']}"
        runs[run] = f"{runs[run]}, {name}" if run in runs else name
    lines = [
        f"Gloo over 127.0.0.1; {'; '.join(f'{r} ({n})' for r, n in runs.items())}.\n",
        "| python -m tools.bench | case | helios | alternative | helios | alternative | ratio "
        "| goal | met |",
        "|---|---|---|---|---:|---:|---:|---|---|",
    ]
    for name, r in ((n, Row(**raw)) for n, entry in cases.items() for raw in entry["rows"]):
        values = [format_value(v, r.unit) for v in (r.helios_value, r.alternative_value)]
        lines.append(
            f"| `{name}` | {r.case} | `{r.helios}` | `{r.alternative}` | {' | '.join(values)} "
            f"| {r.ratio:.3g} ({r.ratio_meaning}) | {r.goal} | {'yes' if r.met else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def readme_table(cases: Cases) -> str:
    """The headline rows, each ratio as helios / alternative (below 1, helios takes less),
    with a speed-up beside it."""
    lines = ["| case | helios | alternative | ratio |", "|---|---|---|---:|"]
    for r in (Row(**raw) for entry in cases.values() for raw in entry["rows"]):
        ratio = f"{r.ratio:.2g}" if r.ratio < 1 else f"{r.ratio:.3g}"
        if r.ratio_meaning == SPEED_UP:
            ratio = f"{1 / r.ratio:.2g} ({r.ratio:.0f}\N{MULTIPLICATION SIGN} faster)"
        if r.headline:
            lines.append(f"| {r.case} | `{r.helios}` | `{r.alternative}` | {ratio} |")
    return "\n".join(lines) + "\n"


def rewrite_readme(readme: Path, cases: Cases) -> None:
    """Replace the README's benchmark table with :func:`readme_table`."""
    text = readme.read_text(encoding="utf-8")
    if README_TABLE.search(text) is None:
        raise ValueError(f"{readme} has no '| case | helios | alternative | ratio |' table")
    readme.write_text(README_TABLE.sub(lambda _: readme_table(cases), text, count=1))
