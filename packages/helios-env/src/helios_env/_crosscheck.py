"""When two launchers' variables describe the same process, they must not contradict.

The launcher closest to the process gives the answer (see :mod:`helios_env._launcher`);
this module decides whether the launcher around it agrees. A contradiction that makes
the answer wrong is a :class:`LauncherEnvError` naming both variables; two readings
that are both legitimate give a :class:`LauncherEnvWarning` naming them. Nothing here
runs when ``HELIOS_LAUNCHER`` forces a source.
"""

from __future__ import annotations

import warnings

from helios_env._environ import Getter
from helios_env._errors import LauncherEnvError, LauncherEnvWarning
from helios_env._launcher import FORCE_VARIABLE, Launcher, mpi_launcher, slurm_step
from helios_env._variables import parse_int

__all__ = ["cross_check"]


def _outer(get: Getter) -> tuple[str, str] | None:
    """The rank and size variables of an MPI job or srun step around this process."""
    mpi = mpi_launcher(get)
    if mpi is not None:
        return mpi[1], mpi[2]
    if slurm_step(get):
        return "SLURM_PROCID", "SLURM_STEP_NUM_TASKS"
    return None


def _pair(get: Getter, *names: str) -> str:
    return ", ".join(f"{name}={get(name)!r}" for name in names)


def _check_torchrun(get: Getter, outer_size: str) -> None:
    tasks = parse_int(outer_size, get(outer_size) or "", minimum=1)
    agents_raw = get("GROUP_WORLD_SIZE")
    if tasks == 1 or agents_raw is None:
        return
    agents = parse_int("GROUP_WORLD_SIZE", agents_raw, minimum=1)
    if agents == tasks:
        return
    pair = _pair(get, "GROUP_WORLD_SIZE", outer_size)
    if agents == 1:
        message = (
            f"torchrun's rendezvous has one agent (GROUP_WORLD_SIZE={agents_raw!r}), but this "
            f"is one of {outer_size}={get(outer_size)!r} tasks started around it: each task "
            f"ran its own torchrun, so these are {tasks} independent jobs, not one. Start "
            f"one torchrun per node (srun --ntasks-per-node=1 torchrun --nnodes=$SLURM_NNODES "
            f"--rdzv-backend=c10d ...), or set {FORCE_VARIABLE}=torchrun if independent "
            f"jobs are intended"
        )
        raise LauncherEnvError("GROUP_WORLD_SIZE", agents_raw, message)
    # An elastic round (--nnodes=2:4) may close with fewer agents than tasks: legitimate.
    message = (
        f"torchrun's rendezvous has {agents} agents but {tasks} tasks were started around "
        f"it ({pair}); if this is not an elastic run, some agents are waiting or belong to "
        f"another job. Set {FORCE_VARIABLE}=torchrun to silence this warning"
    )
    warnings.warn(message, LauncherEnvWarning, stacklevel=5)


def _check_hand_set(get: Getter, outer_rank: str, outer_size: str) -> None:
    rank_raw, size_raw = get("RANK"), get("WORLD_SIZE")
    if rank_raw is None or size_raw is None:
        return  # reported as missing by the reader
    rank = parse_int("RANK", rank_raw, minimum=0)
    size = parse_int("WORLD_SIZE", size_raw, minimum=1)
    outer_rank_value = parse_int(outer_rank, get(outer_rank) or "", minimum=0)
    outer_size_value = parse_int(outer_size, get(outer_size) or "", minimum=1)
    if size == outer_size_value:
        if rank != outer_rank_value:
            message = (
                f"RANK={rank_raw!r} contradicts {outer_rank}={get(outer_rank)!r} in a job of "
                f"{size} processes ({_pair(get, 'WORLD_SIZE', outer_size)}); unset RANK "
                f"and WORLD_SIZE to use the launcher's ranks, or set {FORCE_VARIABLE}=env "
                f"to use RANK as set"
            )
            raise LauncherEnvError("RANK", rank_raw, message)
        return
    message = (
        f"{_pair(get, 'RANK', 'WORLD_SIZE')} (set by hand or by a program that starts its "
        f"own processes) describe another job than {_pair(get, outer_rank, outer_size)}; "
        f"using RANK and WORLD_SIZE. Set {FORCE_VARIABLE}=env to use them without this "
        f"warning, or {FORCE_VARIABLE}=slurm or mpi to use the launcher's ranks"
    )
    warnings.warn(message, LauncherEnvWarning, stacklevel=5)


def _check_kubeflow(get: Getter) -> None:
    nodes_raw = get("PET_NNODES")
    size_raw = get("WORLD_SIZE")
    if nodes_raw is None or size_raw is None:
        return
    # PET_NNODES may be a range such as "1:4" for elastic jobs: compare only numbers.
    if not (nodes_raw.strip().isdigit() and size_raw.strip().isdigit()):
        return
    if int(nodes_raw) != int(size_raw):
        per_node = get("PET_NPROC_PER_NODE")
        message = (
            f"this Kubeflow PyTorchJob runs {size_raw} processes on {nodes_raw} pods "
            f"(PET_NPROC_PER_NODE={per_node!r}, {_pair(get, 'PET_NNODES', 'WORLD_SIZE')}), "
            f"but no torchrun started this process: RANK={get('RANK')!r} is the pod's rank, "
            f"not a process's. Run the program under torchrun in the pod's command (it reads "
            f"the PET_* variables), or set nprocPerNode to 1"
        )
        raise LauncherEnvError("PET_NPROC_PER_NODE", per_node, message)


def cross_check(get: Getter, launcher: Launcher) -> None:
    """Check the winning launcher's variables against the launcher around it.

    Args:
        get: Looks a variable up by name.
        launcher: The launcher whose variables give the answer.

    Raises:
        LauncherEnvError: The two launchers contradict each other.
    """
    if get(FORCE_VARIABLE) is not None:
        return
    if launcher is Launcher.KUBEFLOW:
        _check_kubeflow(get)
        return
    if launcher not in (Launcher.TORCHRUN, Launcher.ENVIRONMENT):
        return
    outer = _outer(get)
    if outer is None:
        return
    if launcher is Launcher.TORCHRUN:
        _check_torchrun(get, outer[1])
    else:
        _check_hand_set(get, *outer)
