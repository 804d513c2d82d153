"""``python -m tools.bench [CASE ...]``: run the cases, then rewrite every output."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tools.bench import (
    busbw,
    call_cost,
    collectives,
    gating,
    hostlists,
    imports,
    init_cost,
    instructions,
    print_gates,
    ranks,
    scale,
)
from tools.bench.render import load_results, rewrite_readme, write_outputs
from tools.bench.rows import CaseResult, Settings

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "tools" / "results"
README = ROOT / "README.md"

CASES: dict[str, Callable[[Settings], CaseResult]] = {
    "import": imports.run,
    "gating": gating.run,
    "init": init_cost.run,
    "call-cost": call_cost.run,
    "call-instructions": instructions.run,
    "print-gates": print_gates.run,
    "collectives": collectives.run,
    "hostlist": hostlists.run,
    "ranks": ranks.run,
    "busbw": busbw.run,
    "scale": scale.run,
}
"""Every case by its command-line name, in the order of the table."""


def current_meta() -> dict[str, str]:
    """What a run is measured on: Python, torch, the machine, and the date."""
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "date": time.strftime("%Y-%m-%d"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench", description="helios benchmarks, as ratios in one run"
    )
    parser.add_argument("cases", nargs="*", choices=[*CASES, []], help="default: all")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--repeat", type=int, default=7, help="repetitions per measurement")
    parser.add_argument("--timeout", type=float, default=600, help="limit per worker run, s")
    parser.add_argument(
        "--no-run",
        action="store_true",
        help="measure nothing: rewrite the tables, the plot and the README's table",
    )
    parser.add_argument(
        "--no-readme", action="store_true", help="leave the README's benchmark table as it is"
    )
    args = parser.parse_args(argv)
    if args.no_run and args.cases:
        parser.error("--no-run measures nothing: give it no case names")
    selected = [] if args.no_run else args.cases or list(CASES)
    settings = Settings(repeat=args.repeat, timeout=args.timeout)
    # Every case measured now replaces its stored entry; running them all starts afresh.
    known = list(CASES)
    stored = {} if set(selected) == set(CASES) else load_results(args.out / "bench.json", known)
    for name in selected:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        result = CASES[name](settings)
        meta: dict[str, Any] = {**current_meta(), "seconds": round(time.monotonic() - started)}
        stored[name] = {"meta": meta, "rows": [asdict(r) for r in result.rows]}
        if result.data:
            stored[name]["data"] = result.data
    ordered = {name: stored[name] for name in CASES if name in stored}
    print(write_outputs(args.out, ordered), end="")
    if not args.no_readme:
        rewrite_readme(README, ordered)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
