"""Nodes whose own name resolves to 127.0.1.1 (Debian's default) still form a group.

Each node's ``/etc/hosts`` maps its own name to ``127.0.1.1`` and the other node's
name to its address. Gloo, which binds to the address of its host name, advertises
``127.0.1.1``, where no peer can reach it; helios must pick the interface that routes
to ``MASTER_ADDR`` (here: ``eth0``, on both nodes) unless ``GLOO_SOCKET_IFNAME`` is set.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.multinode.checks import LIMIT, TEST_TIMEOUT, describe, spread, torchrun
from tests.support import netns
from tests.support.netns import VirtualNodes, virtual_nodes

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(TEST_TIMEOUT)]

PLAIN_TIMEOUT = 10
"""Seconds of plain torch's group timeout: it fails, so keep it short."""


@pytest.fixture(scope="module")
def loopback_nodes() -> Iterator[VirtualNodes]:
    """Two virtual nodes, each of which resolves its own name to 127.0.1.1."""
    netns.require()
    with virtual_nodes(2, loopback_name=(0, 1)) as built:
        yield built


def static_agents(nodes: VirtualNodes, nproc: int, *args: str) -> list[tuple[int, list[str], None]]:
    """One torchrun agent per node, meeting at node1's address, running the worker."""
    master = [f"--master-addr={nodes.nodes[0].address}", f"--master-port={nodes.free_port(0)}"]
    return [
        (
            node.index,
            [
                *torchrun(
                    "--nnodes=2", f"--node-rank={node.index}", f"--nproc-per-node={nproc}", *master
                ),
                *args,
            ],
            None,
        )
        for node in nodes.nodes
    ]


def test_each_node_resolves_only_its_own_name_to_loopback(loopback_nodes: VirtualNodes) -> None:
    for node in loopback_nodes.nodes:
        names = " ".join(other.name for other in loopback_nodes.nodes)
        finished = loopback_nodes.run(node.index, ["sh", "-c", f"getent hosts {names}"], limit=30)
        found = dict(line.split()[::-1] for line in finished.stdout.splitlines())
        expected = {
            other.name: "127.0.1.1" if other == node else other.address
            for other in loopback_nodes.nodes
        }
        assert found == expected, finished.describe()


def test_plain_torch_advertises_the_loopback_address(loopback_nodes: VirtualNodes) -> None:
    commands = static_agents(loopback_nodes, 1, "--plain", f"--timeout={PLAIN_TIMEOUT}")
    # The rank that connects (either one) fails; its peer would wait on: it is stopped
    # once the first has exited.
    finished = loopback_nodes.run_all(commands, limit=LIMIT, first_exit=True)

    assert all(item.returncode != 0 for item in finished), describe(finished)
    assert any("remote=[127.0.1.1]" in item.stderr for item in finished), describe(finished)


def test_helios_forms_the_group_there(loopback_nodes: VirtualNodes) -> None:
    finished = loopback_nodes.run_all(static_agents(loopback_nodes, 2), limit=LIMIT)

    assert all(item.returncode == 0 for item in finished), describe(finished)
    spread(finished, loopback_nodes, 4, placement={0: 0, 1: 0, 2: 1, 3: 1})
