"""Where the hang watchdog writes each rank's report: one folder per job and host.

``HELIOS_HANG_DIR`` names it; by default it is ``helios-hang-<job>`` in the temporary
directory. A job that ends without a roll call leaves nothing behind: each rank removes
its own untouched faulthandler file as it stops, and the last rank of a host to stop
removes the default folder. A roll call's reports, and any dump faulthandler wrote,
stay.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from helios_pg._reports._hang_settings import DIRECTORY_VARIABLE
from helios_pg._reports._stackdump import StackDump

__all__ = ["report_directory", "tidy"]


def report_directory(job: str) -> tuple[Path, bool]:
    """The folder of this job's reports on this host, created.

    Args:
        job: The job's identity.

    Returns:
        The folder, and whether it is helios's own (not one the user named), which
        may then be removed.
    """
    configured = os.environ.get(DIRECTORY_VARIABLE)
    tag = "".join(c if c.isalnum() else "-" for c in job)[:80]
    base = Path(configured) if configured else Path(tempfile.gettempdir()) / f"helios-hang-{tag}"
    base.mkdir(parents=True, exist_ok=True)
    return base, not configured


def tidy(directory: Path, dump: StackDump | None, *, remove_directory: bool) -> None:
    """Remove a rank's untouched dump file, and the folder once it is empty.

    Args:
        directory: The job's report folder.
        dump: The rank's faulthandler file; kept where faulthandler wrote to it.
        remove_directory: Whether the folder may be removed (helios's own).
    """
    if dump is not None:
        if not dump.untouched():
            return
        dump.path.unlink(missing_ok=True)
    if remove_directory:
        with contextlib.suppress(OSError):
            directory.rmdir()  # fails while another rank's file is there
