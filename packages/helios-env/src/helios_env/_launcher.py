"""Which launcher started this process, judged from its environment."""

from __future__ import annotations

import enum
from collections.abc import Mapping

from helios_env._environ import Getter, getter_for

__all__ = ["Launcher", "detect_launcher", "detect_with", "is_using_torchrun"]

# Set by the torch elastic agent for every worker it starts, whatever the rendezvous
# (standalone, static multi-node, c10d); never set by mp.spawn or by hand-started runs.
_TORCHRUN_VARIABLES = (
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
)
_OPEN_MPI_VARIABLES = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")
# SLURM_STEP_NUM_TASKS is set inside an srun step only, not in the batch script, where
# SLURM_PROCID would describe one process of a job that has not started its tasks yet.
_SLURM_VARIABLES = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS")


class Launcher(str, enum.Enum):
    """The launcher that set this process's rank variables."""

    NONE = "none"
    """A plain process: no rank variables are set."""
    TORCHRUN = "torchrun"
    """torchrun (torch elastic), with any rendezvous."""
    ENVIRONMENT = "environment"
    """``RANK`` and ``WORLD_SIZE`` set by hand or by a program such as ``mp.spawn``."""
    OPEN_MPI = "open-mpi"
    """Open MPI's ``mpirun``."""
    SLURM = "slurm"
    """A SLURM ``srun`` step."""

    def __str__(self) -> str:
        return self.value


def is_using_torchrun(environ: Mapping[str, str] | None = None) -> bool:
    """Check whether torchrun (torch elastic) started this process.

    True for every rendezvous torchrun offers (standalone, static multi-node and c10d);
    False in a plain process and under ``mp.spawn`` with hand-set ``RANK`` and
    ``WORLD_SIZE``.

    Args:
        environ: The environment to inspect; ``os.environ`` when omitted.

    Returns:
        True if the variables that the torch elastic agent sets for its workers exist.
    """
    get = getter_for(environ)
    return all(get(name) is not None for name in _TORCHRUN_VARIABLES)


def detect_launcher(environ: Mapping[str, str] | None = None) -> Launcher:
    """Name the launcher whose variables describe this process.

    ``RANK``/``WORLD_SIZE`` take precedence over Open MPI's variables, which take
    precedence over SLURM's, matching the order in which rank queries read them.

    Args:
        environ: The environment to inspect; ``os.environ`` when omitted.

    Returns:
        The detected launcher; ``Launcher.NONE`` for a plain process.
    """
    return detect_with(getter_for(environ))


def detect_with(get: Getter) -> Launcher:
    """Name the launcher whose variables ``get`` finds (see :func:`detect_launcher`).

    Args:
        get: Looks a variable up by name; None when it is not set.

    Returns:
        The detected launcher; ``Launcher.NONE`` for a plain process.
    """
    if get("RANK") is not None or get("WORLD_SIZE") is not None or get("LOCAL_RANK") is not None:
        if all(get(name) is not None for name in _TORCHRUN_VARIABLES):
            return Launcher.TORCHRUN
        return Launcher.ENVIRONMENT
    if all(get(name) is not None for name in _OPEN_MPI_VARIABLES):
        return Launcher.OPEN_MPI
    if all(get(name) is not None for name in _SLURM_VARIABLES):
        return Launcher.SLURM
    return Launcher.NONE
