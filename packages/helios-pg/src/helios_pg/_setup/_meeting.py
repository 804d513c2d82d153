"""Where the ranks meet, and reaching the rendezvous store there.

``helios_env`` reports ``MASTER_ADDR`` and ``MASTER_PORT``, set or derived under srun
and mpirun. Under mpirun on several nodes nothing says where rank 0 runs, and MPICH
sets no job id to derive a port from: when mpi4py is installed, rank 0 sends its host,
and a free port it chose, to every rank through MPI (:mod:`helios_pg._setup._mpi` has it load
the library of the MPI that launched the process). What is still unknown then stops
every rank at once, naming what to set. Every rank then reaches the store at that
address and port, torch's failures worded in init's terms.
"""

from __future__ import annotations

import socket

from helios_env import EnvironmentReport, Launcher
from helios_env.integration import MPI4PY_HINT, not_set
from helios_pg._errors import RendezvousConfigError
from helios_pg._setup._call import InitCall
from helios_pg._setup._mpi import import_mpi
from helios_pg._setup._store import EnvStore, Meeting, open_store
from helios_pg._setup._torch_errors import Step, map_torch_errors

__all__ = ["connect_env", "find_meeting"]

_MPI = (
    Launcher.OPEN_MPI,
    Launcher.MVAPICH2,
    Launcher.LSF,
    Launcher.MPICH,
    Launcher.PALS,
    Launcher.FLUX,
    Launcher.AZUREML_MPI,
    Launcher.SAGEMAKER_MPI,
)
"""Launchers of MPI programs: where the environment cannot say where rank 0 is, mpi4py can."""


def _mpi_rendezvous(
    launcher: Launcher, rank: int, addr: str | None, port: int | None
) -> tuple[str, int] | str | None:
    """Rank 0's host, and a port it chose when none was derived, sent through MPI.

    Used when mpi4py is installed and the environment cannot say where rank 0 is
    (mpirun on several nodes), or which port to use (MPICH sets no job id).

    Returns:
        The host and port; why mpi4py cannot load MPI; None without mpi4py.
    """
    found = import_mpi(launcher)
    if found.module is None:
        return found.problem
    mine: tuple[str, int] | None = None
    if rank == 0:
        chosen = port
        if chosen is None:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.bind(("", 0))  # a free port; rank 0 binds it again at once
                chosen = int(probe.getsockname()[1])
        mine = (addr if addr is not None else socket.gethostname(), chosen)
    sent: object = found.module.COMM_WORLD.bcast(mine, root=0)
    if not isinstance(sent, tuple) or len(sent) != 2:
        return None
    host, chosen_port = sent
    return (str(host), int(chosen_port)) if isinstance(chosen_port, int) else None


def find_meeting(
    report: EnvironmentReport, rank: int, world_size: int, *, need_rank: bool
) -> Meeting:
    """Where the ranks meet: from the environment, else through MPI.

    Args:
        report: What ``helios_env`` found in the environment.
        rank: This process's global rank.
        world_size: The number of processes.
        need_rank: Whether ``RANK`` is missing (no launcher, no ``rank`` argument).

    Returns:
        The address and port of the store, each with where it came from, and the job.

    Raises:
        RendezvousConfigError: ``RANK``, the address or the port is still unknown.
    """
    addr, port = report.master_addr, report.master_port
    addr_source = report.sources.get("master_addr", "MASTER_ADDR")
    port_source = report.sources.get("master_port", "")
    problem = None
    if (addr is None or port is None) and report.launcher in _MPI:
        sent = _mpi_rendezvous(report.launcher, rank, addr, port)
        if isinstance(sent, str):
            problem, sent = sent, None
        if sent is not None:
            if addr is None:
                addr_source = "derived: rank 0's host, sent through MPI (mpi4py)"
            if port is None:
                port_source = "derived: a free port rank 0 chose, sent through MPI (mpi4py)"
            addr, port = sent
    missing = []
    if need_rank:
        missing.append("RANK")
    if addr is None:
        missing.append("MASTER_ADDR")
    if port is None:
        missing.append("MASTER_PORT")
    if missing:
        why = [
            f"{name}: {report.sources[key]}"
            for name, key in (("MASTER_ADDR", "master_addr"), ("MASTER_PORT", "master_port"))
            if name in missing and report.sources.get(key, "not set") != "not set"
        ]
        if problem is not None:
            # mpi4py is there: what stops it replaces the advice to install it.
            why = [part.replace(f", or {MPI4PY_HINT}", "") for part in why] + [problem]
        detail = f" ({'; '.join(why)})" if why else ""
        message = (
            f"world_size={world_size} needs a rendezvous, but {not_set(missing)}{detail}; "
            "launch with torchrun, srun or mpirun, set the variables, "
            "or pass init_method or store"
        )
        raise RendezvousConfigError(message)
    assert addr is not None
    assert port is not None
    job = report.job if report.job is not None else "a job without a launcher's id"
    return Meeting(addr, port, addr_source, port_source, job)


def connect_env(call: InitCall) -> EnvStore:
    """Reach the store at the call's meeting point, torch's failures worded as init's.

    Args:
        call: What init knows, with the meeting point :func:`find_meeting` found;
            each rank waits ``call.wait`` for the others.

    Returns:
        The store every rank reached, as :func:`helios_pg._setup._store.open_store` does.
    """
    assert call.meeting is not None  # init found it with find_meeting
    with map_torch_errors(call, Step.STORE):
        return open_store(call.meeting, call.rank, call.world_size, call.wait)
