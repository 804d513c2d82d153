"""CI's matrix: the environments helios is tested in beyond the locked workspace.

Each session makes a fresh virtual environment under ``.nox/`` (uv), resolved from the
package index rather than ``uv.lock``::

    uv run nox -f tools/noxfile.py --list          # the sessions, their tags and what they run
    uv run nox -f tools/noxfile.py -s floor        # one session
    uv run nox -f tools/noxfile.py -t light        # the sessions of a tag
    uv run nox -f tools/noxfile.py -t range --parallel 2   # two sessions at a time

Each test runs once, where its environment matters: the main run (``uv run pytest``,
locked, Python 3.11) runs the default selection, ``.ci/run`` the launchers, nodes and
long tests (``-m long``, left out of the main run to keep it short). Here:

- ``floor``: the default selection, the long tests and the fault scenarios on the lowest
  versions the metadata allows (Python 3.10, torch 2.4, pytest 8.0 for the ranks plugin);
- ``top``: the fault scenarios (which the main run leaves out) on Python 3.13 and the
  newest torch: torchrun's summary, the roll call and torch's errors differ by release;
- ``no-torch``: helios-env's and helios-log's tests on Python 3.10 without torch;
- ``wheel``: each package built, installed alone from its wheel (``--no-index``) with
  only what it declares, the newest versions, on Python 3.13, and what depends on
  installing alone: ``uv pip check``, the import with ``python -I`` from the wheel (no
  torch imported but by helios-collectives, no third-party package installed for
  helios-env and helios-log), the entry points (``python -m``; for helios-pg the ranks
  plugin in a pytest session that must not import torch, then in one with a ranks
  test), and the downstream ``mypy --strict`` consumer.

Tags: ``light`` for the sessions that run no torch test (no-torch and the wheels: a
minute of one core each), ``range`` for floor and top. The interpreters are found on
``PATH`` or among pyenv's installs; none is downloaded.
"""

from __future__ import annotations

import email.parser
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parents[1]
FLOOR = "3.10"
TOP = "3.13"
HELIOS = ("helios-env", "helios-log", "helios-pg", "helios-collectives")
TORCH_FREE = ("helios-env", "helios-log")
FLOOR_SELECTION = "not launchers and not slow and not multinode"
"""pytest's ``-m`` on the floor: the default selection, the long tests and the fault scenarios."""

nox.options.envdir = str(ROOT / ".nox")
nox.options.default_venv_backend = "uv"
nox.options.download_python = "never"
nox.options.error_on_missing_interpreters = True
nox.options.reuse_venv = "no"
# `--parallel N` runs that many sessions at once, each nox in a session of its own, whose
# processes all go when the run is stopped.
nox.options.allow_parallel = True


def _add_pyenv_interpreters() -> None:
    """Put pyenv's installs of the versions used here on ``PATH``.

    pyenv's shims answer only for its active version, and nox downloads nothing here.
    """
    pyenv = shutil.which("pyenv")
    if pyenv is None:
        return
    root = subprocess.run([pyenv, "root"], capture_output=True, text=True, check=False)
    versions = Path(root.stdout.strip(), "versions")
    found = [
        str(path.parent)
        for version in (FLOOR, TOP)
        for path in sorted(versions.glob(f"{version}.*/bin/python{version}"))[-1:]
    ]
    os.environ["PATH"] = os.pathsep.join([*found, os.environ.get("PATH", "")])


_add_pyenv_interpreters()
# A stopped run (SIGTERM) stops the running command as Ctrl-C would.
signal.signal(signal.SIGTERM, signal.default_int_handler)

# Bytecode is written as modules are first imported: where PYTHONDONTWRITEBYTECODE is set
# (as on the machines CI runs on) every rank would compile torch anew (6 to 8 s an import
# against 2 to 3 s). PYTHONPATH would let the workspace's sources in.
TEST_ENV: dict[str, str | None] = {"PYTHONDONTWRITEBYTECODE": None, "PYTHONPATH": None}
WARM_MODULES = (
    "torch.distributed.run",
    "torch.multiprocessing",
    "numpy",
    *(name.replace("-", "_") for name in HELIOS),
    "pytest",
    "xdist",
    "pytest_timeout",
    "hypothesis",
)
# Imports each module whose package is installed (no torch in no-torch).
_WARM = (
    "import importlib.util as u, sys\n"
    "[__import__(n) for n in sys.argv[1:] if u.find_spec(n.partition('.')[0])]"
)


def warm_bytecode(session: nox.Session) -> None:
    """Write the bytecode of what the tests' processes import, in one process, first.

    Left to the tests, a module's ranks all start at once and each compiles torch before
    any has written its bytecode (4 core-seconds a process); one import here costs that once.
    """
    session.run("python", "-c", _WARM, *WARM_MODULES, env=TEST_ENV, external=True)


def pytest(session: nox.Session, *args: str) -> None:
    """Run pytest in the session's environment, from the repository's root."""
    session.chdir(ROOT)
    warm_bytecode(session)
    session.run(
        "python",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *args,
        *session.posargs,
        env=TEST_ENV,
        external=True,
        # Stopped (Ctrl-C, SIGTERM): pytest gets SIGTERM after 0.5 s, SIGKILL 30 s later.
        interrupt_timeout=0.5,
        terminate_timeout=30,
    )


def install_editable(session: nox.Session, *packages: str, resolution: str) -> None:
    editables = [arg for package in packages for arg in ("-e", f"{ROOT}/packages/{package}")]
    session.install(
        "--resolution", resolution, *editables, "--group", f"{ROOT}/pyproject.toml:test"
    )
    session.run("uv", "pip", "list", external=True, silent=False)


def installed(session: nox.Session) -> set[str]:
    """The names of the packages installed in the session's environment."""
    python = str(Path(str(session.virtualenv.location), "bin", "python"))
    command = ["uv", "pip", "list", "--quiet", "--format", "json", "--python", python]
    listed = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return {entry["name"] for entry in json.loads(listed)}


@nox.session(python=False, default=False)
def warm(session: nox.Session) -> None:
    """Write the bytecode of what the tests import, in the interpreter nox runs on."""
    warm_bytecode(session)


@nox.session(python=FLOOR, tags=["range"])
def floor(session: nox.Session) -> None:
    """The suite and the fault scenarios at the lowest versions the metadata allows."""
    packages = [f"{name}[pytest]" if name == "helios-pg" else name for name in HELIOS]
    install_editable(session, *packages, resolution="lowest-direct")
    # helios-env's and helios-log's tests never import torch: no-torch runs them here.
    ignored = [f"--ignore=tests/{name.removeprefix('helios-')}" for name in TORCH_FREE]
    pytest(session, "-m", FLOOR_SELECTION, "tests", *ignored)


@nox.session(python=TOP, tags=["range"])
def top(session: nox.Session) -> None:
    """The fault scenarios on the newest Python and torch (the main run leaves them out)."""
    install_editable(session, *HELIOS, resolution="highest")
    pytest(session, "-m", "faults", "tests")


@nox.session(name="no-torch", python=FLOOR, tags=["light"])
def no_torch(session: nox.Session) -> None:
    """helios-env and helios-log, without torch, at the lowest versions."""
    install_editable(session, *TORCH_FREE, resolution="lowest-direct")
    if "torch" in installed(session):
        session.error("torch got installed beside helios-env and helios-log")
    pytest(session, "-m", FLOOR_SELECTION, *(f"tests/{n[7:]}" for n in TORCH_FREE))


def build_wheels(session: nox.Session, out: Path) -> None:
    """Build every helios wheel into ``out`` (their sibling pins need each other's)."""
    for name in HELIOS:
        session.run(
            "uv", "build", "--quiet", "--package", name, "--no-sources", "-o", str(out),
            external=True,
        )  # fmt: skip


def third_party_requirements(dist: Path, name: str) -> list[str]:
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
        (path,) = dist.glob(f"{current.replace('-', '_')}-*.whl")
        with zipfile.ZipFile(path) as archive:
            meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            metadata = email.parser.Parser().parsestr(archive.read(meta).decode())
        for requirement in metadata.get_all("Requires-Dist") or []:
            if "extra ==" in requirement:
                continue
            dependency = re.split(r"[\s\[;<>=!~(]", requirement, maxsplit=1)[0]
            dependency = dependency.lower().replace("_", "-")
            if dependency in HELIOS:
                wanted.append(dependency)
            else:
                found.append(requirement)
    return list(dict.fromkeys(found))


IMPORT_PROBE = """
import importlib, sys
venv, name, forbidden = sys.argv[1], sys.argv[2], set(sys.argv[3:])
module = importlib.import_module(name)
assert module.__file__.startswith(venv), f"{name} is not the wheel's: {module.__file__}"
print(name, "from", module.__file__)
loaded = sorted(forbidden & {m.partition(".")[0] for m in sys.modules})
assert not loaded, f"importing {name} imported {loaded}"
"""
RANKS_SESSION_INI = """\
[pytest]
addopts = -p no:cacheprovider
filterwarnings =
    error
    # torch without numpy (which helios-pg does not need) says so as it is imported.
    ignore:Failed to initialize NumPy:UserWarning
"""


def plugin_sessions(session: nox.Session, work: Path) -> None:
    """A pytest session without ranks tests, then one with: the plugin from its entry point."""
    wheel_tests = ROOT / "tests" / "wheel"
    plain, ranks = work / "plain", work / "ranks"
    for folder in (plain, ranks):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        (folder / "pytest.ini").write_text(RANKS_SESSION_INI)
    # Its conftest fails the session if the plugin did not load or torch was imported.
    shutil.copy(wheel_tests / "plain_conftest.py", plain / "conftest.py")
    (plain / "test_plain.py").write_text("def test_plain():\n    pass\n")
    shutil.copy(wheel_tests / "ranks_session.py", ranks / "test_ranks.py")
    for folder in (plain, ranks):
        session.chdir(folder)
        session.run("python", "-I", "-m", "pytest", "-q", "-rA")


@nox.session(python=TOP)
@nox.parametrize(
    "package",
    [nox.param(name, id=name, tags=["light"]) for name in HELIOS],
)
def wheel(session: nox.Session, package: str) -> None:
    """One package installed alone from its wheel, and what depends on installing alone."""
    work = Path(session.create_tmp())
    dist = work / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    build_wheels(session, dist)
    torch_free = package in TORCH_FREE
    extra = "[pytest]" if package == "helios-pg" else ""
    requirements = third_party_requirements(dist, package)
    if extra:
        requirements.append("pytest>=8")
    if requirements:
        session.install(*requirements)
    # The wheels keep one version number across rebuilds: never reuse a cached one.
    session.install("--no-index", "--no-cache", "--find-links", str(dist), package + extra)
    session.run("uv", "pip", "check", external=True)
    names = installed(session)
    if torch_free and names - set(HELIOS):
        session.error(f"{package} pulled in third-party packages: {sorted(names - set(HELIOS))}")
    session.chdir(work)
    venv = str(session.virtualenv.location)
    module = package.replace("-", "_")
    # Only helios-collectives imports torch as it is imported; none imports pytest.
    forbidden = ["pytest"] if package == "helios-collectives" else ["pytest", "torch"]
    session.run("python", "-I", "-c", IMPORT_PROBE, venv, module, *forbidden)
    if package == "helios-env":
        session.run("python", "-I", "-m", "helios_env", env={"RANK": None, "WORLD_SIZE": None})
    elif package == "helios-log":
        session.run("python", "-I", "-c", "import helios_log; helios_log.global_print('printed')")
    elif package == "helios-pg":
        plugin_sessions(session, work)
    else:
        session.run(
            "python", "-I", "-m", "helios_collectives", "--sizes", "4B:64KiB:16", "--iters", "3",
        )  # fmt: skip
    consumer = ROOT / "tests" / "typing" / f"consume_{module.removeprefix('helios_')}.py"
    config = work / "mypy.ini"
    config.write_text("[mypy]\nstrict = True\nwarn_unreachable = True\n")
    python = str(Path(venv, "bin", "python"))
    session.run(
        sys.executable, "-m", "mypy", "--config-file", str(config), "--no-incremental",
        "--python-executable", python, str(consumer),
        external=True,
    )  # fmt: skip
