"""torchrun's error file: written in torchrun's own format, atomically, never over another.

Under torchrun, ``TORCHELASTIC_ERROR_FILE`` names the file where a worker says why it
failed; torchrun names as the root cause the failure with the earliest timestamp. The
failure reporter (``helios_pg._failure``) and the hang watchdog's culprits
(``helios_pg._watchdog``) write it through :func:`write_error_file`, which leaves alone
a file that ``@record`` wrote.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

__all__ = ["ERROR_FILE_VARIABLE", "write_error_file"]

ERROR_FILE_VARIABLE = "TORCHELASTIC_ERROR_FILE"


def write_error_file(path: str, message: str, callstack: str, timestamp: int) -> bool:
    """Write torchrun's error file atomically, unless one exists (``@record`` wrote it)."""
    target = Path(path)
    if target.exists():
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
            if target.exists():
                return False
            temporary.replace(target)  # torchrun fails on a partly written file
            return True
        finally:
            temporary.unlink(missing_ok=True)
    return False
