"""Run named jobs, each a few commands in an environment of its own, some at a time.

The runner that tools/legs.py and tools/check_isolation.py share. A job is a function
that runs its commands through :func:`run`, writing to the stream it is given. One job
at a time streams straight to stdout; several at a time each write to a log of their
own, printed whole when the job ends, so that the output of two jobs never interleaves.
A failed job is named in the output and the others still run; every command runs in a
session of its own and goes, with every process it started, when it passes its limit
or when the run is stopped (SIGTERM or Ctrl-C: what still runs fails, what has not
started fails without starting, and the summary is printed).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

__all__ = [
    "LEG_SELECTION",
    "ROOT",
    "Job",
    "JobError",
    "find_python",
    "leg_environment",
    "run",
    "run_jobs",
    "warm_bytecode",
]

ROOT = Path(__file__).resolve().parents[1]
LEG_SELECTION = "not launchers and not slow and not multinode"
"""pytest's ``-m`` for a leg: the default selection and the fault scenarios (``faults``).

``uv run pytest`` leaves the fault scenarios out (pyproject.toml's ``addopts``); the legs
at both ends of the range run them, as torchrun's summary and torch's errors differ there.
"""

_live: set[subprocess.Popen[str]] = set()
# Reentrant: the signal handler takes it in the main thread, which may hold it already.
_live_lock = threading.RLock()
_stopping = threading.Event()


class JobError(Exception):
    """A job's command failed, or ran past its limit."""


@dataclass(frozen=True)
class Job:
    """One entry of a matrix: a name and the function that runs it."""

    name: str
    steps: Callable[[TextIO], None]


def _kill(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def run(
    command: Sequence[str],
    *,
    out: TextIO,
    env: dict[str, str] | None = None,
    limit: float | None = None,
    capture: bool = False,
) -> str:
    """Run ``command`` from the repository root, its output going to ``out``.

    With ``capture``, its stdout is returned instead (its stderr still goes to ``out``).
    Raises JobError on a non-zero exit status or past ``limit`` seconds. How long it
    took follows it in ``out``.
    """
    print("+", " ".join(command), file=out, flush=True)
    start = time.monotonic()
    with _live_lock:
        if _stopping.is_set():
            message = f"not started, the run was stopped: {' '.join(command)}"
            raise JobError(message)
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE if capture else out,
            stderr=out,
            text=True,
            # A session of its own, so that a command past its limit goes with every
            # process it started (a test's ranks, a forkserver).
            start_new_session=True,
        )
        _live.add(process)
    if _stopping.is_set():
        # The run was stopped while this command started.
        _kill(process)
    try:
        stdout, _ = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        _kill(process)
        process.communicate()
        message = (
            f"no result within {limit:g} s, killed (pytest's faulthandler_timeout printed "
            f"the stacks of a test that hangs): {' '.join(command)}"
        )
        raise JobError(message) from None
    except BaseException:
        _kill(process)
        raise
    finally:
        with _live_lock:
            _live.discard(process)
    print(f"  ({time.monotonic() - start:.1f} s)", file=out, flush=True)
    if process.returncode != 0:
        stopped = ", stopped with the run" if _stopping.is_set() else ""
        message = f"exit status {process.returncode}{stopped}: {' '.join(command)}"
        raise JobError(message)
    return stdout or ""


def leg_environment() -> dict[str, str]:
    """This process's environment for a test run from a leg's own interpreter.

    Without ``VIRTUAL_ENV`` and ``PYTHONPATH``, so that the workspace's ``.venv`` does not
    leak in, and without ``PYTHONDONTWRITEBYTECODE``: where it is set (as on the machines
    CI runs on), every process the tests start would compile each module it imports,
    torch's included, every time (an import of torch 6 to 8 s against 2 to 3 s). Unset,
    the first process to import a module writes its bytecode and the others read it;
    :func:`warm_bytecode` imports what they need first. Measured on the wheel-helios-pg
    entry, this costs what compiling all of torch as it is installed did (334 and 345
    core-seconds); what it saves is the 45 core-seconds of that compilation wherever
    an environment runs few processes.
    """
    dropped = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
    return {k: v for k, v in os.environ.items() if k not in dropped}


WARM_MODULES = (
    "torch.distributed.run",
    "torch.multiprocessing",
    "numpy",
    "helios_env",
    "helios_log",
    "helios_pg",
    "helios_collectives",
    "pytest",
    "xdist",
    "pytest_timeout",
    "hypothesis",
)
"""What the tests' processes import, where installed: torch's group and its launcher."""
_WARM = """
import importlib, sys
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
"""


def warm_bytecode(python: str, *, out: TextIO) -> None:
    """Write the bytecode of what the tests' processes import, in one process, first.

    Left to the tests, the first processes to import torch all start at once (a
    module's torchrun jobs, a group's ranks), and each one compiles torch before any of
    them has written its bytecode: 4 core-seconds a process. One import here, of only
    the modules a process needs, costs about that once.
    """
    run([python, "-c", _WARM, *WARM_MODULES], out=out, env=leg_environment())


def find_python(version: str) -> str:
    """Return the path of a Python ``version`` interpreter, or raise JobError."""
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
    raise JobError(message)


def _attempt(job: Job, out: TextIO) -> tuple[str | None, float]:
    start = time.monotonic()
    try:
        job.steps(out)
    except JobError as exc:
        return str(exc), time.monotonic() - start
    return None, time.monotonic() - start


def _report(name: str, error: str | None, seconds: float) -> None:
    if error is None:
        print(f"ok {name} ({seconds:.0f} s)", flush=True)
    else:
        print(f"FAILED {name} ({seconds:.0f} s): {error}", flush=True)


def _stop(signum: int, frame: object) -> None:
    with _live_lock:
        _stopping.set()
        for process in _live:
            _kill(process)


def run_jobs(jobs: Sequence[Job], *, parallel: int = 1) -> list[str]:
    """Run ``jobs``, ``parallel`` at a time, in their order; return the names that failed.

    Ends with one line per job: its name, ok or FAILED, and how long it took. SIGTERM (a
    CI's time limit, a cancelled job) or SIGINT stops the run: the commands still running
    go, with every process they started, and every job not done fails.
    """
    _stopping.clear()
    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _run_jobs(jobs, parallel=parallel)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_jobs(jobs: Sequence[Job], *, parallel: int) -> list[str]:
    outcomes: dict[str, tuple[str | None, float]] = {}
    if parallel <= 1:
        for job in jobs:
            print(f"\n==== {job.name}", flush=True)
            outcomes[job.name] = _attempt(job, sys.stdout)
            _report(job.name, *outcomes[job.name])
    else:
        with tempfile.TemporaryDirectory(prefix="matrix-") as logs:

            def attempt_logged(job: Job) -> tuple[str | None, float]:
                with Path(logs, f"{job.name}.log").open("w") as out:
                    return _attempt(job, out)

            with ThreadPoolExecutor(max_workers=parallel) as pool:
                running = {pool.submit(attempt_logged, job): job for job in jobs}
                for future in as_completed(running):
                    job = running[future]
                    outcomes[job.name] = future.result()
                    print(f"\n==== {job.name}", flush=True)
                    sys.stdout.write(Path(logs, f"{job.name}.log").read_text())
                    _report(job.name, *outcomes[job.name])
    print("\n==== summary", flush=True)
    for job in jobs:
        error, seconds = outcomes[job.name]
        print(f"{'ok' if error is None else 'FAILED':6} {seconds:5.0f} s  {job.name}")
    return [job.name for job in jobs if outcomes[job.name][0] is not None]
