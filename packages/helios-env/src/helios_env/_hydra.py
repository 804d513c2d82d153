"""An MPI job's identity from its launcher's proxy, where no variable names the job.

MPICH's and Intel MPI's Hydra start each node's ranks under a proxy
(``hydra_pmi_proxy``, ``pmi_proxy``) whose command line names the ``mpiexec`` it serves:
its control port and process group. Read from ``/proc``, on Linux only.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

__all__ = ["hydra_control", "proxy_ancestor"]

_PROXIES = frozenset({b"hydra_pmi_proxy", b"pmi_proxy"})
_PROC = Path("/proc")


def hydra_control(pid: int, proc: Path = _PROC) -> str | None:
    """``host:port (pgid N)`` of the mpiexec behind a Hydra proxy, from its command line."""
    try:
        args = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    found: dict[bytes, str] = {}
    for flag, value in itertools.pairwise(args):
        if flag in (b"--control-port", b"--pgid") and value:
            found[flag] = value.decode(errors="replace")
    control = found.get(b"--control-port")
    if control is None:
        return None
    return f"{control} (pgid {found.get(b'--pgid', '0')})"


def proxy_ancestor(proc: Path = _PROC) -> int | None:
    """The pid of the nearest ancestor that is an MPI launcher's proxy, on Linux."""
    pid = os.getppid()
    for _ in range(32):
        try:
            stat = (proc / str(pid) / "stat").read_bytes()
        except OSError:
            return None
        name, _, rest = stat.partition(b" (")[2].rpartition(b") ")
        if name in _PROXIES:
            return pid
        fields = rest.split()
        if len(fields) < 2 or not fields[1].isdigit() or int(fields[1]) <= 1:
            return None
        pid = int(fields[1])
    return None
