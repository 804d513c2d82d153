"""Reading a launcher's rank variables strictly, by the names its entry gives.

Which variables each launcher sets is :mod:`helios_env._launcher`'s; this module
reads them, refuses malformed values, and says where each value came from.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Any

from helios_env._environ import Getter
from helios_env._errors import LauncherEnvError
from helios_env._info import DistributedInfo
from helios_env._launcher import LauncherSpec

__all__ = [
    "ASSUMED_ONE_NODE",
    "DEFAULT",
    "DERIVED",
    "PROCESS_GROUP",
    "from_variables",
    "live_group",
    "missing",
    "not_set",
    "parse_int",
    "read_int",
]

PROCESS_GROUP = "process group"
DEFAULT = "default"
ASSUMED_ONE_NODE = "assumed: one node"
DERIVED = "derived"

_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")
# A node of a step runs at least one task: counts and repeats are positive.
_TASKS_PER_NODE = re.compile(r"^([1-9]\d*)(?:\(x([1-9]\d*)\))?$")


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


def _tasks_per_node(get: Getter, name: str, node_name: str) -> tuple[int, str] | None:
    # A list such as "2(x3),1": 2 tasks on each of 3 nodes, then 1.
    raw = get(name)
    node = read_int(get, node_name, minimum=0)
    if raw is None or node is None:
        return None
    counts: list[int] = []
    for part in raw.split(","):
        match = _TASKS_PER_NODE.match(part.strip())
        if match is None:
            message = (
                f"{name} must look like '2(x3),1', got {name}={raw!r}; "
                "it is set by srun and should not be edited"
            )
            raise LauncherEnvError(name, raw, message)
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    if node >= len(counts):
        return None
    return counts[node], name


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


def from_variables(
    get: Getter, spec: LauncherSpec
) -> tuple[DistributedInfo, dict[str, str]] | None:
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
        sources["local_world_size"] = names.local_world_size
    elif spec.tasks_per_node is not None and spec.node is not None:
        found = _tasks_per_node(get, spec.tasks_per_node, spec.node[0])
        if found is not None:
            local_world_size, sources["local_world_size"] = found
    elif spec.one_per_node is not None:
        local_world_size, sources["local_world_size"] = 1, spec.one_per_node
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
