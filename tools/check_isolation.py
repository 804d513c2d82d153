"""Check that every package installs and works alone, from its built wheel.

For each package: build the wheel with ``uv build --no-sources``, create a fresh
virtual environment, install the locked third-party requirements it declares (torch
for helios-pg and helios-collectives), install the wheel from the built wheels only
(``--no-index``), then:

- run ``uv pip check`` (uv does not enforce the exact sibling pins in the workspace);
- for helios-env and helios-log, fail if any third-party package got installed and if
  importing them (``python -I``) loads torch;
- import the package with ``python -I`` and check it comes from the wheel;
- type-check the downstream consumer module ``tests/typing/consume_<pkg>.py``, if
  present, with ``mypy --strict`` against the installed wheel;
- run the package's tests (``tests/<pkg>/``) in that environment.

Usage: ``uv run python tools/check_isolation.py [--keep] [--skip-tests] [PACKAGE ...]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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

MYPY_INI = """\
[mypy]
strict = True
warn_unreachable = True
"""


class CheckFailedError(Exception):
    pass


def run(cmd: list[str], *, capture: bool = False, cwd: Path = ROOT) -> str:
    print("+", " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, cwd=cwd, text=True, capture_output=capture, check=False)
    if proc.returncode != 0:
        detail = (proc.stdout or "") + (proc.stderr or "") if capture else ""
        message = f"command failed with status {proc.returncode}: {' '.join(cmd)}\n{detail}"
        raise CheckFailedError(message)
    return proc.stdout if capture else ""


def export(*args: str) -> Path:
    out = WORK / ("req-" + "-".join(a.strip("-") for a in args) + ".txt")
    text = run(
        [
            "uv",
            "export",
            "--frozen",
            "--no-hashes",
            "--no-emit-workspace",
            "--no-header",
            "--no-annotate",
            *args,
        ],
        capture=True,
    )
    out.write_text(text)
    return out


def check(pkg: Package, *, skip_tests: bool) -> None:
    venv = WORK / pkg.name
    if venv.exists():
        shutil.rmtree(venv)
    run(["uv", "venv", "--quiet", "--python", sys.executable, str(venv)])
    python = str(venv / "bin" / "python")
    if not pkg.torch_free:
        reqs = export("--package", pkg.name, "--no-dev")
        run(["uv", "pip", "install", "--quiet", "--python", python, "-r", str(reqs)])
    run(
        [
            "uv",
            "pip",
            "install",
            "--quiet",
            "--python",
            python,
            "--no-index",
            # The wheels keep one version number across rebuilds: never reuse a cached one.
            "--no-cache",
            "--find-links",
            str(DIST),
            pkg.name,
        ]
    )
    run(["uv", "pip", "check", "--python", python])
    listed = json.loads(
        run(["uv", "pip", "list", "--python", python, "--format", "json"], capture=True)
    )
    names = {entry["name"] for entry in listed}
    if pkg.torch_free and names - HELIOS:
        extra = sorted(names - HELIOS)
        message = f"{pkg.name} pulled in third-party packages: {extra}"
        raise CheckFailedError(message)
    probe = (
        f"import sys, {pkg.module} as m; "
        f"assert '{venv}' in m.__file__, m.__file__; "
        "print(m.__name__, 'from', m.__file__); "
        "print('torch imported:', 'torch' in sys.modules)"
    )
    if pkg.torch_free:
        probe += "; assert 'torch' not in sys.modules, 'torch was imported'"
    run([python, "-I", "-c", probe])
    if not skip_tests:
        consumer = ROOT / "tests" / "typing" / f"consume_{pkg.module.removeprefix('helios_')}.py"
        if consumer.exists():
            ini = WORK / "mypy.ini"
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
                ]
            )
        test_reqs = export("--only-group", "test")
        run(["uv", "pip", "install", "--quiet", "--python", python, "-r", str(test_reqs)])
        run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", pkg.tests])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="*", help="package names (default: all)")
    parser.add_argument("--keep", action="store_true", help="keep .iso/ afterwards")
    parser.add_argument("--skip-tests", action="store_true", help="install and import only")
    args = parser.parse_args()
    chosen = [p for p in PACKAGES if not args.packages or p.name in args.packages]
    unknown = set(args.packages) - HELIOS
    if unknown:
        parser.error(f"unknown package(s) {sorted(unknown)}; choose from {sorted(HELIOS)}")
    if DIST.exists():
        shutil.rmtree(DIST)
    WORK.mkdir(exist_ok=True)
    for pkg in PACKAGES:
        run(["uv", "build", "--quiet", "--package", pkg.name, "--no-sources", "-o", str(DIST)])
    failures: list[str] = []
    for pkg in chosen:
        start = time.monotonic()
        print(f"=== {pkg.name}", flush=True)
        try:
            check(pkg, skip_tests=args.skip_tests)
        except CheckFailedError as exc:
            failures.append(f"{pkg.name}: {exc}")
            print(f"FAILED {pkg.name}: {exc}", flush=True)
        else:
            print(f"ok {pkg.name} ({time.monotonic() - start:.0f} s)", flush=True)
    if not args.keep:
        shutil.rmtree(WORK, ignore_errors=True)
    if failures:
        print("\nisolation check failed:\n" + "\n".join(failures), file=sys.stderr)
        return 1
    print(f"isolation check passed for {', '.join(p.name for p in chosen)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
