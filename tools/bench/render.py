"""The benchmark's outputs, rendered from what the cases measured.

``bench.json`` (every case's rows with the run that measured them), ``bench.md`` (the
table docs/benchmarks.md includes), ``busbw.md`` (every size of the bus-bandwidth
sweep), ``busbw.svg`` (its plot, drawn by tools/bench/plot.py) and the headline table
in the README's Benchmarks section. Nothing here measures anything.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.bench.plot import Series, svg_plot
from tools.bench.rows import Point, Row

__all__ = [
    "HEADLINES",
    "OPERATION_NAMES",
    "README_TABLE",
    "Headline",
    "busbw_markdown",
    "busbw_svg",
    "format_bandwidth",
    "format_bytes",
    "format_value",
    "header_line",
    "load_results",
    "readme_table",
    "rewrite_readme",
    "to_markdown",
    "write_outputs",
]

Cases = Mapping[str, Mapping[str, Any]]
"""bench.json's ``cases``: by case name, its ``meta``, ``rows`` and optional ``data``."""

OPERATION_NAMES = {"all_reduce": "all-reduce", "all_gather": "all-gather"}
TIMES = "\N{MULTIPLICATION SIGN}"
"""The README's sign in "64 times dist.all_reduce" and "45 times faster"."""


def format_value(value: float, unit: str) -> str:
    if unit == "s":
        for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
            if value >= scale:
                return f"{value / scale:.3g} {name}"
        return f"{value * 1e9:.3g} ns"
    if unit == "MiB":
        return f"{value:.1f} MiB"
    if unit == "GB/s":
        return format_bandwidth(value)
    if unit == "instructions":
        return f"{value:,.0f} instructions"
    return f"{value:.3g} {unit}"


def format_bandwidth(gbps: float) -> str:
    """A bandwidth given in GB/s (10**9 bytes per second), in the unit that suits it."""
    for scale, name in ((1.0, "GB/s"), (1e-3, "MB/s"), (1e-6, "kB/s")):
        if gbps >= scale:
            return f"{gbps / scale:.3g} {name}"
    return f"{gbps * 1e9:.3g} B/s"


def format_bytes(size: float) -> str:
    """A byte count with a binary unit: ``4 B``, ``64 KiB``, ``16 MiB``."""
    for scale, name in ((1024.0**3, "GiB"), (1024.0**2, "MiB"), (1024.0, "KiB")):
        if size >= scale:
            return f"{size / scale:.3g} {name}"
    return f"{size:.0f} B"


def to_markdown(rows: Sequence[Row]) -> str:
    lines = [
        "| case | helios | alternative | helios | alternative | ratio | goal | met |",
        "|---|---|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        ratio = (
            format_value(r.ratio, "s") if r.ratio_meaning.startswith("added") else f"{r.ratio:.3g}"
        )
        lines.append(
            f"| {r.case} | `{r.helios}` | `{r.alternative}` "
            f"| {format_value(r.helios_value, r.unit)} "
            f"| {format_value(r.alternative_value, r.unit)} | {ratio} ({r.ratio_meaning}) "
            f"| {r.goal} | {'yes' if r.met else 'no'} |"
        )
    return "\n".join(lines)


def _setup(meta: Mapping[str, str]) -> str:
    return f"Python {meta['python']}, torch {meta['torch']}, {meta['machine']}"


def header_line(cases: Cases) -> str:
    """One line naming the run or runs behind the cases, in their order in ``cases``.

    A single run reads ``Python 3.11.7, torch 2.5.1, x86_64, 2 CPUs, gloo over
    127.0.0.1, 2026-12-01.``; cases measured in several runs list each run's date and
    cases (and its Python, torch and machine when those differ too).
    """
    runs: dict[tuple[str, str], list[str]] = {}
    for name, entry in cases.items():
        meta = entry["meta"]
        runs.setdefault((_setup(meta), meta["date"]), []).append(name)
    setups = {setup for setup, _ in runs}
    if len(runs) == 1:
        ((setup, day),) = runs
        return f"{setup}, gloo over 127.0.0.1, {day}."
    if len(setups) == 1:
        parts = [f"{day} ({', '.join(names)})" for (_, day), names in runs.items()]
        return f"{setups.pop()}, gloo over 127.0.0.1; measured on {'; '.join(parts)}."
    parts = [f"{setup}, {day} ({', '.join(names)})" for (setup, day), names in runs.items()]
    return f"Gloo over 127.0.0.1; measured with {'; '.join(parts)}."


def load_results(path: Path, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The cases among ``names`` stored in ``bench.json``; none when there is no file.

    Raises:
        ValueError: The file is not the per-case layout this tool writes.
    """
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    cases = data.get("cases") if isinstance(data, dict) else None
    if not isinstance(cases, dict):
        message = (
            f"{path} holds no 'cases' mapping, so its rows cannot be kept; run every case "
            "(uv run python -m tools.bench), which writes it afresh"
        )
        raise ValueError(message)
    return {name: cases[name] for name in names if name in cases}


def write_outputs(out: Path, cases: Cases) -> str:
    """Write ``bench.json``, ``bench.md`` and the busbw table and plot; return bench.md.

    Args:
        out: The folder, tools/results.
        cases: Every case to keep, in the order of the table.
    """
    rows = [Row(**r) for entry in cases.values() for r in entry["rows"]]
    text = f"{header_line(cases)}\n\n{to_markdown(rows)}\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps({"cases": cases}, indent=2) + "\n")
    (out / "bench.md").write_text(text)
    busbw = cases.get("busbw")
    if busbw is not None:
        header = header_line({"busbw": busbw})
        (out / "busbw.md").write_text(busbw_markdown(header, busbw["data"]))
        (out / "busbw.svg").write_text(busbw_svg(busbw["data"]))
    return text


def busbw_markdown(header: str, data: dict[str, Any]) -> str:
    """The whole sweep as a Markdown table, under its run's header line."""
    sweep: list[Point] = data["sweep"]
    lines = [
        header,
        "",
        f"Two ranks, float32, {data['iters']} timed calls after {data['warmup']} warm-up calls "
        f"per size, the slowest rank's time; the best of {data['rounds']} runs of each sweep, "
        "alternating. The ratio is helios's bus bandwidth over torch's (above 1: helios "
        "is faster).",
        "",
        "| operation | size | helios time | torch time | helios bus bandwidth "
        "| torch bus bandwidth | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in sweep:
        lines.append(
            f"| {OPERATION_NAMES[p['operation']]} | {format_bytes(p['size_bytes'])} "
            f"| {format_value(p['helios_latency_us'] * 1e-6, 's')} "
            f"| {format_value(p['torch_latency_us'] * 1e-6, 's')} "
            f"| {format_bandwidth(p['helios_busbw_gbps'])} "
            f"| {format_bandwidth(p['torch_busbw_gbps'])} "
            f"| {p['ratio']:.3g} |"
        )
    return "\n".join(lines) + "\n"


def busbw_svg(data: Mapping[str, Any]) -> str:
    """Bus bandwidth over message size: both sweeps, both operations."""
    sweep: list[Point] = data["sweep"]
    colors = {"all_reduce": "#2a6fb0", "all_gather": "#d4731c"}
    series = []
    for operation, name in OPERATION_NAMES.items():
        points = [p for p in sweep if p["operation"] == operation]
        for source, label, dashed in (
            ("helios", "python -m helios_collectives", False),
            ("torch", f"{data['calls'][operation]} loop", True),
        ):
            series.append(
                Series(
                    f"{name}: {label}",
                    [(float(p["size_bytes"]), p[f"{source}_busbw_gbps"]) for p in points],
                    colors[operation],
                    dashed=dashed,
                )
            )
    sizes = sorted({float(p["size_bytes"]) for p in sweep if p["operation"] == "all_reduce"})
    return svg_plot(
        series,
        title="Bus bandwidth over message size, 2 ranks, gloo over 127.0.0.1",
        x_label="message size",
        y_label="bus bandwidth",
        x_ticks=[(size, format_bytes(size)) for size in sizes[::2]],
        y_format=format_bandwidth,
    )


@dataclass(frozen=True)
class Headline:
    """A row of the README's benchmark table and the bench.json row it quotes."""

    label: str
    case: str
    """The quoted row's ``case``."""
    helios: str
    """The quoted row's ``helios``."""
    helios_shown: str
    alternative_shown: str


HEADLINES = (
    Headline(
        "import time",
        "import time",
        "import helios_env, helios_log",
        "`import helios_env, helios_log`",
        "`import torch.distributed`",
    ),
    Headline(
        "a `global_print` that does not print",
        "gating: global_print on a rank that does not print",
        "helios_log.global_print",
        "`helios_log.global_print`",
        "helios-ml 2.0.1's `global_print`",
    ),
    Headline(
        "per call, 1 element, world size one",
        "per-call cost, 1 element, world size one (gloo)",
        "all_reduce_tensors",
        "`all_reduce_tensors`",
        "`dist.all_reduce`",
    ),
    Headline(
        "all-reduce of 64 tensors of 16 floats",
        "coalescing: all-reduce of 64 tensors of 16 floats",
        "all_reduce_tensors(list)",
        "`all_reduce_tensors(list)`",
        f"64 {TIMES} `dist.all_reduce`",
    ),
    Headline(
        "a 2-rank test (init, all-reduce, destroy)",
        "2-rank test: init, all-reduce, destroy (median of 30)",
        "@pytest.mark.ranks(2), fresh ranks from the forkserver",
        "`@pytest.mark.ranks(2)`",
        "`torch.multiprocessing.spawn`",
    ),
    Headline(
        "a 2-rank DDP test (construct, forward, backward, step)",
        "2-rank DDP test: construct, forward, backward, step, fresh ranks",
        "@pytest.mark.ranks(2), torch's DDP stack preloaded",
        "`@pytest.mark.ranks(2)`",
        "`torch.multiprocessing.spawn`",
    ),
    Headline(
        "SLURM hostlist of 10,000 nodes",
        "hostlist: 10,000 nodes, one padded range",
        "expand_hostlist(n[00001-10000])",
        "`expand_hostlist`",
        "python-hostlist",
    ),
)
"""The README's benchmark table, row by row."""

SPEED_UP = "alternative / helios (speed-up)"


def _headline_ratio(row: Row) -> str:
    """helios / alternative, as the README shows it (with the speed-up where a row has one)."""
    if row.ratio_meaning == SPEED_UP:
        ratio = 1 / row.ratio
        return f"{ratio:.2g} ({row.ratio:.0f}{TIMES} faster)"
    return f"{row.ratio:.2g}" if row.ratio < 1 else f"{row.ratio:.3g}"


def readme_table(cases: Cases) -> str:
    """The README's benchmark table, each ratio quoted from its row in ``cases``.

    Raises:
        ValueError: A headline's row is not in ``cases``.
    """
    rows: dict[tuple[str, str], Row] = {}
    for entry in cases.values():
        for raw in entry["rows"]:
            # Where several rows share a case and a helios side, the first is quoted.
            rows.setdefault((raw["case"], raw["helios"]), Row(**raw))
    lines = ["| case | helios | alternative | ratio |", "|---|---|---|---:|"]
    for headline in HEADLINES:
        row = rows.get((headline.case, headline.helios))
        if row is None:
            message = (
                f"bench.json has no row {headline.case!r} for {headline.helios!r}, which the "
                "README quotes; run that case (uv run python -m tools.bench CASE)"
            )
            raise ValueError(message)
        lines.append(
            f"| {headline.label} | {headline.helios_shown} | {headline.alternative_shown} "
            f"| {_headline_ratio(row)} |"
        )
    return "\n".join(lines) + "\n"


README_TABLE = re.compile(r"^\| case \| helios \| alternative \| ratio \|\n(?:\|.*\n)+", re.M)
"""The table in the README's Benchmarks section."""


def rewrite_readme(readme: Path, cases: Cases) -> None:
    """Replace the README's benchmark table with :func:`readme_table`.

    Raises:
        ValueError: The README has no benchmark table where this looks for it.
    """
    text = readme.read_text(encoding="utf-8")
    if README_TABLE.search(text) is None:
        message = f"{readme} has no '| case | helios | alternative | ratio |' table to rewrite"
        raise ValueError(message)
    readme.write_text(README_TABLE.sub(lambda _: readme_table(cases), text, count=1))
