"""Run the test suite at both ends of the supported range, outside the locked workspace.

Each leg makes a fresh virtual environment under ``.legs/``, installs workspace
packages (editable) and the ``test`` dependency group into it, resolved from the
package index rather than ``uv.lock``, and runs pytest there, bytecode written as
modules are first imported (see :func:`tools.matrix.leg_environment`):

- ``floor``: Python 3.10 with the lowest versions the metadata allows of every direct
  dependency (``--resolution lowest-direct``: torch 2.4.0, numpy 1.26, pytest 8.0...),
  helios-pg with its ``pytest`` extra: the ranks plugin's tests at the lowest pytest it
  declares (the main run and the wheels have the newest);
- ``top``: Python 3.13 with the newest of everything (the newest torch), the fault
  scenarios of the tests outside the four packages' (``-m faults``);
- ``no-torch-3.10``: helios-env and helios-log alone, without torch, and their tests,
  on Python 3.10 with the lowest versions, as ``floor``.

Every leg runs the default selection and the fault scenarios (``faults``: torchrun's
summary, the hang roll call and torch's errors differ between the ends of the range),
which ``uv run pytest`` leaves out. Where one run stands for another, the other leaves it
out. tests/env and tests/log never import torch (their stand-in for a live group is a
fake ``torch.distributed``): on floor they run in no-torch-3.10 instead, on the same
Python with the same versions. The wheel isolation check (tools/check_isolation.py) runs
each package's tests from its wheel alone on Python 3.13 with the newest of everything,
as top would: top leaves out those four directories, and helios-env's and helios-log's
wheels are the runs without torch on 3.13. The main run (``uv run pytest``) has the
newest torch too, locked: top runs only what it leaves out, the fault scenarios.

The matrix that CI runs is these legs and the wheel isolation check, one entry per
package (``wheel-<package>``; ``isolation`` names them all). ``torch-free`` names the
entries that install no torch, ``with-torch`` the others; CI runs the first one at a
time beside its launchers' step, the second two at a time after it::

    uv run python -m tools.legs floor top        # or: all, isolation, or any entry names
    uv run python -m tools.legs --jobs 2 all     # the whole matrix
    uv run python -m tools.legs --list

The interpreters are found under ``pyenv root``, on ``PATH`` (``python3.10``), or by
``uv python find``; a missing one fails its leg with a message that says so.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import shlex
import shutil
import sys
from dataclasses import dataclass
from typing import TextIO

from tools import check_isolation
from tools.matrix import (
    LEG_SELECTION,
    ROOT,
    Job,
    JobError,
    find_python,
    leg_environment,
    run,
    run_jobs,
    warm_bytecode,
)

LEGS_DIR = ROOT / ".legs"
TORCH_PACKAGES = ("helios-env", "helios-pg", "helios-collectives", "helios-log")
# The floor installs the ranks plugin's extra, so its tests run at the lowest pytest.
FLOOR_PACKAGES = ("helios-env", "helios-pg[pytest]", "helios-collectives", "helios-log")
TORCH_FREE = ("helios-env", "helios-log")
TORCH_FREE_TESTS = ("tests/env", "tests/log")
# What the wheel isolation check runs, on this Python with the newest of everything.
PYTHON = check_isolation.PYTHON
WHEEL_TESTS = tuple(pkg.tests for pkg in check_isolation.PACKAGES)
# A leg's whole test run (about 2 to 8 minutes here): past this it is killed and fails,
# and the other legs still run.
PYTEST_LIMIT = 30 * 60.0


@dataclass(frozen=True)
class Leg:
    name: str
    python: str
    packages: tuple[str, ...]
    tests: tuple[str, ...]
    resolution: str
    # Test paths another run covers on the same Python with the same versions.
    ignore: tuple[str, ...] = ()
    # pytest's -m: the default selection and the fault scenarios, unless narrowed.
    selection: str = LEG_SELECTION


LEGS = {
    leg.name: leg
    for leg in (
        Leg("floor", "3.10", FLOOR_PACKAGES, ("tests",), "lowest-direct", TORCH_FREE_TESTS),
        Leg("top", PYTHON, TORCH_PACKAGES, ("tests",), "highest", WHEEL_TESTS, selection="faults"),
        Leg("no-torch-3.10", "3.10", TORCH_FREE, TORCH_FREE_TESTS, "lowest-direct"),
    )
}
WHEELS = {f"wheel-{pkg.name}": pkg for pkg in check_isolation.PACKAGES}
# The entries without torch: light enough for CI to run them beside its launchers' step.
TORCH_FREE_ENTRIES = [
    *(name for name, leg in LEGS.items() if set(leg.packages) <= set(TORCH_FREE)),
    *(name for name, pkg in WHEELS.items() if pkg.torch_free),
]
GROUPS = {
    "all": [*LEGS, *WHEELS],
    "isolation": list(WHEELS),
    "torch-free": TORCH_FREE_ENTRIES,
    "with-torch": [name for name in [*LEGS, *WHEELS] if name not in TORCH_FREE_ENTRIES],
}


def run_leg(leg: Leg, pytest_args: list[str], out: TextIO) -> None:
    venv = LEGS_DIR / leg.name
    if venv.exists():
        shutil.rmtree(venv)
    run(["uv", "venv", "--quiet", "--python", find_python(leg.python), str(venv)], out=out)
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
            "--group",
            "pyproject.toml:test",
        ],
        out=out,
    )
    run(["uv", "pip", "list", "--python", python], out=out)
    warm_bytecode(python, out=out)
    ignored = [f"--ignore={path}" for path in leg.ignore]
    pytest = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", leg.selection]
    pytest += [*leg.tests, *ignored]
    run(
        [*pytest, *pytest_args],
        out=out,
        env=leg_environment(),
        limit=PYTEST_LIMIT,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "entries", nargs="*", help="leg or wheel names, 'isolation' or 'all' (default: all)"
    )
    parser.add_argument("--list", action="store_true", help="list the entries and exit")
    parser.add_argument("--jobs", type=int, default=1, help="entries run at a time (default: 1)")
    parser.add_argument("--pytest-args", default="", help="extra pytest arguments, one string")
    args = parser.parse_args()
    if args.list:
        for leg in LEGS.values():
            left_out = f", without {', '.join(leg.ignore)}" if leg.ignore else ""
            packages = ", ".join(leg.packages)
            how = f"{leg.resolution}{left_out}; -m {leg.selection!r}"
            print(f"{leg.name}: Python {leg.python}, {packages} ({how})")
        for name, pkg in WHEELS.items():
            print(f"{name}: {pkg.name} alone from its wheel, Python {PYTHON} (highest)")
        return 0
    names = [n for name in args.entries or ["all"] for n in GROUPS.get(name, [name])]
    unknown = [name for name in names if name not in LEGS and name not in WHEELS]
    if unknown:
        choices = [*LEGS, *WHEELS, *GROUPS]
        parser.error(f"unknown entries {unknown}; choose from {choices}")
    pytest_args = shlex.split(args.pytest_args)
    jobs = [
        Job(name, functools.partial(run_leg, LEGS[name], pytest_args))
        if name in LEGS
        else check_isolation.job(WHEELS[name])
        for name in dict.fromkeys(names)
    ]
    try:
        with contextlib.ExitStack() as stack:
            if any(name in WHEELS for name in names):
                stack.enter_context(check_isolation.built_wheels())
            failed = run_jobs(jobs, parallel=args.jobs)
    except JobError as exc:
        print(f"\nthe wheels did not build: {exc}", file=sys.stderr)
        return 1
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"\npassed: {', '.join(job.name for job in jobs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
