"""Checks of what the multi-node workers report: every rank, where it ran, what it knew."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tests.support.netns import VirtualNodes
from tests.support.procs import Finished, results, torchrun_command

__all__ = [
    "FORM_GROUP",
    "LIMIT",
    "TEST_TIMEOUT",
    "c10d_torchrun",
    "describe",
    "ranks_by_host",
    "spread",
    "torchrun",
]

FORM_GROUP = [sys.executable, str(Path(__file__).parent / "workers" / "form_group.py")]
"""The worker that forms the group and reports (``workers/form_group.py``)."""
LIMIT = 120.0
"""Seconds a scenario may run before the test kills it (four ranks importing torch on
two busy cores take a minute)."""
TEST_TIMEOUT = 180.0
"""pytest-timeout's limit for these tests: past :data:`LIMIT`, so the test's own limit,
which reports every process's output, acts first."""


def torchrun(*options: str) -> list[str]:
    """``torchrun`` with ``options``, then the worker."""
    return torchrun_command(*options, *FORM_GROUP[1:])


def c10d_torchrun(nodes: VirtualNodes, worker: str = FORM_GROUP[1]) -> list[str]:
    """``torchrun`` for one agent per node of ``nodes``, two ranks each, meeting in a
    c10d rendezvous on the first node at a fresh port and id; then ``worker``."""
    endpoint = f"{nodes.nodes[0].address}:{nodes.free_port(0)}"
    return torchrun_command(
        f"--nnodes={len(nodes.nodes)}",
        "--nproc-per-node=2",
        "--max-restarts=0",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id=helios-{uuid.uuid4().hex[:12]}",
        worker,
    )


def describe(finished: Finished | Iterable[Finished]) -> str:
    """Every process's command, status and output, for a failure message."""
    items = [finished] if isinstance(finished, Finished) else list(finished)
    return "\n".join(item.describe() for item in items)


def spread(
    finished: Finished | Iterable[Finished],
    nodes: VirtualNodes,
    world_size: int,
    *,
    placement: Mapping[int, int] | None = None,
) -> list[dict[str, Any]]:
    """Check that ``world_size`` ranks formed one group and knew where they ran.

    Every rank reported once and summed right; each ran on the node its hostname
    names (its network namespace is that node's); ``local_rank`` and
    ``local_world_size`` count the ranks on its host; ``num_nodes`` is the number of
    hosts, and ``node_rank`` is shared by the ranks of a host and differs between
    hosts. ``placement`` maps each rank to the index of the node it must run on.

    Returns:
        The ranks' reports, by rank.
    """
    items = [finished] if isinstance(finished, Finished) else list(finished)
    detail = describe(items)
    ranks = sorted(results(items), key=lambda item: int(item["rank"]))
    assert [item["rank"] for item in ranks] == list(range(world_size)), detail
    assert {item["world_size"] for item in ranks} == {world_size}, detail
    assert {item["total"] for item in ranks} == {world_size * (world_size + 1) / 2}, detail
    where = {nodes.namespace_inode(node.index): node.name for node in nodes.nodes}
    for item in ranks:
        assert where.get(item["net_namespace"]) == item["hostname"], (item, detail)
    if placement is not None:
        expected = {rank: nodes.nodes[index].name for rank, index in placement.items()}
        assert {item["rank"]: item["hostname"] for item in ranks} == expected, detail
    hosts: dict[str, list[dict[str, Any]]] = {}
    for item in ranks:
        hosts.setdefault(item["hostname"], []).append(item)
    for on_host in hosts.values():
        count = len(on_host)
        assert sorted(item["local_rank"] for item in on_host) == list(range(count)), detail
        assert {item["local_world_size"] for item in on_host} == {count}, detail
    claimed = [
        (item["rank"], item["hostname"], item["node_rank"], item["num_nodes"]) for item in ranks
    ]
    why = f"(rank, host, node_rank, num_nodes): {claimed}\n{detail}"
    assert {item["num_nodes"] for item in ranks} == {len(hosts)}, why
    node_ranks = {host: {item["node_rank"] for item in on} for host, on in hosts.items()}
    assert all(len(found) == 1 for found in node_ranks.values()), why
    assert sorted(min(found) for found in node_ranks.values()) == list(range(len(hosts))), why
    return ranks


def ranks_by_host(ranks: Iterable[Mapping[str, Any]]) -> dict[str, list[int]]:
    """The ranks that ran on each host, in order."""
    found: dict[str, list[int]] = {}
    for item in ranks:
        found.setdefault(str(item["hostname"]), []).append(int(item["rank"]))
    return {host: sorted(on_host) for host, on_host in found.items()}
