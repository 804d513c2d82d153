"""``python -m tools.bench [CASE ...]``: run the cases (default: all), keep each case's rows
in ``tools/results/bench.json`` with the run that measured them, and rewrite from that file
``bench.md``, ``busbw.svg`` and the README's table (``--no-run``: only that)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from typing import Any

from tools.bench import busbw, exchange, ranks, single, stragglers
from tools.bench.common import ROOT, Measured
from tools.bench.render import bench_table, rewrite_readme

__all__ = ["CASES", "main"]

OUT = ROOT / "tools" / "results"
CASES: dict[str, Callable[[], Measured]] = {
    "import": single.imports,
    "gating": single.gating,
    "call-instructions": single.instructions,
    "collectives": partial(ranks.on_ranks, "collectives", 2),
    "check": partial(ranks.on_ranks, "check", 2, 8),
    "hostlist": single.hostlists,
    "checkpoint": single.checkpoints,
    "ranks": ranks.plugin,
    "busbw": busbw.run,
    "preemption": partial(ranks.on_ranks, "preemption", 2, 8, 32),
    "agreement": partial(ranks.on_ranks, "agreement", 2, 8),
    "reporter": partial(ranks.on_ranks, "reporter", 2, 8),
    "exchange": exchange.exchange,
    "scale": partial(ranks.on_ranks, "scale", 8, 16, 32, 64),
    "stragglers": stragglers.detection,
    "straggler-cost": partial(ranks.on_ranks, "stragglers", 2, 8),
}
"""Every case by its command-line name, in the order of the table."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__)
    parser.add_argument("cases", nargs="*", choices=[*CASES, []], help="default: all")
    parser.add_argument("--no-run", action="store_true", help="measure nothing")
    args = parser.parse_args(argv)
    selected = [] if args.no_run else args.cases or list(CASES)
    stored: dict[str, Any] = {}  # each case measured replaces its entry; all start afresh
    if set(selected) != set(CASES):
        stored = json.loads((OUT / "bench.json").read_text(encoding="utf-8"))["cases"]
    for name in selected:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        started, (rows, data) = time.monotonic(), CASES[name]()
        import torch

        meta: dict[str, object] = {"python": platform.python_version(), "torch": torch.__version__}
        meta |= {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs"}
        meta |= {"date": time.strftime("%Y-%m-%d"), "seconds": round(time.monotonic() - started)}
        stored[name] = {"meta": meta, "rows": [asdict(r) for r in rows], "data": data}
    cases = {name: stored[name] for name in CASES if name in stored}
    (OUT / "bench.json").write_text(json.dumps({"cases": cases}, indent=2) + "\n")
    (OUT / "bench.md").write_text(bench_table(cases))
    if "busbw" in cases:
        busbw.plot(cases["busbw"]["data"], OUT / "busbw.svg")
    rewrite_readme(ROOT / "README.md", cases)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
