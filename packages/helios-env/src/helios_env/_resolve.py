"""The full picture: every launcher variable cross-checked, and where each value came from."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from types import MappingProxyType

from helios_env._attempt import read_attempt
from helios_env._crosscheck import cross_check, warnings_given
from helios_env._detect import FORCE_VARIABLE, detect_with, overlap, present
from helios_env._environ import (
    ENVIRON_BYTES,
    FILESYSTEM_ENCODING,
    Getter,
    environ_get,
    getter_for,
)
from helios_env._environment_report import EnvironmentReport
from helios_env._info import DistributedInfo
from helios_env._interface import gloo_interface
from helios_env._launcher import SPECS, Launcher
from helios_env._learned import LEARNED, learned_layout
from helios_env._placement import NO_NODES, Nodes, stated_nodes
from helios_env._rendezvous import derive, read_master
from helios_env._sources import ASSUMED, ASSUMED_ONE_NODE, DEFAULT, DERIVED, PROCESS_GROUP
from helios_env._variables import from_variables, live_group

__all__ = ["get_dist_info", "inspect_environment"]

_TORCHRUN = SPECS[Launcher.TORCHRUN]
_SLURM = SPECS[Launcher.SLURM]


def _stated(get: Getter, launcher: Launcher) -> Nodes:
    """This rank's node and the number of nodes, where launcher variables state them."""
    spec = SPECS.get(launcher)
    # SLURM's node variables describe the allocation, not this process, unless srun
    # started it or an ancestor of it on this node (mpirun's daemons under SLURM, a
    # program that spawns its ranks from each srun task).
    specs = [_TORCHRUN]
    if spec is not None and spec is not _TORCHRUN and spec is not _SLURM:
        specs.append(spec)
    if present(get, _SLURM):
        specs = [_SLURM] if spec is _SLURM else [*specs, _SLURM]
    return stated_nodes(get, specs)


def _node(
    get: Getter,
    launcher: Launcher,
    info: DistributedInfo,
    sources: dict[str, str],
    *,
    env_applies: bool,
    learned: DistributedInfo | None,
) -> tuple[int | None, int | None]:
    """Which node this rank runs on, and how many there are, with their sources.

    What variables state wins; the layout learned from the group, or what the local
    values imply, answers only what they leave unsaid.
    """
    spec = SPECS.get(launcher)
    stated = _stated(get, launcher) if env_applies else NO_NODES
    index, count = stated.index, stated.count
    if index is not None and count is not None:
        sources["node_rank"], sources["num_nodes"] = index.source, count.source
        return index.value, count.value
    if env_applies and index is None and count is None:
        one_per_node = None if spec is None else spec.one_per_node
        if one_per_node is not None and sources.get("local_world_size") == one_per_node:
            sources["node_rank"] = sources["num_nodes"] = one_per_node
            return info.rank, info.world_size
    local = sources.get("local_world_size", "")
    if learned is not None:
        implied: tuple[int | None, int | None] = (learned.node_rank, learned.num_nodes)
        why = LEARNED
    elif info.local_world_size == info.world_size and not stated.several:
        implied = (0, 1)
        why = local if local in (ASSUMED_ONE_NODE, DEFAULT) else f"{DERIVED}: one node ({local})"
    elif sources.get("local_rank") == DERIVED:
        # The local rank was derived from RANK and LOCAL_WORLD_SIZE, assuming the ranks
        # fill each node in turn: the node follows from the same assumption.
        per_node = info.local_world_size
        implied = (info.rank // per_node, -(-info.world_size // per_node))
        why = f"{DERIVED}: ranks in blocks per node"
    else:
        implied = (None, None)
        what = "how many nodes there are" if index else "which node each rank runs on"
        why = f"not known: {launcher} does not say {what}; helios_pg.init() learns it"
    node_rank, num_nodes = implied
    sources["node_rank"] = sources["num_nodes"] = why
    if index is not None:
        node_rank, sources["node_rank"] = index.value, index.source
    if count is not None:
        num_nodes, sources["num_nodes"] = count.value, count.source
    return node_rank, num_nodes


def _resolve(
    get: Getter, group: tuple[int, int] | None
) -> tuple[DistributedInfo, dict[str, str], Launcher, bool]:
    launcher = detect_with(get)
    cross_check(get, launcher)
    why = overlap(get, launcher)
    learned = learned_layout(group)  # read once: _node and the attempt ask it too
    if launcher is Launcher.NONE and get(FORCE_VARIABLE) is not None:
        found = None  # HELIOS_LAUNCHER=none: a plain process, whatever else is set
    else:
        # LOCAL_RANK alone, with no RANK/WORLD_SIZE, is still validated and reported.
        found = from_variables(get, SPECS.get(launcher, SPECS[Launcher.ENVIRONMENT]))
    if group is not None:
        rank, world_size = group
        sources = {"rank": PROCESS_GROUP, "world_size": PROCESS_GROUP}
        env_applies = found is not None and found[0].world_size == world_size
        assumed = found is not None and found[1]["local_world_size"].startswith(ASSUMED)
        if found is not None and env_applies and not (assumed and learned is not None):
            env_info, env_sources = found
            local_rank, local_world_size = env_info.local_rank, env_info.local_world_size
            sources["local_rank"] = env_sources["local_rank"]
            sources["local_world_size"] = env_sources["local_world_size"]
        elif learned is not None:
            local_rank, local_world_size = learned.local_rank, learned.local_world_size
            sources["local_rank"] = sources["local_world_size"] = LEARNED
            stated = found[1]["local_rank"] if found is not None and env_applies else ""
            if found is not None and stated and not stated.startswith((ASSUMED, DERIVED)):
                # A local rank a variable states stands; only the assumed size gives way.
                local_rank, sources["local_rank"] = found[0].local_rank, stated
        else:
            local_rank, local_world_size = rank, world_size
            sources["local_rank"] = sources["local_world_size"] = ASSUMED_ONE_NODE
        info = DistributedInfo(local_rank, rank, local_world_size, world_size)
        live = True
    elif found is not None:
        info, sources = found
        env_applies, live = True, False
    else:
        sources = dict.fromkeys(("local_rank", "rank", "local_world_size", "world_size"), DEFAULT)
        info, env_applies, live = DistributedInfo(), False, False
    node_rank, num_nodes = _node(
        get, launcher, info, sources, env_applies=env_applies, learned=learned
    )
    attempt = read_attempt(get, sources, learned)
    if why is not None:
        sources["launcher"] = why
    info = DistributedInfo(
        info.local_rank,
        info.rank,
        info.local_world_size,
        info.world_size,
        node_rank,
        num_nodes,
        attempt,
    )
    return info, sources, launcher, live


def inspect_environment(environ: Mapping[str, str] | None = None) -> EnvironmentReport:
    """Describe the current process: launcher, ranks, sizes, node and rendezvous address.

    Args:
        environ: The environment to read; ``os.environ`` when omitted.

    Returns:
        The full report, including the source of every value.

    Raises:
        LauncherEnvError: A launcher variable is malformed or inconsistent; the message
            names the variable and its value.

    Example:
        >>> from helios_env import inspect_environment
        >>> env = {"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "node01", "MASTER_PORT": "29500"}
        >>> report = inspect_environment(env)
        >>> report.info.rank, report.sources["rank"], report.rendezvous
        (1, 'RANK', 'node01:29500')
    """
    get = getter_for(environ)
    info, sources, launcher, live = _resolve(get, live_group())
    derived = derive(get, launcher, info, sources)
    sources["master_addr"] = derived.addr_source
    sources["master_port"] = derived.port_source
    sources["job"] = derived.job_source
    interface = gloo_interface(get, derived.addr, info.num_nodes)
    sources["gloo_interface"] = (
        interface.source
        if interface.problem is None
        else f"{interface.source}: {interface.problem}"
    )
    return EnvironmentReport(
        info=info,
        launcher=launcher,
        sources=MappingProxyType(sources),
        process_group=live,
        node_rank=info.node_rank,
        num_nodes=info.num_nodes,
        master_addr=derived.addr,
        master_port=derived.port,
        job=derived.job,
        gloo_interface=interface.name,
    )


def get_dist_info() -> DistributedInfo:
    """Get the distributed state of the current process.

    Reads the live default process group first (found through ``sys.modules``, so torch
    is never imported), then the launcher's variables (torchrun, hand-set ``RANK`` and
    ``WORLD_SIZE``, a Kubeflow pod, AzureML, Vertex AI, Ray Train, Flux, PALS, Open MPI,
    MVAPICH2, LSF jsrun, MPICH or Intel MPI, an srun step, a Kubeflow Trainer pod, a
    SageMaker host), then falls back to one process: both ranks 0 and both world sizes
    1. A group created with ``init_method="tcp://..."`` and no launcher variables still
    answers; its local values then assume a single node. Every launcher variable is
    cross-checked against the others, and against the launcher around the winning one
    (torchrun inside srun, say). ``HELIOS_LAUNCHER=torchrun|slurm|mpi|env|none``
    forces one source and skips that check.

    Returns:
        The ranks and world sizes of this process.

    Raises:
        LauncherEnvError: A launcher variable is malformed (``RANK=abc``, ``RANK=-1``,
            ``RANK >= WORLD_SIZE``, ``LOCAL_RANK >= LOCAL_WORLD_SIZE``, ``MASTER_PORT``
            outside 1..65535, ...) or contradicts the launcher around it (each srun
            task ran its own torchrun, ``RANK`` against ``SLURM_PROCID``); the message
            names the variables and their values.

    Warns:
        LauncherEnvWarning: Hand-set ``RANK``/``WORLD_SIZE`` describe another job than
            the srun step or MPI job around them (a program that starts its own
            processes); they are used.

    Example:
        >>> from helios_env import get_dist_info
        >>> info = get_dist_info()  # a plain process, started without a launcher
        >>> info.rank, info.world_size, info.is_main_process
        (0, 1, True)
    """
    group = live_group()
    if group is not None or ENVIRON_BYTES is None:
        read_master(environ_get)
        return _resolve(environ_get, group)[0]
    if _last:
        read, info = _last[0]
        if all(ENVIRON_BYTES.get(key) == raw for key, raw in read):
            return info
    _last.clear()
    seen: dict[bytes, bytes | None] = {}
    get = partial(_recorded, seen)
    warned = warnings_given()
    read_master(get)
    info = _resolve(get, None)[0]  # here, not deeper: a warning names the caller's line
    if warnings_given() == warned:
        _last.append((tuple(seen.items()), info))
    return info


_last: list[tuple[tuple[tuple[bytes, bytes | None], ...], DistributedInfo]] = []
"""The last answer without a group, with every variable it read and its raw value.

Without a group the answer is a function of the variables the resolution reads and of
nothing else: while each still holds the value it had (one dict lookup each, on the
mapping behind ``os.environ``), the last answer stands. A resolution that raised or
warned is not remembered, so it raises or warns again.
"""


def _recorded(seen: dict[bytes, bytes | None], name: str) -> str | None:
    """Look ``name`` up in this process's environment, noting its raw value in ``seen``."""
    assert ENVIRON_BYTES is not None
    key = name.encode(FILESYSTEM_ENCODING, "surrogateescape")
    raw = seen[key] = ENVIRON_BYTES.get(key)
    return None if raw is None else raw.decode(FILESYSTEM_ENCODING, "surrogateescape")
