"""torchrun with one agent per virtual node forms one group across the nodes."""

from __future__ import annotations

import pytest

from tests.multinode.checks import (
    LIMIT,
    TEST_TIMEOUT,
    c10d_torchrun,
    describe,
    ranks_by_host,
    spread,
    torchrun,
)
from tests.support.netns import VirtualNodes
from tests.support.procs import results

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(TEST_TIMEOUT)]


def test_agents_meet_in_a_c10d_rendezvous(nodes: VirtualNodes) -> None:
    command = c10d_torchrun(nodes)
    finished = nodes.run_all([(node.index, command, None) for node in nodes.nodes], limit=LIMIT)

    assert all(item.returncode == 0 for item in finished), describe(finished)
    ranks = spread(finished, nodes, 4)
    assert sorted(ranks_by_host(ranks).values()) == [[0, 1], [2, 3]], describe(finished)
    for node, agent in zip(nodes.nodes, finished, strict=True):
        assert {item["hostname"] for item in results(agent)} == {node.name}, describe(finished)


def test_agents_meet_at_a_static_master(nodes: VirtualNodes) -> None:
    master = [f"--master-addr={nodes.nodes[0].address}", f"--master-port={nodes.free_port(0)}"]
    commands = [
        (
            node.index,
            torchrun("--nnodes=2", f"--node-rank={node.index}", "--nproc-per-node=2", *master),
            None,
        )
        for node in nodes.nodes
    ]
    finished = nodes.run_all(commands, limit=LIMIT)

    assert all(item.returncode == 0 for item in finished), describe(finished)
    ranks = spread(finished, nodes, 4, placement={0: 0, 1: 0, 2: 1, 3: 1})
    assert [item["node_rank"] for item in ranks] == [0, 0, 1, 1]
