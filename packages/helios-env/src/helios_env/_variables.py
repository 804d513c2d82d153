"""Launcher variables: which names each launcher sets, and reading them strictly."""

from __future__ import annotations

import re
import sys
from typing import Any, NamedTuple

from helios_env._environ import Getter
from helios_env._errors import LauncherEnvError
from helios_env._info import DistributedInfo
from helios_env._launcher import Launcher

__all__ = [
    "ASSUMED_ONE_NODE",
    "DEFAULT",
    "DERIVED",
    "ENV_NAMES",
    "ONE_PER_POD",
    "PROCESS_GROUP",
    "Names",
    "from_variables",
    "live_group",
    "names_for",
    "parse_int",
    "read_int",
]

PROCESS_GROUP = "process group"
DEFAULT = "default"
ASSUMED_ONE_NODE = "assumed: one node"
DERIVED = "derived"


class Names(NamedTuple):
    rank: str
    world_size: str
    local_rank: str
    local_world_size: str | None


ENV_NAMES = Names("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
_OPEN_MPI_NAMES = Names(
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
)
_SLURM_NAMES = Names("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", None)
# A Kubeflow pod without torchrun runs one process: the pod's rank is the process's.
_KUBEFLOW_NAMES = Names("RANK", "WORLD_SIZE", "LOCAL_RANK", None)
ONE_PER_POD = "one process per pod (PET_NNODES)"
_NAMES = {
    Launcher.TORCHRUN: ENV_NAMES,
    Launcher.ENVIRONMENT: ENV_NAMES,
    Launcher.KUBEFLOW: _KUBEFLOW_NAMES,
    Launcher.OPEN_MPI: _OPEN_MPI_NAMES,
    Launcher.MVAPICH2: Names(
        "MV2_COMM_WORLD_RANK",
        "MV2_COMM_WORLD_SIZE",
        "MV2_COMM_WORLD_LOCAL_RANK",
        "MV2_COMM_WORLD_LOCAL_SIZE",
    ),
    Launcher.LSF: Names(
        "JSM_NAMESPACE_RANK",
        "JSM_NAMESPACE_SIZE",
        "JSM_NAMESPACE_LOCAL_RANK",
        "JSM_NAMESPACE_LOCAL_SIZE",
    ),
    Launcher.MPICH: Names("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    Launcher.SLURM: _SLURM_NAMES,
}
# A node of a step runs at least one task: counts and repeats are positive.
_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")
_SLURM_TASKS_PER_NODE = re.compile(r"^([1-9]\d*)(?:\(x([1-9]\d*)\))?$")


def read_int(get: Getter, name: str | None, *, minimum: int) -> int | None:
    if name is None:
        return None
    raw = get(name)
    if raw is None:
        return None
    return parse_int(name, raw, minimum=minimum)


def parse_int(name: str, raw: str, *, minimum: int) -> int:
    if raw.isdigit() and raw.isascii():  # the common case, without the regex
        value = int(raw)
        if value >= minimum:
            return value
    try:
        # ASCII digits only: int() would also take "1_0" and non-ASCII digits.
        if _INTEGER.fullmatch(raw) is None:
            raise ValueError(raw)
        value = int(raw.strip(), 10)
    except ValueError:
        kind = "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"
        message = f"{name} must be {kind}, got {name}={raw!r}; fix or unset it"
        raise LauncherEnvError(name, raw, message) from None
    if value < minimum:
        message = f"{name} must be >= {minimum}, got {name}={raw!r}; fix or unset it"
        raise LauncherEnvError(name, raw, message)
    return value


def live_group() -> tuple[int, int] | None:
    """Return the live default group's (rank, size), or None when there is none.

    Never imports torch: if ``torch.distributed`` was never imported, no group can
    exist. ``torch.distributed.group.WORLD`` is the default group, None before init.
    """
    dist: Any = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        world = dist.group.WORLD
        if world is None:
            return None
        return world.rank(), world.size()
    except (AttributeError, RuntimeError, ValueError):
        # A torch without distributed support, or a group torn down under us.
        return None


def _slurm_local_world_size(get: Getter) -> tuple[int, str] | None:
    # SLURM_STEP_TASKS_PER_NODE looks like "2(x3),1": 2 tasks on each of 3 nodes, then 1.
    raw = get("SLURM_STEP_TASKS_PER_NODE")
    node = read_int(get, "SLURM_NODEID", minimum=0)
    if raw is None or node is None:
        return None
    counts: list[int] = []
    for part in raw.split(","):
        match = _SLURM_TASKS_PER_NODE.match(part.strip())
        if match is None:
            message = (
                "SLURM_STEP_TASKS_PER_NODE must look like '2(x3),1', got "
                f"SLURM_STEP_TASKS_PER_NODE={raw!r}; it is set by srun and should not be edited"
            )
            raise LauncherEnvError("SLURM_STEP_TASKS_PER_NODE", raw, message)
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    if node >= len(counts):
        return None
    return counts[node], "SLURM_STEP_TASKS_PER_NODE"


def _check_below(get: Getter, lower: str, upper: str, lower_value: int, upper_value: int) -> None:
    """Require the variable ``lower`` to be smaller than ``upper`` (a rank and its size)."""
    if lower_value >= upper_value:
        message = (
            f"{lower} must be smaller than {upper}, got {lower}={get(lower)!r} "
            f"and {upper}={get(upper)!r}; fix the launcher configuration or unset both"
        )
        raise LauncherEnvError(lower, get(lower), message)


def from_variables(get: Getter, names: Names) -> tuple[DistributedInfo, dict[str, str]] | None:
    rank = read_int(get, names.rank, minimum=0)
    world_size = read_int(get, names.world_size, minimum=1)
    local_rank = read_int(get, names.local_rank, minimum=0)
    local_world_size = read_int(get, names.local_world_size, minimum=1)
    if rank is None and world_size is None:
        if local_rank is not None:
            message = (
                f"{names.local_rank} is set ({names.local_rank}={get(names.local_rank)!r}) "
                f"but {names.rank} and {names.world_size} are not; "
                f"set both or unset {names.local_rank}"
            )
            raise LauncherEnvError(names.local_rank, get(names.local_rank), message)
        return None
    if rank is None or world_size is None:
        present, missing = (
            (names.world_size, names.rank) if rank is None else (names.rank, names.world_size)
        )
        message = (
            f"{present} is set ({present}={get(present)!r}) but {missing} is not; "
            f"set {missing} too, or unset {present}"
        )
        raise LauncherEnvError(missing, None, message)
    _check_below(get, names.rank, names.world_size, rank, world_size)
    sources = {"rank": names.rank, "world_size": names.world_size}
    if local_world_size is not None:
        assert names.local_world_size is not None
        sources["local_world_size"] = names.local_world_size
    elif names is _SLURM_NAMES:
        found = _slurm_local_world_size(get)
        if found is not None:
            local_world_size, sources["local_world_size"] = found
    elif names is _KUBEFLOW_NAMES:
        local_world_size, sources["local_world_size"] = 1, ONE_PER_POD
    if local_world_size is not None and local_world_size > world_size:
        bound = sources["local_world_size"]
        message = (
            f"{bound} must not exceed {names.world_size}, got {bound}={get(bound)!r} and "
            f"{names.world_size}={get(names.world_size)!r}; fix the launcher configuration"
        )
        raise LauncherEnvError(bound, get(bound), message)
    if local_world_size is None:
        local_world_size = world_size
        sources["local_world_size"] = ASSUMED_ONE_NODE
    if local_rank is None:
        if sources["local_world_size"] == ASSUMED_ONE_NODE:
            local_rank = rank
            sources["local_rank"] = ASSUMED_ONE_NODE
        else:
            # Every rank of the run must agree on the layout: with a known number of
            # processes per node, the local rank follows from the global one.
            local_rank = rank % local_world_size
            sources["local_rank"] = DERIVED
    else:
        sources["local_rank"] = names.local_rank
        if local_rank >= local_world_size:
            bound = sources["local_world_size"]
            bound_text = bound if bound != ASSUMED_ONE_NODE else names.world_size
            message = (
                f"{names.local_rank} must be smaller than {bound_text}, got "
                f"{names.local_rank}={get(names.local_rank)!r} and "
                f"{bound_text}={get(bound_text)!r}; fix the launcher configuration"
            )
            raise LauncherEnvError(names.local_rank, get(names.local_rank), message)
    info = DistributedInfo(
        local_rank=local_rank,
        rank=rank,
        local_world_size=local_world_size,
        world_size=world_size,
    )
    return info, sources


def names_for(launcher: Launcher) -> Names | None:
    return _NAMES.get(launcher)
