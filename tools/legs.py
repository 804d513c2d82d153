"""Run the test suite at both ends of the supported range, outside the locked workspace.

Each leg makes a fresh virtual environment under ``.legs/``, installs the workspace
packages (editable) and the ``test`` dependency group into it, resolved from the
package index rather than ``uv.lock``, and runs pytest there:

- ``floor``: Python 3.10 with the lowest versions the metadata allows of every direct
  dependency (``--resolution lowest-direct``: torch 2.4.0, numpy 1.26, pytest 8.0...);
- ``top``: Python 3.13 with the newest of everything (the newest torch);
- ``no-torch-3.10`` ... ``no-torch-3.13``: helios-env and helios-log alone, without
  torch, and their tests;
- ``plugin-floor``: helios-pg's pytest plugin (``helios-pg[pytest]``) at the lowest
  pytest it declares, ``pytest==8.0.*``, with the newest of everything else, and its
  tests (``tests/pg/test_plugin.py``; add ``--pytest-args "-m ''"`` for the slow ones).

Usage::

    uv run python tools/legs.py floor top        # or: all, or any leg names
    uv run python tools/legs.py --list

The interpreters are found under ``pyenv root``, on ``PATH`` (``python3.10``), or by
``uv python find``; a missing one fails its leg with a message that says so.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEGS_DIR = ROOT / ".legs"
TORCH_PACKAGES = ("helios-env", "helios-pg", "helios-collectives", "helios-log")
TORCH_FREE = ("helios-env", "helios-log")
# A leg's whole test run (about 4 to 8 minutes here): past this it is killed and fails,
# and the other legs still run.
PYTEST_LIMIT = 40 * 60.0


@dataclass(frozen=True)
class Leg:
    name: str
    python: str
    packages: tuple[str, ...]
    tests: tuple[str, ...]
    resolution: str
    pins: tuple[str, ...] = ()


LEGS = {
    leg.name: leg
    for leg in (
        Leg("floor", "3.10", TORCH_PACKAGES, ("tests",), "lowest-direct"),
        Leg("top", "3.13", TORCH_PACKAGES, ("tests",), "highest"),
        *(
            Leg(f"no-torch-{v}", v, TORCH_FREE, ("tests/env", "tests/log"), "highest")
            for v in ("3.10", "3.11", "3.12", "3.13")
        ),
        Leg(
            "plugin-floor",
            "3.11",
            ("helios-env", "helios-pg[pytest]"),
            ("tests/pg/test_plugin.py",),
            "highest",
            pins=("pytest==8.0.*",),
        ),
    )
}


class LegError(Exception):
    pass


def find_python(version: str) -> str:
    # pyenv's installs first: its shims on PATH answer only for the active version.
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run(
            [pyenv, "root"], capture_output=True, text=True, check=False
        ).stdout.strip()
        found = sorted(Path(root, "versions").glob(f"{version}.*/bin/python{version}"))
        if found:
            return str(found[-1])
    on_path = shutil.which(f"python{version}")
    if on_path and "/shims/" not in on_path:
        return on_path
    uv = subprocess.run(
        ["uv", "python", "find", "--no-python-downloads", version],
        capture_output=True,
        text=True,
        check=False,
    )
    if uv.returncode == 0 and uv.stdout.strip():
        return uv.stdout.strip()
    message = (
        f"no Python {version} interpreter: install it with pyenv, put python{version} on "
        f"PATH, or let uv find one (uv python find {version})"
    )
    raise LegError(message)


def run(
    command: list[str], *, env: dict[str, str] | None = None, limit: float | None = None
) -> None:
    print("+", " ".join(command), flush=True)
    # A session of its own, so that a command past its limit goes with every process it
    # started (a test's ranks, a forkserver).
    process = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
    try:
        status = process.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        message = (
            f"no result within {limit:g} s, killed (pytest's faulthandler_timeout printed "
            f"the stacks of a test that hangs): {' '.join(command)}"
        )
        raise LegError(message) from None
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        raise
    if status != 0:
        message = f"exit status {status}: {' '.join(command)}"
        raise LegError(message)


def run_leg(leg: Leg, pytest_args: list[str]) -> None:
    venv = LEGS_DIR / leg.name
    if venv.exists():
        shutil.rmtree(venv)
    run(["uv", "venv", "--quiet", "--python", find_python(leg.python), str(venv)])
    python = str(venv / "bin" / "python")
    editables = [arg for pkg in leg.packages for arg in ("-e", f"packages/{pkg}")]
    run(
        [
            "uv",
            "pip",
            "install",
            "--quiet",
            "--python",
            python,
            "--resolution",
            leg.resolution,
            *editables,
            *leg.pins,
            "--group",
            "pyproject.toml:test",
        ]
    )
    run(["uv", "pip", "list", "--python", python])
    # Run from the venv's own interpreter: the workspace's .venv must not leak in.
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *leg.tests, *pytest_args],
        env=env,
        limit=PYTEST_LIMIT,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("legs", nargs="*", help="leg names, or 'all' (default: all)")
    parser.add_argument("--list", action="store_true", help="list the legs and exit")
    parser.add_argument("--pytest-args", default="", help="extra pytest arguments, one string")
    args = parser.parse_args()
    if args.list:
        for leg in LEGS.values():
            print(f"{leg.name}: Python {leg.python}, {', '.join(leg.packages)} ({leg.resolution})")
        return 0
    names = [n for name in args.legs or ["all"] for n in (LEGS if name == "all" else [name])]
    unknown = [name for name in names if name not in LEGS]
    if unknown:
        parser.error(f"unknown legs {unknown}; choose from {list(LEGS)} or 'all'")
    failed: list[str] = []
    for name in names:
        start = time.monotonic()
        print(f"\n==== leg {name}", flush=True)
        try:
            run_leg(LEGS[name], shlex.split(args.pytest_args))
        except LegError as exc:
            failed.append(name)
            print(f"FAILED leg {name}: {exc}", flush=True)
        else:
            print(f"ok leg {name} ({time.monotonic() - start:.0f} s)", flush=True)
    if failed:
        print(f"\nfailed legs: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"\nlegs passed: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
