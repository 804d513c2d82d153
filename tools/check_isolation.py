"""Check that every package installs and works alone, from its built wheel.

For each package: build the wheel with ``uv build --no-sources``, create a fresh
virtual environment on Python 3.13, install the third-party requirements its wheel and
its helios siblings' wheels declare (torch for helios-pg and helios-collectives), the
newest the package index has, install the wheel from the built wheels only
(``--no-index``), then:

- run ``uv pip check`` (uv does not enforce the exact sibling pins in the workspace);
- for helios-env and helios-log, fail if any third-party package got installed and if
  importing them (``python -I``) loads torch;
- import the package with ``python -I`` and check it comes from the wheel;
- type-check the downstream consumer module ``tests/typing/consume_<pkg>.py``, if
  present, with ``mypy --strict`` against the installed wheel;
- install the ``test`` dependency group, the newest too, and run the package's tests
  (``tests/<pkg>/``) in that environment.

Python 3.13 and the newest of everything are the top of the supported range: these runs
are the ``top`` leg's runs of tests/env, tests/log, tests/pg and tests/collectives, and
helios-env's and helios-log's are the runs without torch on 3.13 (tools/legs.py). The
locked versions are the main test run's (``uv run pytest``).

The packages are checked ``--jobs`` at a time (default: one); tools/legs.py runs the
same checks as entries of CI's matrix (``wheel-<package>``).

Usage: ``uv run python -m tools.check_isolation [--keep] [--skip-tests] [--jobs N] [PACKAGE ...]``.
"""

from __future__ import annotations

import argparse
import contextlib
import email.parser
import functools
import json
import re
import shutil
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tools import matrix
from tools.matrix import LEG_SELECTION, ROOT, Job, JobError, find_python, run, run_jobs

__all__ = ["PACKAGES", "Package", "built_wheels", "job"]

WORK = ROOT / ".iso"
DIST = WORK / "dist"


@dataclass(frozen=True)
class Package:
    name: str
    module: str
    tests: str
    torch_free: bool


PACKAGES = (
    Package("helios-env", "helios_env", "tests/env", torch_free=True),
    Package("helios-log", "helios_log", "tests/log", torch_free=True),
    Package("helios-pg", "helios_pg", "tests/pg", torch_free=False),
    Package("helios-collectives", "helios_collectives", "tests/collectives", torch_free=False),
)
HELIOS = {p.name for p in PACKAGES}
# The newest supported Python (see the module's docstring).
PYTHON = "3.13"

# A package's whole test run (a minute or two here): past this it is killed and fails.
PYTEST_LIMIT = 30 * 60.0

MYPY_INI = """\
[mypy]
strict = True
warn_unreachable = True
"""


def wheel(name: str) -> Path:
    """The built wheel of the helios package ``name``."""
    return next(DIST.glob(f"{name.replace('-', '_')}-*.whl"))


def third_party_requirements(name: str) -> list[str]:
    """The third-party requirements of ``name``'s wheel and of the helios wheels it needs.

    Requirements of an extra (``helios-pg[mpi]``) are left out.
    """
    found: list[str] = []
    wanted, seen = [name], set()
    while wanted:
        current = wanted.pop()
        if current in seen:
            continue
        seen.add(current)
        with zipfile.ZipFile(wheel(current)) as archive:
            path = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            metadata = email.parser.Parser().parsestr(archive.read(path).decode())
        for requirement in metadata.get_all("Requires-Dist") or []:
            if "extra ==" in requirement:
                continue
            dependency = re.split(r"[\s\[;<>=!~(]", requirement, maxsplit=1)[0]
            if dependency.lower().replace("_", "-") in HELIOS:
                wanted.append(dependency.lower().replace("_", "-"))
            else:
                found.append(requirement)
    return list(dict.fromkeys(found))


def check(pkg: Package, out: TextIO, *, skip_tests: bool) -> None:
    venv = WORK / pkg.name
    if venv.exists():
        shutil.rmtree(venv)
    run(["uv", "venv", "--quiet", "--python", find_python(PYTHON), str(venv)], out=out)
    python = str(venv / "bin" / "python")
    install = ["uv", "pip", "install", "--quiet", "--python", python]
    requirements = third_party_requirements(pkg.name)
    if requirements:
        run([*install, *requirements], out=out)
    run(
        [
            *install,
            "--no-index",
            # The wheels keep one version number across rebuilds: never reuse a cached one.
            "--no-cache",
            "--find-links",
            str(DIST),
            pkg.name,
        ],
        out=out,
    )
    run(["uv", "pip", "check", "--python", python], out=out)
    listed = json.loads(
        run(["uv", "pip", "list", "--python", python, "--format", "json"], out=out, capture=True)
    )
    names = {entry["name"] for entry in listed}
    if pkg.torch_free and names - HELIOS:
        extra = sorted(names - HELIOS)
        message = f"{pkg.name} pulled in third-party packages: {extra}"
        raise JobError(message)
    probe = (
        f"import sys, {pkg.module} as m; "
        f"assert '{venv}' in m.__file__, m.__file__; "
        "print(m.__name__, 'from', m.__file__); "
        "print('torch imported:', 'torch' in sys.modules)"
    )
    if pkg.torch_free:
        probe += "; assert 'torch' not in sys.modules, 'torch was imported'"
    run([python, "-I", "-c", probe], out=out)
    if skip_tests:
        return
    consumer = ROOT / "tests" / "typing" / f"consume_{pkg.module.removeprefix('helios_')}.py"
    if consumer.exists():
        ini = WORK / f"{pkg.name}-mypy.ini"
        ini.write_text(MYPY_INI)
        run(
            [
                sys.executable,
                "-m",
                "mypy",
                "--config-file",
                str(ini),
                "--no-incremental",
                "--python-executable",
                python,
                str(consumer),
            ],
            out=out,
        )
    run([*install, "--group", "pyproject.toml:test"], out=out)
    run(["uv", "pip", "list", "--python", python], out=out)
    matrix.warm_bytecode(python, out=out)
    run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", LEG_SELECTION, pkg.tests],
        out=out,
        env=matrix.leg_environment(),
        limit=PYTEST_LIMIT,
    )


def job(pkg: Package, *, skip_tests: bool = False) -> Job:
    """The check of one package, as an entry of a matrix."""
    return Job(f"wheel-{pkg.name}", functools.partial(check, pkg, skip_tests=skip_tests))


@contextlib.contextmanager
def built_wheels(*, keep: bool = False) -> Iterator[None]:
    """Build every package's wheel into .iso/dist; remove .iso/ afterwards unless ``keep``."""
    if DIST.exists():
        shutil.rmtree(DIST)
    WORK.mkdir(exist_ok=True)
    try:
        for pkg in PACKAGES:
            run(
                ["uv", "build", "--quiet", "--package", pkg.name, "--no-sources", "-o", str(DIST)],
                out=sys.stdout,
            )
        yield
    finally:
        if not keep:
            shutil.rmtree(WORK, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="*", help="package names (default: all)")
    parser.add_argument("--keep", action="store_true", help="keep .iso/ afterwards")
    parser.add_argument("--skip-tests", action="store_true", help="install and import only")
    parser.add_argument("--jobs", type=int, default=1, help="packages checked at a time")
    args = parser.parse_args()
    unknown = set(args.packages) - HELIOS
    if unknown:
        parser.error(f"unknown package(s) {sorted(unknown)}; choose from {sorted(HELIOS)}")
    chosen = [p for p in PACKAGES if not args.packages or p.name in args.packages]
    try:
        with built_wheels(keep=args.keep):
            failed = run_jobs(
                [job(p, skip_tests=args.skip_tests) for p in chosen], parallel=args.jobs
            )
    except JobError as exc:
        print(f"isolation check failed: {exc}", file=sys.stderr)
        return 1
    if failed:
        print(f"\nisolation check failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"isolation check passed for {', '.join(p.name for p in chosen)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
