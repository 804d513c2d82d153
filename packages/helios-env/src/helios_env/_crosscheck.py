"""When two launchers' variables describe the same process, they must not contradict.

The launcher closest to the process gives the answer (see :mod:`helios_env._detect`);
this module decides whether the launcher around it agrees, reading both launchers'
variables from their entries in :mod:`helios_env._launcher`. A contradiction that makes
the answer wrong is a :class:`LauncherEnvError` naming both variables; two readings
that are both legitimate give a :class:`LauncherEnvWarning` naming them. Nothing here
runs when ``HELIOS_LAUNCHER`` forces a source.
"""

from __future__ import annotations

import warnings

from helios_env._detect import FORCE_VARIABLE, mpi_spec, present
from helios_env._environ import Getter
from helios_env._errors import LauncherEnvError, LauncherEnvWarning
from helios_env._integers import parse_int
from helios_env._launcher import SPECS, Launcher, LauncherSpec

__all__ = ["cross_check", "warnings_given"]

_given = [0]
"""How many warnings this module gave: a rank query that warned is not remembered."""


def warnings_given() -> int:
    """How many :class:`LauncherEnvWarning` the cross-check gave in this process."""
    return _given[0]


_SLURM = SPECS[Launcher.SLURM]
_ENV = SPECS[Launcher.ENVIRONMENT].names


def _outer(get: Getter) -> LauncherSpec | None:
    """The MPI job or srun step around this process."""
    mpi = mpi_spec(get)
    if mpi is not None:
        return mpi
    return _SLURM if present(get, _SLURM) else None


def _pair(get: Getter, *names: str) -> str:
    return ", ".join(f"{name}={get(name)!r}" for name in names)


def _check_torchrun(get: Getter, spec: LauncherSpec, outer_size: str) -> None:
    tasks = parse_int(outer_size, get(outer_size) or "", minimum=1)
    if not spec.nodes:
        return
    agents_name = spec.nodes[0]
    agents_raw = get(agents_name)
    if tasks == 1 or agents_raw is None:
        return
    agents = parse_int(agents_name, agents_raw, minimum=1)
    if agents == tasks:
        return
    pair = _pair(get, agents_name, outer_size)
    if agents == 1:
        message = (
            f"torchrun's rendezvous has one agent ({agents_name}={agents_raw!r}), but this "
            f"is one of {outer_size}={get(outer_size)!r} tasks started around it: each task "
            f"ran its own torchrun, so these are {tasks} independent jobs, not one. Start "
            f"one torchrun per node (srun --ntasks-per-node=1 torchrun --nnodes=$SLURM_NNODES "
            f"--rdzv-backend=c10d ...), or set {FORCE_VARIABLE}=torchrun if independent "
            f"jobs are intended"
        )
        raise LauncherEnvError(agents_name, agents_raw, message)
    # An elastic round (--nnodes=2:4) may close with fewer agents than tasks: legitimate.
    message = (
        f"torchrun's rendezvous has {agents} agents but {tasks} tasks were started around "
        f"it ({pair}); if this is not an elastic run, some agents are waiting or belong to "
        f"another job. Set {FORCE_VARIABLE}=torchrun to silence this warning"
    )
    _given[0] += 1
    warnings.warn(message, LauncherEnvWarning, stacklevel=5)


def _check_hand_set(get: Getter, outer: LauncherSpec) -> None:
    rank_raw, size_raw = get(_ENV.rank), get(_ENV.world_size)
    if rank_raw is None or size_raw is None:
        return  # reported as missing by the reader
    outer_rank, outer_size = outer.names.rank, outer.names.world_size
    rank = parse_int(_ENV.rank, rank_raw, minimum=0)
    size = parse_int(_ENV.world_size, size_raw, minimum=1)
    outer_rank_value = parse_int(outer_rank, get(outer_rank) or "", minimum=0)
    outer_size_value = parse_int(outer_size, get(outer_size) or "", minimum=1)
    if size == outer_size_value:
        if rank != outer_rank_value:
            message = (
                f"RANK={rank_raw!r} contradicts {outer_rank}={get(outer_rank)!r} in a job of "
                f"{size} processes ({_pair(get, _ENV.world_size, outer_size)}); unset RANK "
                f"and WORLD_SIZE to use the launcher's ranks, or set {FORCE_VARIABLE}=env "
                f"to use RANK as set"
            )
            raise LauncherEnvError(_ENV.rank, rank_raw, message)
        return
    message = (
        f"{_pair(get, _ENV.rank, _ENV.world_size)} (set by hand or by a program that starts "
        f"its own processes) describe another job than {_pair(get, outer_rank, outer_size)}; "
        f"using RANK and WORLD_SIZE. Set {FORCE_VARIABLE}=env to use them without this "
        f"warning, or {FORCE_VARIABLE}=slurm or mpi to use the launcher's ranks"
    )
    _given[0] += 1
    warnings.warn(message, LauncherEnvWarning, stacklevel=5)


def _check_kubeflow(get: Getter, spec: LauncherSpec) -> None:
    if spec.requested is None:
        return
    nodes, per_node = spec.requested
    nodes_raw, size_raw = get(nodes), get(spec.names.world_size)
    if nodes_raw is None or size_raw is None:
        return
    # The number of pods may be a range such as "1:4" for elastic jobs: compare numbers.
    if not (nodes_raw.strip().isdigit() and size_raw.strip().isdigit()):
        return
    if int(nodes_raw) != int(size_raw):
        per_node_raw = get(per_node)
        message = (
            f"this Kubeflow PyTorchJob runs {size_raw} processes on {nodes_raw} pods "
            f"({per_node}={per_node_raw!r}, {_pair(get, nodes, spec.names.world_size)}), "
            f"but no torchrun started this process: {_pair(get, spec.names.rank)} is the "
            f"pod's rank, not a process's. Run the program under torchrun in the pod's "
            f"command (it reads the PET_* variables), or set nprocPerNode to 1"
        )
        raise LauncherEnvError(per_node, per_node_raw, message)


def _check_trainer(get: Getter, spec: LauncherSpec) -> None:
    if spec.requested is None:
        return
    nodes, per_node = spec.requested
    raw = get(per_node)
    # "auto", "cpu" and "gpu" leave the count to torchrun: only a number says it.
    if raw is None or not raw.strip().isdigit() or int(raw) <= 1:
        return
    message = (
        f"this Kubeflow TrainJob asks for {raw.strip()} processes per node ({per_node}="
        f"{raw!r}, {_pair(get, nodes)}), but no torchrun started this process, so each pod "
        f"runs one. Run the program under torchrun in the trainer's command (it reads the "
        f"PET_* variables), or set numProcPerNode to 1"
    )
    raise LauncherEnvError(per_node, raw, message)


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
        _check_kubeflow(get, SPECS[launcher])
        return
    if launcher is Launcher.KUBEFLOW_TRAINER:
        _check_trainer(get, SPECS[launcher])
        return
    if launcher not in (Launcher.TORCHRUN, Launcher.ENVIRONMENT):
        return
    outer = _outer(get)
    if outer is None:
        return
    if launcher is Launcher.TORCHRUN:
        _check_torchrun(get, SPECS[launcher], outer.names.world_size)
    else:
        _check_hand_set(get, outer)
