"""torchrun's error file: written in torchrun's own format, atomically, never over another.

Under torchrun, ``TORCHELASTIC_ERROR_FILE`` names the file where a worker says why it
failed; torchrun names as the root cause the failure with the earliest timestamp. The
failure reporter (``helios_pg._reports._reporter``) and the hang watchdog's culprits
(``helios_pg._reports._watchdog``) write it through :func:`write_error_file`, which leaves alone
a file that ``@record`` wrote. A culprit's file for a hang is provisional: it is
removed when the hang ends (:func:`retract_hang_file`), or replaced by the rank's own
failure. So is the file for an error ``init()`` raised: removed when an ``init()`` of
the same process succeeds after it, replaced by a later failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from pathlib import Path

__all__ = ["ERROR_FILE_VARIABLE", "retract_hang_file", "write_error_file"]

ERROR_FILE_VARIABLE = "TORCHELASTIC_ERROR_FILE"
_hang_files: set[str] = set()  # the hang files this process wrote
_lock = threading.Lock()  # the watchdog's thread and the main thread both write and retract


def write_error_file(
    path: str,
    message: str,
    callstack: str,
    timestamp: int,
    *,
    hang: bool = False,
    replace_hang: bool = False,
) -> bool:
    """Write torchrun's error file atomically, unless one exists (``@record`` wrote it).

    Args:
        path: The file.
        message: The failure's message.
        callstack: Its traceback.
        timestamp: When it happened (Unix seconds).
        hang: Whether it is a hang's culprit's file: removed if the hang ends.
        replace_hang: Whether it replaces a hang's file this process wrote (a rank's
            own failure does, and any failure once that hang has ended).

    Returns:
        Whether the file was written.
    """
    with _lock:
        return _write(path, message, callstack, timestamp, hang=hang, replace_hang=replace_hang)


def _write(
    path: str,
    message: str,
    callstack: str,
    timestamp: int,
    *,
    hang: bool,
    replace_hang: bool,
) -> bool:
    target = Path(path)
    if target.exists() and (path not in _hang_files or not replace_hang):
        return False
    data = {
        "message": {
            "message": message,
            "extraInfo": {"py_callstack": callstack, "timestamp": str(timestamp)},
        }
    }
    with contextlib.suppress(OSError):
        handle, name = tempfile.mkstemp(prefix=".helios-error-", dir=target.parent)
        temporary = Path(name)
        try:
            with os.fdopen(handle, "w") as sink:
                json.dump(data, sink)
            if target.exists() and not (replace_hang and path in _hang_files):
                return False
            temporary.replace(target)  # torchrun fails on a partly written file
        finally:
            temporary.unlink(missing_ok=True)
        if hang:
            _hang_files.add(path)
        else:
            _hang_files.discard(path)
        return True
    return False


def retract_hang_file(path: str) -> None:
    """Remove the hang file this process wrote at ``path``, if it is still a hang's."""
    with _lock:
        if path in _hang_files:
            _hang_files.discard(path)
            with contextlib.suppress(OSError):
                Path(path).unlink()
