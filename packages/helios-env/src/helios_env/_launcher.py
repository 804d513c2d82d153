"""Which launcher started this process, judged from its environment.

Several launchers' variables can be present at once: torchrun started inside an srun
step, mpirun's daemons started as an srun step, a program that spawns its own
processes below srun. The launcher closest to the process wins (torchrun, then
hand-set ``RANK``/``WORLD_SIZE``, then MPI, then SLURM); whether the outer one agrees
is checked by :mod:`helios_env._crosscheck`. ``HELIOS_LAUNCHER`` forces one source.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from helios_env._environ import Getter, getter_for
from helios_env._errors import LauncherEnvError

__all__ = [
    "FORCE_VARIABLE",
    "MPI_LAUNCHERS",
    "Launcher",
    "detect_launcher",
    "detect_with",
    "is_using_torchrun",
    "is_using_torchrun_with",
    "mpi_launcher",
    "slurm_step",
]

FORCE_VARIABLE = "HELIOS_LAUNCHER"

# Set by the torch elastic agent for every worker it starts, whatever the rendezvous
# (standalone, static multi-node, c10d); never set by mp.spawn or by hand-started runs.
_TORCHRUN_VARIABLES = (
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
)
# SLURM_STEP_NUM_TASKS is set inside an srun step only, not in the batch script, where
# SLURM_PROCID would describe one process of a job that has not started its tasks yet.
_SLURM_VARIABLES = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS")
# The Kubeflow training operator sets PET_* beside RANK/WORLD_SIZE in every pod.
_KUBEFLOW_VARIABLE = "PET_NNODES"


class Launcher(str, enum.Enum):
    """The launcher that set this process's rank variables."""

    NONE = "none"
    """A plain process, with no rank variables set (an sbatch script itself, too)."""
    TORCHRUN = "torchrun"
    """torchrun (torch elastic), with any rendezvous."""
    ENVIRONMENT = "environment"
    """``RANK`` and ``WORLD_SIZE`` set by hand or by a program such as ``mp.spawn``."""
    KUBEFLOW = "kubeflow"
    """A Kubeflow PyTorchJob pod running the program without torchrun."""
    OPEN_MPI = "open-mpi"
    """Open MPI's ``mpirun`` (``OMPI_COMM_WORLD_*``)."""
    MVAPICH2 = "mvapich2"
    """MVAPICH2's ``mpirun_rsh`` or ``mpiexec`` (``MV2_COMM_WORLD_*``)."""
    LSF = "lsf"
    """IBM LSF's ``jsrun`` (``JSM_NAMESPACE_*``)."""
    MPICH = "mpich"
    """MPICH, Intel MPI or another Hydra-based ``mpirun`` (``PMI_RANK``, ``PMI_SIZE``)."""
    SLURM = "slurm"
    """A SLURM ``srun`` step (also inside ``salloc`` and ``sbatch``)."""

    def __str__(self) -> str:
        return self.value


# MPI launchers in the order they are preferred, with their rank and size variables.
MPI_LAUNCHERS: tuple[tuple[Launcher, str, str], ...] = (
    (Launcher.OPEN_MPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    (Launcher.MVAPICH2, "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"),
    (Launcher.LSF, "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE"),
    (Launcher.MPICH, "PMI_RANK", "PMI_SIZE"),
)
_FORCED = {
    "torchrun": Launcher.TORCHRUN,
    "slurm": Launcher.SLURM,
    "mpi": None,
    "env": Launcher.ENVIRONMENT,
    "none": Launcher.NONE,
}


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
    return is_using_torchrun_with(getter_for(environ))


def detect_launcher(environ: Mapping[str, str] | None = None) -> Launcher:
    """Name the launcher whose variables describe this process.

    The launcher closest to the process wins: torchrun, then hand-set ``RANK`` and
    ``WORLD_SIZE`` (or a Kubeflow pod's), then MPI (Open MPI, MVAPICH2, LSF, then
    MPICH/Intel MPI), then an srun step. An srun step whose PMI plugin also sets
    ``PMI_RANK``/``PMI_SIZE`` with the same values (``srun --mpi=pmi2``) is SLURM.
    ``HELIOS_LAUNCHER=torchrun|slurm|mpi|env|none`` forces one source.

    Args:
        environ: The environment to inspect; ``os.environ`` when omitted.

    Returns:
        The detected launcher; ``Launcher.NONE`` for a plain process.

    Raises:
        LauncherEnvError: ``HELIOS_LAUNCHER`` is set to an unknown value, or names a
            launcher whose variables are not set.
    """
    return detect_with(getter_for(environ))


def slurm_step(get: Getter) -> bool:
    """Whether this process is a task of an srun step."""
    return all(get(name) is not None for name in _SLURM_VARIABLES)


def mpi_launcher(get: Getter) -> tuple[Launcher, str, str] | None:
    """The preferred MPI launcher whose rank and size variables are set, if any."""
    for entry in MPI_LAUNCHERS:
        if get(entry[1]) is not None and get(entry[2]) is not None:
            return entry
    return None


def _forced(get: Getter, raw: str) -> Launcher:
    value = raw.strip().lower()
    if value not in _FORCED:
        choices = "|".join(_FORCED)
        message = (
            f"{FORCE_VARIABLE} must be one of {choices}, got {FORCE_VARIABLE}={raw!r}; "
            f"fix it or unset it to detect the launcher"
        )
        raise LauncherEnvError(FORCE_VARIABLE, raw, message)
    launcher = _FORCED[value]
    if launcher is Launcher.NONE:
        return launcher
    if launcher is None:
        found = mpi_launcher(get)
        if found is None:
            wanted = ", ".join(f"{rank}/{size}" for _, rank, size in MPI_LAUNCHERS)
            message = (
                f"{FORCE_VARIABLE}={raw!r} but no MPI rank variables are set (looked for "
                f"{wanted}); start the program with mpirun, or change {FORCE_VARIABLE}"
            )
            raise LauncherEnvError(FORCE_VARIABLE, raw, message)
        return found[0]
    if launcher is Launcher.TORCHRUN:
        needed: tuple[str, ...] = _TORCHRUN_VARIABLES
    elif launcher is Launcher.SLURM:
        needed = _SLURM_VARIABLES
    else:
        needed = ("RANK", "WORLD_SIZE")
    missing = [name for name in needed if get(name) is None]
    if missing:
        message = (
            f"{FORCE_VARIABLE}={raw!r} but {', '.join(missing)} is not set; start the "
            f"program with that launcher, or change {FORCE_VARIABLE}"
        )
        raise LauncherEnvError(FORCE_VARIABLE, raw, message)
    if launcher is Launcher.ENVIRONMENT and is_using_torchrun_with(get):
        return Launcher.TORCHRUN
    return launcher


def is_using_torchrun_with(get: Getter) -> bool:
    """:func:`is_using_torchrun` through a lookup function."""
    return all(get(name) is not None for name in _TORCHRUN_VARIABLES)


def detect_with(get: Getter) -> Launcher:
    """Name the launcher whose variables ``get`` finds (see :func:`detect_launcher`).

    Args:
        get: Looks a variable up by name; None when it is not set.

    Returns:
        The detected launcher; ``Launcher.NONE`` for a plain process.

    Raises:
        LauncherEnvError: ``HELIOS_LAUNCHER`` is unknown or names absent variables.
    """
    forced = get(FORCE_VARIABLE)
    if forced is not None:
        return _forced(get, forced)
    mpi = mpi_launcher(get)
    in_step = slurm_step(get)
    # LOCAL_RANK alone is an error of its own, unless srun or mpirun gave the ranks
    # (``export LOCAL_RANK=$SLURM_LOCALID`` in a job script is common).
    local_alone = get("LOCAL_RANK") is not None and mpi is None and not in_step
    if get("RANK") is not None or get("WORLD_SIZE") is not None or local_alone:
        if is_using_torchrun_with(get):
            return Launcher.TORCHRUN
        if get(_KUBEFLOW_VARIABLE) is not None:
            return Launcher.KUBEFLOW
        return Launcher.ENVIRONMENT
    if mpi is not None:
        launcher, rank, size = mpi
        # srun's PMI-2 plugin sets PMI_RANK/PMI_SIZE for the step itself: srun started it.
        same = get(rank) == get("SLURM_PROCID") and get(size) == get("SLURM_STEP_NUM_TASKS")
        return Launcher.SLURM if launcher is Launcher.MPICH and in_step and same else launcher
    if in_step:
        return Launcher.SLURM
    return Launcher.NONE
