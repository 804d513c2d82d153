"""Where a rank runs, as its launcher's variables state it.

Its node, the number of nodes and how many ranks its node runs. A fact may be stated
by several variables of one launcher (SLURM's step count and the job's, a list of every
node's tasks and one count for each node): the first one set, in the order of the
launcher's entry in :mod:`helios_env._launcher`, gives the value, and any other one set
that says otherwise is named beside it in the source. Nothing here assumes: a fact that
no variable states is None. A node index that the number of nodes cannot hold is a
:class:`LauncherEnvError` naming both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from helios_env._environ import Getter
from helios_env._errors import LauncherEnvError
from helios_env._hostlists import host_count, host_index
from helios_env._integers import read_int
from helios_env._launcher import HostsJson, LauncherSpec
from helios_env._sources import DERIVED

__all__ = ["NO_NODES", "Fact", "Nodes", "stated_nodes", "tasks_here", "tasks_per_node"]

# A node of a step runs at least one task: counts and repeats are positive.
_TASKS_PER_NODE = re.compile(r"^([1-9]\d*)(?:\(x([1-9]\d*)\))?$")


@dataclass(frozen=True, slots=True)
class Fact:
    """A value that variables state, the source shown for it, and the variable behind it."""

    value: int
    source: str
    variable: str

    def shown(self, get: Getter) -> str:
        """The variable behind the value as set: ``NAME='text'``."""
        return f"{self.variable}={get(self.variable)!r}"

    def described(self, get: Getter) -> str:
        """``NAME='text'``, after how the value follows from it when it is not read as is."""
        shown = self.shown(get)
        return shown if self.source == self.variable else f"{self.source}: {shown}"


@dataclass(frozen=True, slots=True)
class Nodes:
    """This rank's node and the number of nodes, each None where nothing states it."""

    index: Fact | None
    count: Fact | None

    @property
    def several(self) -> bool:
        """Whether a stated value says the ranks run on more than one node."""
        return (self.index is not None and self.index.value > 0) or (
            self.count is not None and self.count.value > 1
        )


NO_NODES = Nodes(None, None)
"""Where no variable may say anything of this rank's node."""


def _first(get: Getter, candidates: Iterable[Fact]) -> Fact | None:
    """The first candidate, its source naming every later one that gives another value."""
    found = list(candidates)
    if not found:
        return None
    first, value = found[0], found[0].value
    others = [each.shown(get) for each in found if each.value != value]
    if not others:
        return first
    say = "says" if len(others) == 1 else "say"
    return Fact(
        first.value, f"{first.source} ({', '.join(others)} {say} otherwise)", first.variable
    )


def tasks_per_node(get: Getter, name: str) -> list[int] | None:
    """Every node's task count from a list such as ``2(x3),1``; None when it is not set."""
    raw = get(name)
    if raw is None:
        return None
    counts: list[int] = []
    for part in raw.split(","):
        match = _TASKS_PER_NODE.match(part.strip())
        if match is None:
            message = (
                f"{name} must look like '2(x3),1', got {name}={raw!r}; "
                "it is set by the launcher and should not be edited"
            )
            raise LauncherEnvError(name, raw, message)
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def _on_each_node(get: Getter, spec: LauncherSpec) -> tuple[int, int, str] | None:
    """``(count on each node, tasks, the count's variable)`` where both are set."""
    name = spec.tasks_on_each_node
    each = read_int(get, name, minimum=1)
    if name is None or each is None:
        return None
    tasks = read_int(get, spec.names.world_size, minimum=1)
    return None if tasks is None else (each, tasks, name)


def _count_candidates(get: Getter, spec: LauncherSpec) -> Iterator[Fact]:
    for name in spec.nodes:
        count = read_int(get, name, minimum=1)
        if count is not None:
            yield Fact(count, name, name)
    if isinstance(spec.hosts, HostsJson):
        listed = host_count(get, spec.hosts)
        if listed is not None:
            name = spec.hosts.hosts
            yield Fact(listed, f"{DERIVED}: the hosts in {name}", name)
    for name in spec.tasks_per_node:
        counts = tasks_per_node(get, name)
        if counts is not None:
            yield Fact(len(counts), f"{DERIVED}: the nodes listed in {name}", name)
    found = _on_each_node(get, spec)
    if found is not None:
        each, tasks, name = found
        # At most that many on each node, and no more nodes than needed (srun's -n
        # with --ntasks-per-node): all on one node, or every node full.
        if tasks <= each:
            yield Fact(1, f"{DERIVED}: one node ({spec.names.world_size} <= {name})", name)
        elif tasks % each == 0:
            yield Fact(tasks // each, f"{DERIVED}: {spec.names.world_size} / {name}", name)


def _listed_node(get: Getter, hosts: HostsJson) -> Fact | None:
    """This node's index: its host's place in the launcher's list of hosts."""
    place = host_index(get, hosts)
    if place is None or hosts.current is None:
        return None
    return Fact(place, f"{DERIVED}: {hosts.current}'s place in {hosts.hosts}", hosts.current)


def stated_nodes(get: Getter, specs: Sequence[LauncherSpec]) -> Nodes:
    """This rank's node and the number of nodes, as the variables of ``specs`` state them.

    Args:
        get: Looks a variable up by name.
        specs: The launchers whose variables describe this rank's node, the closest
            first: a later one answers only what the ones before it leave unsaid, and
            only the variables of one launcher are compared with each other.

    Returns:
        The node's index and the number of nodes, each None where no variable says it.

    Raises:
        LauncherEnvError: A node variable is malformed, or the node's index is not
            below the number of nodes; the message names both variables.
    """
    node = count = None
    for spec in specs:
        # Launchers number their nodes each their own way (torchrun's c10d rendezvous
        # orders its agents as they arrive): only one launcher's variables are compared.
        index = read_int(get, spec.node, minimum=0)
        if node is None and index is not None and spec.node is not None:
            node = Fact(index, spec.node, spec.node)
        if node is None and isinstance(spec.hosts, HostsJson):
            node = _listed_node(get, spec.hosts)
        if count is None:
            count = _first(get, _count_candidates(get, spec))
    if node is not None and count is not None and node.value >= count.value:
        message = (
            f"{node.shown(get)} names node {node.value}, but there are {count.value} nodes "
            f"({count.described(get)}), numbered from 0; fix the launcher configuration, "
            "or unset the variable that is wrong"
        )
        raise LauncherEnvError(node.variable, get(node.variable), message)
    return Nodes(node, count)


def tasks_here(get: Getter, spec: LauncherSpec, nodes: Nodes) -> Fact | None:
    """How many ranks this node runs, as ``spec``'s per-node variables state it.

    Args:
        get: Looks a variable up by name.
        spec: The launcher that started this rank.
        nodes: This rank's node, which picks its entry of a list of every node's count.

    Returns:
        The count and its source; None where no variable says it (a list whose counts
        differ says nothing of a node whose index is not known).

    Raises:
        LauncherEnvError: A list of counts is malformed.
    """
    candidates: list[Fact] = []
    for name in spec.tasks_per_node:
        counts = tasks_per_node(get, name)
        if counts is None:
            continue
        if nodes.index is not None and nodes.index.value < len(counts):
            candidates.append(Fact(counts[nodes.index.value], name, name))
        elif nodes.index is None and len(set(counts)) == 1:
            candidates.append(Fact(counts[0], f"{name} (the same on every node)", name))
    found = _on_each_node(get, spec)
    if found is not None:
        each, tasks, name = found
        if tasks <= each:
            how = f"{DERIVED}: one node ({spec.names.world_size} <= {name})"
            candidates.append(Fact(tasks, how, name))
        else:
            candidates.append(Fact(each, name, name))
    return _first(get, candidates)
