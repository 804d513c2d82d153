"""Resolve ranks and world sizes: live process group, then launcher variables, then defaults."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from helios_env._errors import LauncherEnvError
from helios_env._info import DistributedInfo
from helios_env._launcher import Launcher, detect_launcher

__all__ = [
    "EnvironmentReport",
    "get_dist_info",
    "get_global_rank",
    "get_local_rank",
    "get_local_world_size",
    "get_world_size",
    "inspect_environment",
]

PROCESS_GROUP = "process group"
DEFAULT = "default"
ASSUMED_ONE_NODE = "assumed: one node"
DERIVED = "derived"


class _Names(NamedTuple):
    rank: str
    world_size: str
    local_rank: str
    local_world_size: str | None


_ENV_NAMES = _Names("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
_OPEN_MPI_NAMES = _Names(
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
)
_SLURM_NAMES = _Names("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", None)
# A node of a step runs at least one task: counts and repeats are positive.
_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")
_SLURM_TASKS_PER_NODE = re.compile(r"^([1-9]\d*)(?:\(x([1-9]\d*)\))?$")


@dataclass(frozen=True, slots=True)
class EnvironmentReport:
    """What helios-env sees of the current process, and where each value came from.

    Attributes:
        info: The resolved ranks and world sizes.
        launcher: The launcher whose variables were found.
        sources: For each field of ``info`` and for ``node_rank`` and ``num_nodes``,
            the variable it was read from, ``"process group"``, ``"default"``,
            ``"assumed: one node"`` or ``"derived"`` (computed from the other values,
            assuming every node runs as many processes).
        process_group: Whether a live default process group answered.
        node_rank: The node's index, from ``GROUP_RANK`` (or ``SLURM_NODEID`` in a
            SLURM step) when set, else derived from the ranks.
        num_nodes: The number of nodes, from ``GROUP_WORLD_SIZE`` (or ``SLURM_NNODES``
            in a SLURM step) when set, else derived from the sizes.
        master_addr: ``MASTER_ADDR``, when set.
        master_port: ``MASTER_PORT``, when set.
    """

    info: DistributedInfo
    launcher: Launcher
    sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    process_group: bool = False
    node_rank: int = 0
    num_nodes: int = 1
    master_addr: str | None = None
    master_port: int | None = None

    @property
    def rendezvous(self) -> str | None:
        """``MASTER_ADDR:MASTER_PORT``, or None when either is unset."""
        if self.master_addr is None or self.master_port is None:
            return None
        host = f"[{self.master_addr}]" if ":" in self.master_addr else self.master_addr
        return f"{host}:{self.master_port}"


def _read_int(env: Mapping[str, str], name: str | None, *, minimum: int) -> int | None:
    if name is None:
        return None
    raw = env.get(name)
    if raw is None:
        return None
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


def _live_group() -> tuple[int, int] | None:
    # Never import torch: if torch.distributed was never imported, no group can exist.
    dist: Any = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not dist.is_available() or not dist.is_initialized():
            return None
        return int(dist.get_rank()), int(dist.get_world_size())
    except (AttributeError, RuntimeError, ValueError):
        # A half-imported torch.distributed, or a group torn down under us.
        return None


def _slurm_local_world_size(env: Mapping[str, str]) -> tuple[int, str] | None:
    # SLURM_STEP_TASKS_PER_NODE looks like "2(x3),1": 2 tasks on each of 3 nodes, then 1.
    raw = env.get("SLURM_STEP_TASKS_PER_NODE")
    node = _read_int(env, "SLURM_NODEID", minimum=0)
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


def _check_pair(env: Mapping[str, str], small: str, big: str, small_v: int, big_v: int) -> None:
    if small_v >= big_v:
        message = (
            f"{small} must be smaller than {big}, got {small}={env.get(small)!r} "
            f"and {big}={env.get(big)!r}; fix the launcher configuration or unset both"
        )
        raise LauncherEnvError(small, env.get(small), message)


def _from_variables(
    env: Mapping[str, str], names: _Names
) -> tuple[DistributedInfo, dict[str, str]] | None:
    rank = _read_int(env, names.rank, minimum=0)
    world_size = _read_int(env, names.world_size, minimum=1)
    local_rank = _read_int(env, names.local_rank, minimum=0)
    local_world_size = _read_int(env, names.local_world_size, minimum=1)
    if rank is None and world_size is None:
        if local_rank is not None:
            message = (
                f"{names.local_rank} is set ({names.local_rank}={env[names.local_rank]!r}) "
                f"but {names.rank} and {names.world_size} are not; "
                f"set both or unset {names.local_rank}"
            )
            raise LauncherEnvError(names.local_rank, env[names.local_rank], message)
        return None
    if rank is None or world_size is None:
        present, missing = (
            (names.world_size, names.rank) if rank is None else (names.rank, names.world_size)
        )
        message = (
            f"{present} is set ({present}={env[present]!r}) but {missing} is not; "
            f"set {missing} too, or unset {present}"
        )
        raise LauncherEnvError(missing, None, message)
    _check_pair(env, names.rank, names.world_size, rank, world_size)
    sources = {"rank": names.rank, "world_size": names.world_size}
    if local_world_size is not None:
        assert names.local_world_size is not None
        sources["local_world_size"] = names.local_world_size
    elif names is _SLURM_NAMES:
        found = _slurm_local_world_size(env)
        if found is not None:
            local_world_size, sources["local_world_size"] = found
    if local_world_size is not None and local_world_size > world_size:
        bound = sources["local_world_size"]
        message = (
            f"{bound} must not exceed {names.world_size}, got {bound}={env[bound]!r} and "
            f"{names.world_size}={env[names.world_size]!r}; fix the launcher configuration"
        )
        raise LauncherEnvError(bound, env[bound], message)
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
                f"{names.local_rank}={env[names.local_rank]!r} and "
                f"{bound_text}={env.get(bound_text)!r}; fix the launcher configuration"
            )
            raise LauncherEnvError(names.local_rank, env[names.local_rank], message)
    info = DistributedInfo(
        local_rank=local_rank,
        rank=rank,
        local_world_size=local_world_size,
        world_size=world_size,
    )
    return info, sources


def _names_for(launcher: Launcher) -> _Names | None:
    if launcher in (Launcher.TORCHRUN, Launcher.ENVIRONMENT):
        return _ENV_NAMES
    if launcher is Launcher.OPEN_MPI:
        return _OPEN_MPI_NAMES
    if launcher is Launcher.SLURM:
        return _SLURM_NAMES
    return None


def _master(env: Mapping[str, str]) -> tuple[str | None, int | None]:
    addr = env.get("MASTER_ADDR")
    if addr is not None and not addr.strip():
        message = (
            f"MASTER_ADDR must be the rank-0 host's name or address, got MASTER_ADDR={addr!r}; "
            "set it or unset it"
        )
        raise LauncherEnvError("MASTER_ADDR", addr, message)
    port = _read_int(env, "MASTER_PORT", minimum=1)
    if port is not None and port > 65535:
        raw = env["MASTER_PORT"]
        message = f"MASTER_PORT must be a TCP port in 1..65535, got MASTER_PORT={raw!r}"
        raise LauncherEnvError("MASTER_PORT", raw, message)
    return addr, port


def _resolve(
    env: Mapping[str, str], group: tuple[int, int] | None
) -> tuple[DistributedInfo, dict[str, str], Launcher, bool]:
    launcher = detect_launcher(env)
    names = _names_for(launcher)
    # LOCAL_RANK alone, with no RANK/WORLD_SIZE, is still validated and reported.
    found = _from_variables(env, names if names is not None else _ENV_NAMES)
    if group is not None:
        rank, world_size = group
        sources = {"rank": PROCESS_GROUP, "world_size": PROCESS_GROUP}
        if found is not None and found[0].world_size == world_size:
            env_info, env_sources = found
            local_rank, local_world_size = env_info.local_rank, env_info.local_world_size
            sources["local_rank"] = env_sources["local_rank"]
            sources["local_world_size"] = env_sources["local_world_size"]
        else:
            local_rank, local_world_size = rank, world_size
            sources["local_rank"] = sources["local_world_size"] = ASSUMED_ONE_NODE
        info = DistributedInfo(local_rank, rank, local_world_size, world_size)
        return info, sources, launcher, True
    if found is not None:
        return found[0], found[1], launcher, False
    sources = dict.fromkeys(("local_rank", "rank", "local_world_size", "world_size"), DEFAULT)
    return DistributedInfo(), sources, launcher, False


def inspect_environment(environ: Mapping[str, str] | None = None) -> EnvironmentReport:
    """Describe the current process: launcher, ranks, sizes, node and rendezvous address.

    Args:
        environ: The environment to read; ``os.environ`` when omitted.

    Returns:
        The full report, including the source of every value.

    Raises:
        LauncherEnvError: A launcher variable is malformed or inconsistent; the message
            names the variable and its value.
    """
    env = os.environ if environ is None else environ
    info, sources, launcher, live = _resolve(env, _live_group())
    addr, port = _master(env)
    # SLURM_NODEID and SLURM_NNODES describe the allocation, not this process, unless
    # srun started it: a plain or torchrun process in a batch script must not read them.
    if launcher is Launcher.SLURM:
        node_variable, nodes_variable = "SLURM_NODEID", "SLURM_NNODES"
    else:
        node_variable, nodes_variable = "GROUP_RANK", "GROUP_WORLD_SIZE"
    node_rank = _read_int(env, node_variable, minimum=0)
    sources["node_rank"] = DERIVED if node_rank is None else node_variable
    if node_rank is None:
        node_rank = info.node_rank
    num_nodes = _read_int(env, nodes_variable, minimum=1)
    sources["num_nodes"] = DERIVED if num_nodes is None else nodes_variable
    if num_nodes is None:
        num_nodes = info.num_nodes
    return EnvironmentReport(
        info=info,
        launcher=launcher,
        sources=MappingProxyType(sources),
        process_group=live,
        node_rank=node_rank,
        num_nodes=num_nodes,
        master_addr=addr,
        master_port=port,
    )


def get_dist_info() -> DistributedInfo:
    """Get the distributed state of the current process.

    Reads the live default process group first (found through ``sys.modules``, so torch
    is never imported), then the launcher's variables (torchrun, hand-set ``RANK`` and
    ``WORLD_SIZE``, Open MPI, SLURM), then falls back to one process: both ranks 0 and
    both world sizes 1. A group created with ``init_method="tcp://..."`` and no launcher
    variables still answers; its local values then assume a single node.

    Returns:
        The ranks and world sizes of this process.

    Raises:
        LauncherEnvError: A launcher variable is malformed (``RANK=abc``, ``RANK=-1``,
            ``RANK >= WORLD_SIZE``, ``LOCAL_RANK >= LOCAL_WORLD_SIZE``, ``MASTER_PORT``
            outside 1..65535, ...); the message names the variable and its value.
    """
    return _from_environment(_live_group())


def _from_environment(group: tuple[int, int] | None) -> DistributedInfo:
    env = os.environ
    _master(env)
    return _resolve(env, group)[0]


def get_local_rank() -> int:
    """Get the rank of this process on its node; 0 outside a distributed run.

    Returns:
        ``get_dist_info().local_rank``.

    Raises:
        LauncherEnvError: A launcher variable is malformed.
    """
    return get_dist_info().local_rank


def get_global_rank() -> int:
    """Get the global rank of this process; 0 outside a distributed run.

    With a live process group the rank comes straight from the group, without reading
    launcher variables, so this is cheap enough to call on every log line.

    Returns:
        ``get_dist_info().rank``.

    Raises:
        LauncherEnvError: No group is live and a launcher variable is malformed.
    """
    group = _live_group()
    return group[0] if group is not None else _from_environment(None).rank


def get_local_world_size() -> int:
    """Get the number of processes on this node; 1 outside a distributed run.

    Returns:
        ``get_dist_info().local_world_size``.

    Raises:
        LauncherEnvError: A launcher variable is malformed.
    """
    return get_dist_info().local_world_size


def get_world_size() -> int:
    """Get the number of processes in the run; 1 outside a distributed run.

    With a live process group the size comes straight from the group, without reading
    launcher variables.

    Returns:
        ``get_dist_info().world_size``.

    Raises:
        LauncherEnvError: No group is live and a launcher variable is malformed.
    """
    group = _live_group()
    return group[1] if group is not None else _from_environment(None).world_size
