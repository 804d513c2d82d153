"""Reading a launcher's rank variables strictly, by the names its entry gives.

Which variables each launcher sets is :mod:`helios_env._launcher`'s; this module
reads them, refuses malformed values, and says where each value came from.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Sequence
from typing import Any

from helios_env._environ import Getter
from helios_env._errors import LauncherEnvError
from helios_env._hostlists import host_count, host_index
from helios_env._info import DistributedInfo
from helios_env._integers import read_int
from helios_env._launcher import HostsJson, LauncherSpec
from helios_env._placement import Fact, stated_nodes, tasks_here
from helios_env._sources import ASSUMED, ASSUMED_ONE_NODE, DERIVED

__all__ = [
    "from_variables",
    "live_group",
    "missing",
    "not_set",
]


# The last live group seen, and its (rank, size).
_answered: tuple[weakref.ref[Any], tuple[int, int]] | None = None


def live_group() -> tuple[int, int] | None:
    """Return the live default group's (rank, size), or None when there is none.

    Never imports torch: if ``torch.distributed`` was never imported, no group can
    exist. ``torch.distributed.group.WORLD`` is the default group, None before init.
    A group's rank and size never change: they are asked once per group, and the
    group is looked up on every call, so one created or destroyed is seen at once.
    """
    global _answered  # noqa: PLW0603 - the last group's answer, held by a weak reference
    dist: Any = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        world = dist.group.WORLD
        if world is None:
            return None
        answered = _answered
        if answered is not None and answered[0]() is world:
            return answered[1]
        found = world.rank(), world.size()
    except (AttributeError, RuntimeError, ValueError):
        # A torch without distributed support, or a group torn down under us.
        return None
    with contextlib.suppress(TypeError):  # a group that takes no weak reference
        _answered = (weakref.ref(world), found)
    return found


def not_set(names: Sequence[str]) -> str:
    """``"A is not set"``, ``"A and B are not set"``, ``"A, B and C are not set"``."""
    if len(names) == 1:
        return f"{names[0]} is not set"
    return f"{', '.join(names[:-1])} and {names[-1]} are not set"


def missing(get: Getter, present: str, absent: str) -> LauncherEnvError:
    """The error for a launcher variable ``absent`` that ``present`` needs beside it."""
    message = (
        f"{present} is set ({present}={get(present)!r}) but {absent} is not; "
        f"set {absent} too, or unset {present}"
    )
    return LauncherEnvError(absent, None, message)


def _check_below(get: Getter, lower: str, upper: str, lower_value: int, upper_value: int) -> None:
    """Require the variable ``lower`` to be smaller than ``upper`` (a rank and its size)."""
    if lower_value >= upper_value:
        message = (
            f"{lower} must be smaller than {upper}, got {lower}={get(lower)!r} "
            f"and {upper}={get(upper)!r}; fix the launcher configuration or unset both"
        )
        raise LauncherEnvError(lower, get(lower), message)


def _local_world_size(
    get: Getter, spec: LauncherSpec, world_size: int, local_rank: int | None
) -> Fact:
    """The ranks on this node where the launcher has no variable of its own for it.

    A count that the launcher's per-node variables state, else one process per pod
    (Kubeflow), else one node where the number of nodes says so; else, where a variable
    says there are several nodes, the ranks spread evenly over them is assumed, and
    only where nothing says so, one node.
    """
    nodes = stated_nodes(get, [spec])
    stated = tasks_here(get, spec, nodes)
    if stated is not None:
        return stated
    bound = spec.names.world_size
    if spec.one_per_node is not None:
        return Fact(1, spec.one_per_node, spec.detect[0])
    index, count = nodes.index, nodes.count
    if count is not None and count.value == 1:
        return Fact(world_size, f"{DERIVED}: one node ({count.source})", bound)
    if not nodes.several:
        return Fact(world_size, ASSUMED_ONE_NODE, bound)
    if count is not None:
        spread, over = count.value, f"{count.value} nodes ({count.source})"
    else:
        assert index is not None
        spread = index.value + 1
        over = f"{spread} or more nodes ({index.variable}={get(index.variable)!r})"
    at_least = 1 if local_rank is None else local_rank + 1
    value = min(world_size, max(-(-world_size // spread), at_least))
    return Fact(value, f"{ASSUMED}: the ranks spread evenly over {over}", bound)


def _one_per_listed_host(
    get: Getter, spec: LauncherSpec, hosts: HostsJson
) -> tuple[DistributedInfo, dict[str, str]] | None:
    """A launcher that runs one process per host of its list: the host's place is the rank."""
    count, index = host_count(get, hosts), host_index(get, hosts)
    if count is None or index is None:
        return None
    sources = {
        "rank": f"{DERIVED}: {hosts.current}'s place in {hosts.hosts}",
        "world_size": f"{DERIVED}: the hosts in {hosts.hosts}",
        "local_rank": DERIVED,
        "local_world_size": spec.one_per_node or DERIVED,
    }
    return DistributedInfo(0, index, 1, count), sources


def from_variables(
    get: Getter, spec: LauncherSpec
) -> tuple[DistributedInfo, dict[str, str]] | None:
    """The ranks and sizes that ``spec``'s variables give, with the source of each.

    Args:
        get: Looks a variable up by name.
        spec: The launcher whose variables are read.

    Returns:
        The values and their sources; None when the launcher's rank variables are unset.

    Raises:
        LauncherEnvError: A variable is malformed, missing beside another, or out of range.
    """
    if spec.one_per_listed_host and isinstance(spec.hosts, HostsJson):
        return _one_per_listed_host(get, spec, spec.hosts)
    names = spec.names
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
        present, absent = (
            (names.world_size, names.rank) if rank is None else (names.rank, names.world_size)
        )
        raise missing(get, present, absent)
    _check_below(get, names.rank, names.world_size, rank, world_size)
    sources = {"rank": names.rank, "world_size": names.world_size}
    if local_world_size is not None:
        assert names.local_world_size is not None
        local = Fact(local_world_size, names.local_world_size, names.local_world_size)
    else:
        local = _local_world_size(get, spec, world_size, local_rank)
    if local.value > world_size:
        bound = local.variable
        message = (
            f"{bound} must not exceed {names.world_size}, got {bound}={get(bound)!r} and "
            f"{names.world_size}={get(names.world_size)!r}; fix the launcher configuration"
        )
        raise LauncherEnvError(bound, get(bound), message)
    local_world_size, sources["local_world_size"] = local.value, local.source
    if local_rank is None:
        if local.source == ASSUMED_ONE_NODE:
            local_rank, sources["local_rank"] = rank, ASSUMED_ONE_NODE
        else:
            # Every rank of the run must agree on the layout: with a known number of
            # processes per node, the local rank follows from the global one.
            local_rank = rank % local_world_size
            assumed = local.source.startswith(ASSUMED)
            sources["local_rank"] = f"{ASSUMED}: ranks in blocks per node" if assumed else DERIVED
    else:
        sources["local_rank"] = names.local_rank
        if local_rank >= local_world_size:
            message = (
                f"{names.local_rank}={get(names.local_rank)!r} is not below {local_world_size}, "
                f"the ranks on this node ({local.described(get)}); fix the launcher "
                "configuration"
            )
            raise LauncherEnvError(names.local_rank, get(names.local_rank), message)
    info = DistributedInfo(
        local_rank=local_rank,
        rank=rank,
        local_world_size=local_world_size,
        world_size=world_size,
    )
    return info, sources
