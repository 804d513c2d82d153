"""``scontrol``, run so that the job's own stop signals cannot end it halfway.

A rank that runs ``scontrol requeue`` on its own job asks SLURM to end every process of
that job, ``scontrol`` included: SLURM sends SIGTERM the moment it takes the request,
which would end ``scontrol`` before it prints SLURM's answer, and rank 0 would take a
requeue that happened for one that failed (a marker and status 75 on top of SLURM's own
requeue: the next attempt counted twice). The same SIGTERM can reach ``scontrol show``
as the job stops. So ``scontrol`` runs under ``/bin/sh`` with the stop signals ignored,
which ``exec`` keeps; SIGKILL, after SLURM's ``KillWait``, still ends it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

__all__ = ["IGNORED", "run_scontrol"]

IGNORED = ("TERM", "INT", "HUP", "USR1", "USR2")
"""The signals ``scontrol`` ignores: those SLURM, ``scancel --signal`` and a terminal
send to every process of a job."""

_SHIELDED = f'trap "" {" ".join(IGNORED)}; exec scontrol "$@"'


def run_scontrol(args: Sequence[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``scontrol ARGS`` (found on ``PATH``) with :data:`IGNORED` ignored.

    Args:
        args: ``scontrol``'s arguments (``["requeue", "123"]``).
        timeout: Seconds it may take; then it is killed.

    Returns:
        The finished process, its output as text.

    Raises:
        OSError: ``/bin/sh`` could not be started.
        subprocess.TimeoutExpired: ``scontrol`` ran past ``timeout``.
    """
    command = ["/bin/sh", "-c", _SHIELDED, "scontrol", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
