"""The ``helios-env`` report: what was detected, and where each value came from."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

from helios_env._errors import LauncherEnvError
from helios_env._fingerprint import fingerprint
from helios_env._resolve import inspect_environment

__all__ = ["main"]

EXIT_INVALID = 2


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
    # What helios_pg.init compares across ranks; it adds torch's CUDA and NCCL versions,
    # the backend and the device type, which only a process with torch knows.
    shown = fingerprint(environ=environ)
    if args.json:
        print(json.dumps({**report.as_dict(), "fingerprint": shown.as_dict()}, indent=2), file=out)
    else:
        print(report.format(), file=out)
        print("  fingerprint (what helios_pg.init compares across ranks)", file=out)
        print(shown.format("    "), file=out)
    return 0
