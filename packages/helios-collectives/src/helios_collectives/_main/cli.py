"""``python -m helios_collectives``: check and benchmark a distributed setup.

Run plainly it uses world size one (a local store, no rendezvous port); under torchrun it
uses every process and node. It reports the environment as helios-env sees it, whether
every rank runs the same software and settings, when each node's ranks started (process,
helios, torch, init, store, group, first collective), and each rank's device binding,
verifies every collective against values computed locally (naming any rank whose
result differs), measures point-to-point latency and bandwidth between every pair of
nodes (naming the slowest link and the node common to the slow links), and measures
latency and bandwidth of all-reduce and all-gather over a sweep of message sizes. Rank
0 prints; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

import torch
import torch.distributed as dist

from helios_collectives._errors import SizeSpecError
from helios_collectives._main.consistency import Consistency, gather_consistency
from helios_collectives._main.link_report import Links
from helios_collectives._main.links import measure_links
from helios_collectives._main.sizes import format_bytes, parse_sizes
from helios_collectives._main.startup import Startup, gather_startup
from helios_collectives._main.sweep import SweepPoint, run_sweep
from helios_collectives._main.table import table
from helios_collectives._main.verify import CheckResult, run_checks
from helios_collectives._objects import gather_objects
from helios_env import (
    DistributedInfo,
    EnvironmentReport,
    LauncherEnvError,
    inspect_environment,
)
from helios_pg import ProcessGroupInitError, local_device, process_group

__all__ = ["main"]

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
DEFAULT_SIZES = "4B:64MiB"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m helios_collectives",
        description=(
            "Check and benchmark a distributed setup: environment, agreement of the ranks, "
            "device binding, the result of every collective, point-to-point links between "
            "nodes, and all-reduce / all-gather latency and bandwidth. "
            "Run plainly (world size one) or under torchrun. Exit status 1 when a check "
            "fails, 2 for a bad argument or environment."
        ),
    )
    parser.add_argument(
        "--sizes",
        default=DEFAULT_SIZES,
        help="message sizes: MIN:MAX[:FACTOR] (factor 4 by default) or a list such as "
        f"8,1K,1MiB (default {DEFAULT_SIZES})",
    )
    parser.add_argument("--iters", type=int, default=20, help="timed operations per size")
    parser.add_argument("--warmup", type=int, default=5, help="untimed operations per size")
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="PATH",
        help="write the results as JSON to PATH, or to stdout without PATH",
    )
    parser.add_argument("--backend", default=None, help="process-group backend (default: auto)")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="process-group timeout in seconds"
    )
    parser.add_argument(
        "--no-bench", action="store_true", help="run the checks only: no links, no sweep"
    )
    return parser


LOCAL_COPY = (
    "one rank: nothing crosses a link; an all-reduce moves nothing (no-op), an all-gather's "
    "algbw is the rate of a local copy, not a transfer, and busbw is 0 (run under "
    "torchrun for a transfer)"
)
NO_OP = "no-op"
"""The bandwidth cells of a collective that moves nothing at one rank."""


def _binding(device: torch.device, info: DistributedInfo) -> dict[str, Any]:
    return {
        "rank": info.rank,
        "local_rank": info.local_rank,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "device": str(device),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "backend": str(dist.get_backend()),
    }


def _print_text(
    out: TextIO,
    env_text: str,
    *,
    sections: tuple[Consistency, Links | None, Startup],
    bindings: list[dict[str, Any]],
    checks: list[CheckResult],
    points: list[SweepPoint],
) -> None:
    consistency, links, startup = sections
    print(env_text, file=out)
    print(f"\n{consistency.format()}", file=out)
    print(f"\n{startup.format()}", file=out)
    print("\ndevice binding", file=out)
    rows = [
        [str(b["rank"]), str(b["local_rank"]), b["host"], str(b["pid"]), b["device"], b["backend"]]
        for b in bindings
    ]
    print(table(["rank", "local", "host", "pid", "device", "backend"], rows, {0, 1, 3}), file=out)
    print("\ncollective checks", file=out)
    for result in checks:
        verdict = "ok" if result.passed else "FAILED"
        print(f"  {verdict:<6}  {result.name}", file=out)
        for rank, why in sorted(result.failures.items()):
            print(f"          rank {rank}: {why}", file=out)
    if links is not None:
        print(f"\n{links.format()}", file=out)
    if points:
        world = max(len(bindings), 1)  # one binding per rank
        ranks = "1 rank" if world == 1 else f"{world} ranks"
        print(f"\nbenchmark (float32, {ranks}, slowest rank's time)", file=out)
        if world == 1:
            print(LOCAL_COPY, file=out)
        rows = [
            [
                p.operation,
                format_bytes(p.size_bytes),
                f"{p.latency_us:.1f}",
                *(
                    [NO_OP, NO_OP]
                    if world == 1 and p.operation == "all_reduce"
                    else [f"{p.algbw_gbps:.3g}", f"{p.busbw_gbps:.3g}"]
                ),
            ]
            for p in points
        ]
        headers = ["operation", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)"]
        print(table(headers, rows, {1, 2, 3, 4}), file=out)


def _emit(
    json_target: str | None,
    report: EnvironmentReport,
    *,
    sections: tuple[Consistency, Links | None, Startup],
    bindings: list[dict[str, Any]],
    checks: list[CheckResult],
    points: list[SweepPoint],
) -> None:
    consistency, links, startup = sections
    passed = all(c.passed for c in checks) and not consistency.software_differs
    if json_target is None:
        _print_text(
            sys.stdout,
            report.format(),
            sections=sections,
            bindings=bindings,
            checks=checks,
            points=points,
        )
    else:
        data = {
            "ok": passed,
            "environment": report.as_dict(),
            "consistency": consistency.as_dict(),
            "startup": startup.as_dict(),
            "bindings": bindings,
            "checks": [asdict(c) for c in checks],
            "links": None if links is None else links.as_dict(),
            "benchmark": [asdict(p) for p in points],
            # One rank moves nothing: its bandwidth is a local copy's (LOCAL_COPY).
            "local_copy": len(bindings) == 1,
        }
        text = json.dumps(data, indent=2)
        if json_target == "-":
            print(text)
        else:
            Path(json_target).write_text(text + "\n", encoding="utf-8")
    if not passed:
        failed = [c.name for c in checks if not c.passed]
        failed += ["consistency"] if consistency.software_differs else []
        print(f"helios-collectives: FAILED checks: {', '.join(failed)}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check and benchmark.

    Args:
        argv: Command-line arguments without the program name; ``sys.argv[1:]`` when
            omitted.

    Returns:
        0 when every check passed, 1 when one failed, 2 for a bad argument, a
        malformed launcher environment, or a process group that could not be created.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        sizes = parse_sizes(args.sizes)
    except SizeSpecError as exc:
        parser.error(str(exc))
    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        parser.error(f"--timeout must be a positive, finite number of seconds, got {args.timeout}")
    if args.iters < 1 or args.warmup < 0:
        parser.error(f"--iters must be >= 1 and --warmup >= 0, got {args.iters} and {args.warmup}")
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(
                process_group(backend=args.backend, timeout=timedelta(seconds=args.timeout))
            )
        except (ValueError, ProcessGroupInitError) as exc:
            # A malformed launcher variable (init checks them first), a backend or device
            # that cannot run here, or a rendezvous that failed: the setup is at fault.
            what = (
                "invalid environment"
                if isinstance(exc, LauncherEnvError)
                else "cannot create the process group"
            )
            print(f"helios-collectives: {what}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        rank = dist.get_rank()
        # Progress only where someone watches it: one line, rewritten, on a terminal.
        progress = sys.stderr if rank == 0 and sys.stderr.isatty() else None
        device = local_device()
        report = inspect_environment()
        bindings = gather_objects(_binding(device, report.info))
        startup = gather_startup(time.time())  # the first collective has returned
        consistency = gather_consistency(device)
        if progress:
            print("helios-collectives: verifying collectives", end="", file=progress, flush=True)
        try:
            checks = run_checks(device)
        finally:
            if progress:
                print("\r\033[K", end="", file=progress, flush=True)  # the line goes
        points: list[SweepPoint] = []
        links = None
        if not args.no_bench:
            links = measure_links(consistency.hosts, device)
            points = run_sweep(
                sizes, device=device, iters=args.iters, warmup=args.warmup, progress=progress
            )
        passed = all(c.passed for c in checks) and not consistency.software_differs
        try:
            if rank == 0:
                _emit(
                    args.json,
                    report,
                    sections=(consistency, links, startup),
                    bindings=bindings,
                    checks=checks,
                    points=points,
                )
        finally:
            if not passed:
                # Every rank has the same verdict. A rank that exits non-zero makes
                # torchrun stop the others, so none leaves before rank 0 has reported.
                dist.barrier()
        return EXIT_OK if passed else EXIT_CHECK_FAILED
