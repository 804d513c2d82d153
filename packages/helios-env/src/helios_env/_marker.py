"""The requeue marker: a file a stopped run leaves for the run that replaces it.

Where nothing can requeue the job (no ``scontrol``, mpirun, one process), rank 0 of a
stopped run writes this file and the program exits with status 75, which the batch
script tests to submit the job again. The file says which attempt wrote it, so that the
run it asked for knows it is the next attempt; ``helios_pg.init()`` removes it once that
run's group has formed. It is ``HELIOS_REQUEUE_FILE``, by default
``helios-requeue-NAME`` in the working directory, where ``NAME`` stays the same when
the batch script submits itself again: SLURM's job name (and array task), else ``job``.

Each process reads the marker once, the first time it asks for the attempt, and keeps
that answer: removing the file, or a new marker written by this run, changes nothing
for it. A file that cannot be parsed still counts (as written by attempt 0): a run
asked for this one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from helios_env._environ import Getter, getter_for

__all__ = [
    "MARKER_VARIABLE",
    "consume_marker",
    "consume_requeue_marker",
    "marker_attempt",
    "marker_path",
    "requeue_marker",
]

MARKER_VARIABLE = "HELIOS_REQUEUE_FILE"
_NAMES = ("SLURM_JOB_NAME", "SLURM_ARRAY_TASK_ID")
_read: dict[tuple[str | None, ...], tuple[Path, int | None]] = {}
"""Per process: the marker found where these variables point, and its attempt."""
_consumed: set[Path] = set()


def marker_path(get: Getter) -> Path:
    """Where a stopped run leaves its marker, and the next run looks for it.

    Args:
        get: Reads a variable.

    Returns:
        ``HELIOS_REQUEUE_FILE``, else ``helios-requeue-NAME`` in the working directory.
    """
    configured = get(MARKER_VARIABLE)
    if configured:
        return Path(configured).absolute()
    name, task = (get(variable) for variable in _NAMES)
    key = re.sub(r"[^A-Za-z0-9._-]", "_", name) if name else "job"
    if name and task:
        key = f"{key}-{task}"
    return Path.cwd() / f"helios-requeue-{key}"


def _attempt_in(path: Path) -> int | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    attempt = record.get("attempt") if isinstance(record, dict) else None
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
        return 0  # a marker cut short, or of an older helios: still a run asked for this one
    return attempt


def _lookup(get: Getter) -> tuple[Path, int | None]:
    key = (get(MARKER_VARIABLE), *(get(variable) for variable in _NAMES))
    found = _read.get(key)
    if found is None:
        path = marker_path(get)
        found = _read[key] = (path, _attempt_in(path))
    return found


def marker_attempt(get: Getter) -> tuple[Path, int | None]:
    """The marker this process found, and the attempt of the run that wrote it.

    Args:
        get: Reads a variable.

    Returns:
        The marker's path, and the attempt it records (None where there was no marker
        when this process first looked).
    """
    return _lookup(get)


def consume_marker(get: Getter) -> Path | None:
    """Remove the marker this process counted: the run it asked for has started.

    Args:
        get: Reads a variable.

    Returns:
        The file removed, or None where there was none to remove.
    """
    path, attempt = _lookup(get)
    if attempt is None or path in _consumed:
        return None  # never a marker this run wrote itself
    _consumed.add(path)
    try:
        path.unlink()
    except FileNotFoundError:
        return None
    return path


def requeue_marker(environ: Mapping[str, str] | None = None) -> Path:
    """Where a stopped run leaves its requeue marker (see :func:`marker_path`).

    The same path this process looked for a marker at, the first time it asked for the
    attempt, even if its working directory has changed since.

    Args:
        environ: The environment; ``os.environ`` when omitted.

    Returns:
        The marker's absolute path.
    """
    return _lookup(getter_for(environ))[0]


def consume_requeue_marker(environ: Mapping[str, str] | None = None) -> Path | None:
    """Remove the requeue marker this process counted (see :func:`consume_marker`).

    Args:
        environ: The environment; ``os.environ`` when omitted.

    Returns:
        The file removed, or None where there was none to remove.
    """
    return consume_marker(getter_for(environ))
