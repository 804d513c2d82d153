"""The ``helios-env`` report: what was detected, and where each value came from."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

from helios_env._errors import LauncherEnvError
from helios_env._resolve import EnvironmentReport, inspect_environment

__all__ = ["format_report", "main", "report_as_dict"]

EXIT_INVALID = 2


def report_as_dict(report: EnvironmentReport) -> dict[str, object]:
    """Turn a report into plain JSON-ready data.

    Args:
        report: The report to convert.

    Returns:
        A dictionary of JSON types, with ``"valid": True``.
    """
    info = report.info
    return {
        "valid": True,
        "launcher": report.launcher.value,
        "process_group": report.process_group,
        "local_rank": info.local_rank,
        "rank": info.rank,
        "local_world_size": info.local_world_size,
        "world_size": info.world_size,
        "node_rank": report.node_rank,
        "num_nodes": report.num_nodes,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "master_addr": report.master_addr,
        "master_port": report.master_port,
        "sources": dict(report.sources),
    }


def format_report(report: EnvironmentReport) -> str:
    """Render a report as an aligned, human-readable table.

    Args:
        report: The report to render.

    Returns:
        The text, one line per value, each with its source in brackets.
    """
    info = report.info
    src = report.sources
    rendezvous = report.rendezvous or "not set (MASTER_ADDR / MASTER_PORT)"
    group = "live default group" if report.process_group else "none"
    rows = [
        ("launcher", str(report.launcher), ""),
        ("process group", group, ""),
        ("rank", f"{info.rank} of {info.world_size}", f"{src['rank']}, {src['world_size']}"),
        (
            "local rank",
            f"{info.local_rank} of {info.local_world_size}",
            f"{src['local_rank']}, {src['local_world_size']}",
        ),
        (
            "node",
            f"{report.node_rank} of {report.num_nodes}",
            f"{src['node_rank']}, {src['num_nodes']}",
        ),
        ("host", f"{socket.gethostname()} (pid {os.getpid()})", ""),
        ("rendezvous", rendezvous, ""),
    ]
    width = max(len(name) for name, _, _ in rows)
    lines = ["helios-env: distributed environment of this process"]
    for name, value, source in rows:
        suffix = f"  [{source}]" if source else ""
        lines.append(f"  {name:<{width}}  {value}{suffix}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="helios-env",
        description=(
            "Report the launcher, ranks, sizes, node and rendezvous address this process "
            "sees, and the variable each value came from. Exits with status 2 when a "
            "launcher variable is malformed."
        ),
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the report command.

    Args:
        argv: Command-line arguments, without the program name; ``sys.argv[1:]`` when
            omitted.
        environ: The environment to inspect; ``os.environ`` when omitted.
        stdout: Where the report goes; ``sys.stdout`` when omitted.
        stderr: Where errors go; ``sys.stderr`` when omitted.

    Returns:
        0 when the environment is valid, 2 when a launcher variable is malformed.
    """
    args = _parser().parse_args(argv)
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    try:
        report = inspect_environment(environ)
    except LauncherEnvError as exc:
        if args.json:
            problem = {"valid": False, "variable": exc.variable, "value": exc.value}
            problem["error"] = str(exc)
            print(json.dumps(problem, indent=2), file=out)
        print(f"helios-env: invalid environment: {exc}", file=err)
        return EXIT_INVALID
    if args.json:
        print(json.dumps(report_as_dict(report), indent=2), file=out)
    else:
        print(format_report(report), file=out)
    return 0
