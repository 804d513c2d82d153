"""Learning which ranks share a node from their host names, through a real store."""

from __future__ import annotations

import os
import shutil
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from torch._C._distributed_c10d import HashStore

from helios_pg._setup._nodes import Roll, exchange_hosts, layout_of
from tests.support.procs import base_env, free_port, results, run_processes

WORKER = Path(__file__).parent / "workers" / "layout.py"


@pytest.mark.parametrize(
    ("hosts", "rank", "expected"),
    [
        # srun -n4 on two nodes: 3 + 1.
        (["a", "a", "a", "b"], 3, (1, 2, 0, 1)),
        (["a", "a", "a", "b"], 2, (0, 2, 2, 3)),
        # MPICH's round-robin placement: ranks alternate between the nodes.
        (["a", "b", "a", "b"], 3, (1, 2, 1, 2)),
        (["a", "b", "a", "b"], 2, (0, 2, 1, 2)),
        # The node of rank 0 is node 0, whatever the names sort to.
        (["z", "y", "z"], 1, (1, 2, 0, 1)),
        (["only"], 0, (0, 1, 0, 1)),
    ],
)
def test_the_layout_follows_the_host_of_each_rank(
    hosts: list[str], rank: int, expected: tuple[int, int, int, int]
) -> None:
    layout = layout_of(hosts, rank)

    got = (layout.node_rank, layout.num_nodes, layout.local_rank, layout.local_world_size)
    assert got == expected
    assert (layout.rank, layout.world_size) == (rank, len(hosts))


def test_every_rank_reads_the_same_table_from_the_store() -> None:
    store = HashStore()
    world_size = 3
    tables: dict[int, Roll] = {}

    def rank(index: int) -> None:
        # Each torchrun agent counts its own restarts: rank 1's node restarted twice.
        attempt = 2 if index == 1 else 0
        wait = timedelta(seconds=10)
        digest = f"digest{index}"
        tables[index] = exchange_hosts(
            store, "t", index, world_size, wait, job_attempt=attempt, digest=digest
        )

    threads = [threading.Thread(target=rank, args=(index,)) for index in (2, 1, 0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)

    assert len(tables) == world_size
    assert tables[0] == tables[1] == tables[2]
    assert len(tables[0].hosts) == world_size
    assert tables[0].attempt == 2  # the job's attempt: the largest any rank said
    assert tables[0].digests == ["digest0", "digest1", "digest2"]


def test_a_missing_rank_ends_the_exchange_at_the_timeout() -> None:
    store = HashStore()

    with pytest.raises(TimeoutError, match="host names of every rank"):
        exchange_hosts(store, "t", 0, 2, timedelta(seconds=0.2))


def test_init_learns_a_round_robin_layout_from_the_host_names() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("each rank needs a host name of its own: unshare --uts, as root")
    hosts = ["helios-node-a", "helios-node-b", "helios-node-a"]
    port = str(free_port())
    commands = []
    for rank, host in enumerate(hosts):
        env = base_env(
            {
                "OMPI_COMM_WORLD_RANK": str(rank),
                "OMPI_COMM_WORLD_SIZE": str(len(hosts)),
                "OMPI_COMM_WORLD_LOCAL_RANK": str(hosts[:rank].count(host)),
                "OMPI_COMM_WORLD_LOCAL_SIZE": str(hosts.count(host)),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
            }
        )
        script = f'hostname {host} && exec "$0" "$@"'
        commands.append(
            (["unshare", "--uts", "sh", "-c", script, sys.executable, str(WORKER)], env)
        )

    finished = run_processes(commands, limit=90)

    for item in finished:
        assert item.returncode == 0, item.describe()
    reports = sorted(results(finished), key=lambda report: int(report["rank"]))
    assert [report["host"] for report in reports] == hosts
    for rank, report in enumerate(reports):
        assert (report["before"]["node_rank"], report["before"]["num_nodes"]) == (None, None)
        assert (report["during"]["node_rank"], report["during"]["num_nodes"]) == (
            [0, 1, 0][rank],
            2,
        )
        assert report["during"]["local_rank"] == [0, 0, 1][rank]
        assert report["after"]["node_rank"] is None  # shutdown forgets the layout
        assert report["total"] == 3.0
