"""The virtual nodes themselves: names, addresses, isolation, faults and cleanup."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.multinode.checks import TEST_TIMEOUT
from tests.support import netns, slurm
from tests.support.netns import MARKER, NETNS_ETC, VirtualNodes, virtual_nodes
from tests.support.slurm import Cluster, virtual_cluster

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(TEST_TIMEOUT)]

SERVE = """\
import socket, sys
with socket.create_server((sys.argv[1], 0)) as server:
    print(server.getsockname()[1], flush=True)
    while True:
        server.accept()[0].close()
"""
CONNECT = """\
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
    print("connected")
except OSError as error:
    print(type(error).__name__)
"""


def wait_for(condition: Callable[[], bool], limit: float) -> bool:
    """Whether ``condition`` became true within ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def connect(nodes: VirtualNodes, node: int, address: str, port: int, timeout: float) -> str:
    args = [sys.executable, "-c", CONNECT, address, str(port), str(timeout)]
    return nodes.run(node, args, limit=timeout + 20).stdout.strip()


def test_each_node_has_its_own_name_address_and_hosts(nodes: VirtualNodes) -> None:
    names = " ".join(node.name for node in nodes.nodes)
    for node in nodes.nodes:
        script = f"hostname; ip -4 -o addr show dev eth0; getent hosts {names}"
        finished = nodes.run(node.index, ["sh", "-c", script], limit=30)
        lines = finished.stdout.splitlines()

        assert lines[0] == node.name, finished.describe()
        assert f"inet {node.address}/24 " in lines[1], finished.describe()
        resolved = dict(line.split()[::-1] for line in lines[2:])
        assert resolved == {other.name: other.address for other in nodes.nodes}


def test_nodes_route_only_to_their_own_subnet(nodes: VirtualNodes) -> None:
    for node in nodes.nodes:
        finished = nodes.run(node.index, ["ip", "-4", "route", "show", "table", "main"], limit=30)
        routes = [line.split()[0] for line in finished.stdout.splitlines()]
        assert routes == [str(nodes.network)], finished.describe()


def test_a_node_reaches_another_until_its_link_is_down(nodes: VirtualNodes, tmp_path: Path) -> None:
    target = nodes.nodes[1]
    log = tmp_path / "serve.out"
    server = nodes.popen(1, [sys.executable, "-u", "-c", SERVE, target.address], log=log)
    try:
        assert wait_for(lambda: bool(log.exists() and log.read_text().strip()), 20), log
        port = int(log.read_text().split()[0])
        assert connect(nodes, 0, target.address, port, 5) == "connected"

        nodes.link_down(1)
        try:
            assert connect(nodes, 0, target.address, port, 2) != "connected"
        finally:
            nodes.link_up(1)
        outcomes = [connect(nodes, 0, target.address, port, 5) for _ in range(3)]
        assert "connected" in outcomes
    finally:
        server.kill()
        server.wait()


def test_kill_ends_every_process_of_a_node_and_only_those(nodes: VirtualNodes) -> None:
    # A daemon that leaves the session it was started in, as slurmd's steps do.
    escaped = "setsid sleep 300 </dev/null >/dev/null 2>&1 & sleep 300"
    victim = nodes.popen(1, ["sh", "-c", escaped])
    bystander = nodes.popen(0, ["sleep", "300"])
    try:
        wait_for(lambda: len(nodes.pids(1)) >= 3, 10)
        before = nodes.pids(1)
        assert len(before) >= 3, before

        killed = nodes.kill(1)

        assert set(before) <= set(killed)
        assert nodes.pids(1) == []
        assert victim.wait(timeout=10) == -9
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_ssh_runs_on_the_named_node_in_a_clean_environment(nodes: VirtualNodes) -> None:
    script = 'echo "$(hostname) ${LEAK-unset} $(pwd)"'
    env = nodes.env({"LEAK": "from-node1"})
    for host in (nodes.nodes[1].name, nodes.nodes[1].address):
        command = [str(nodes.ssh), "-x", "-o", "BatchMode=yes", "-p", "22", host, script]
        finished = nodes.run(0, command, env=env, limit=30)
        assert finished.stdout.split() == ["node2", "unset", str(Path.home())], finished.describe()

    sends = nodes.ssh_agent(send_env=["LEAK"])
    finished = nodes.run(0, [str(sends), "node2", script], env=env, limit=30)
    assert finished.stdout.split()[:2] == ["node2", "from-node1"], finished.describe()


def test_ssh_refuses_an_unknown_host(nodes: VirtualNodes) -> None:
    finished = nodes.run(0, [str(nodes.ssh), "example.org", "true"], limit=30)

    assert finished.returncode == 255
    assert "unknown host example.org" in finished.stderr


def test_srun_fills_the_first_node_first(cluster: Cluster) -> None:
    finished = cluster.finish(["srun", "-N2", "-n4", "hostname"], limit=60)

    assert finished.returncode == 0, finished.describe()
    assert sorted(finished.stdout.split()) == ["node1", "node1", "node1", "node2"]


def leftovers(marker: str, names: list[str], root: Path) -> list[str]:
    """What a finished run of virtual nodes left: namespaces, files, mounts, processes."""
    found = []
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    found += [line for line in listed.stdout.splitlines() if marker in line]
    found += [str(NETNS_ETC / name) for name in names if (NETNS_ETC / name).exists()]
    found += [line for line in Path("/proc/self/mounts").read_text().splitlines() if marker in line]
    found += [str(path) for path in Path(root).parent.glob(f"{marker}*")]
    needle = f"{MARKER}={marker}".encode()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in environ.read_bytes().split(b"\0"):
                stat = (environ.parent / "stat").read_text()
                if stat.rpartition(")")[2].split()[0] != "Z":
                    found.append(f"process {environ.parent.name}")
        except OSError:
            continue
    return found


@pytest.mark.parametrize("ending", [None, RuntimeError, KeyboardInterrupt])
def test_virtual_nodes_leave_nothing_behind(ending: type[BaseException] | None) -> None:
    netns.require()
    seen: list[VirtualNodes] = []

    def use() -> None:
        with virtual_nodes(2) as built:
            seen.append(built)
            built.popen(0, ["sh", "-c", "setsid sleep 300 & sleep 300"])
            built.popen(1, ["sleep", "300"])
            if ending:
                raise ending("stop")

    if ending:
        with pytest.raises(ending):
            use()
    else:
        use()

    (built,) = seen
    assert leftovers(built.marker, [node.netns for node in built.nodes], built.root) == []


def test_a_virtual_cluster_leaves_nothing_behind(tmp_path: Path) -> None:
    netns.require()
    slurm.require("slurm")
    with virtual_nodes(2) as built, virtual_cluster(built) as started:
        job = ["sbatch", "-N2", "-o", str(tmp_path / "job.out"), "--wrap", "srun sleep 300"]
        code, _, err = started.run(job, limit=30)
        assert code == 0, err
        assert wait_for(lambda: len(built.pids(1)) > 1, 20), "the job's step never reached node2"
        cluster_root = started.root

    assert leftovers(built.marker, [node.netns for node in built.nodes], built.root) == []
    assert not cluster_root.exists()
