"""Worker: import mpi4py as helios-pg does under this mpirun, and broadcast from rank 0.

Prints one ``RESULT`` line: the rank and size MPI gives, the library mpi4py was told to
load (``MPI4PY_LIBMPI``) and what rank 0 sent; or why ``mpi4py.MPI`` could not be
imported.
"""

from __future__ import annotations

import os

from helios_env import detect_launcher
from helios_pg._setup._mpi import import_mpi
from tests.support.worker import report


def main() -> int:
    found = import_mpi(detect_launcher())
    if found.module is None:
        report(problem=found.problem)
        return 3
    world = found.module.COMM_WORLD
    sent = world.bcast(os.getpid() if world.Get_rank() == 0 else None, root=0)
    report(
        rank=world.Get_rank(),
        size=world.Get_size(),
        libmpi=os.environ.get("MPI4PY_LIBMPI"),
        sent=sent,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
