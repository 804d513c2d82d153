"""Learning which ranks share a node from their host names, through a real store."""

from __future__ import annotations

import os
import shutil
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from torch._C._distributed_c10d import HashStore, Store

from helios_pg import ProcessGroupInitError
from helios_pg._setup._exchange import Roll, decode_runs, encode_runs, exchange_hosts
from helios_pg._setup._given import sign_in
from tests.support.procs import base_env, free_port, results, run_processes

WORKER = Path(__file__).parent / "workers" / "layout.py"


class AppendlessStore(Store):
    """A store written in Python, as wrappers are: set, get, add and check, no append."""

    def __init__(self) -> None:
        super().__init__()
        self._inner = HashStore()

    def set(self, key: str, value: str) -> None:
        self._inner.set(key, value)

    def get(self, key: str) -> bytes:
        return self._inner.get(key)

    def add(self, key: str, value: int) -> int:
        return self._inner.add(key, value)

    def check(self, keys: list[str]) -> bool:
        return self._inner.check(keys)


def exchange_on_threads(
    hosts: list[str],
    digests: list[str] | None = None,
    *,
    ranks: list[int] | None = None,
    store: Store | None = None,
) -> dict[int, Roll | Exception]:
    """Each process's exchange, one thread each on one store: process i on ``hosts[i]``
    says ``ranks[i]`` (its index by default), in a world of ``len(hosts)``."""
    shared = store if store is not None else HashStore()
    rolls: dict[int, Roll | Exception] = {}
    said = digests or [""] * len(hosts)
    told = ranks or list(range(len(hosts)))

    def process(index: int) -> None:
        # Each torchrun agent counts its own restarts: rank 1's node restarted twice.
        attempt = 2 if index == 1 else 0
        try:
            rolls[index] = exchange_hosts(
                shared,
                "t",
                told[index],
                len(hosts),
                timedelta(seconds=10),
                job_attempt=attempt,
                digest=said[index],
                host=hosts[index],
            )
        except (TimeoutError, ProcessGroupInitError) as exc:
            rolls[index] = exc

    threads = [threading.Thread(target=process, args=(index,)) for index in range(len(hosts))]
    for thread in reversed(threads):
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert sorted(rolls) == list(range(len(hosts)))
    return rolls


def rolled(found: Roll | Exception) -> Roll:
    assert isinstance(found, Roll), found
    return found


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [
        # srun -n4 on two nodes: 3 + 1.
        (["a", "a", "a", "b"], [(0, 0, 3), (0, 1, 3), (0, 2, 3), (1, 0, 1)]),
        # MPICH's round-robin placement: ranks alternate between the nodes.
        (["a", "b", "a", "b"], [(0, 0, 2), (1, 0, 2), (0, 1, 2), (1, 1, 2)]),
        # The node of rank 0 is node 0, whatever the names sort to.
        (["z", "y", "z"], [(0, 0, 2), (1, 0, 1), (0, 1, 2)]),
        (["only", "only"], [(0, 0, 2), (0, 1, 2)]),
    ],
)
def test_the_layout_follows_the_host_of_each_rank(
    hosts: list[str], expected: list[tuple[int, int, int]]
) -> None:
    rolls = exchange_on_threads(hosts)

    for rank, found in rolls.items():
        layout = rolled(found).layout
        got = (layout.node_rank, layout.local_rank, layout.local_world_size)
        assert got == expected[rank]
        assert (layout.rank, layout.world_size) == (rank, len(hosts))
        assert layout.num_nodes == len(set(hosts))
        assert layout.attempt == 2  # the job's attempt: the largest any rank said


def test_rank_zero_alone_reads_every_entry_where_the_digests_agree() -> None:
    hosts = ["a", "a", "b"]
    rolls = {
        rank: rolled(found) for rank, found in exchange_on_threads(hosts, ["same"] * 3).items()
    }

    assert rolls[0].table is not None
    assert rolls[0].table.hosts == hosts
    assert rolls[0].table.digests == ["same"] * 3
    assert rolls[1].table is None
    assert rolls[2].table is None


def test_every_rank_reads_the_groups_where_the_digests_differ() -> None:
    hosts = ["a", "b", "a", "b", "c"]
    digests = ["x", "x", "y", "x", ""]
    rolls = exchange_on_threads(hosts, digests)

    for found in rolls.values():
        roll = rolled(found)
        assert roll.table is not None
        assert (roll.table.hosts, roll.table.digests) == (hosts, digests)


def test_a_store_without_append_gets_a_key_per_rank() -> None:
    hosts = ["a", "b", "a"]
    rolls = exchange_on_threads(hosts, store=AppendlessStore())

    layouts = [rolled(rolls[rank]).layout for rank in range(3)]
    assert [(item.node_rank, item.local_rank) for item in layouts] == [(0, 0), (1, 0), (0, 1)]
    assert sign_in(AppendlessStore(), 0, 2) is None  # init goes on; a failure keeps torch's words


def test_a_rank_given_to_two_processes_is_named_to_every_process() -> None:
    # Rank 1 twice (on hosts a and b), rank 2 never: the count reaches three all the same.
    rolls = exchange_on_threads(["a", "a", "b"], ranks=[0, 1, 1])

    for found in rolls.values():
        assert isinstance(found, ProcessGroupInitError), found
        assert str(found) == (
            "the ranks of a world of 3 are not each given to one process: rank 1 was given "
            "to 2 processes (on a, b); rank 2 to none. Give each process its own RANK (0 to 2)"
        )


def test_a_rank_running_the_older_exchange_is_named_at_the_timeout() -> None:
    store = HashStore()
    store.set("t/host/1", "b\t0\t\t")  # what the exchange before this one wrote

    with pytest.raises(TimeoutError, match=r"rank 1 sent the entry of an older helios-pg"):
        exchange_hosts(store, "t", 0, 2, timedelta(seconds=0.2))


@pytest.mark.parametrize(
    ("ranks", "words"),
    [
        ([], ""),
        ([5], "5"),
        ([3, 1, 2, 0], "0-3"),  # a block placement
        (list(range(2, 4096, 8)), "2-4090/8"),  # a cyclic one, over 8 hosts
        ([0, 1, 2, 7, 9, 11, 40], "0-2,7-11/2,40"),
    ],
)
def test_runs_of_ranks_read_back_as_written(ranks: list[int], words: str) -> None:
    assert encode_runs(ranks) == words
    assert decode_runs(words) == sorted(ranks)


def test_a_missing_rank_ends_the_exchange_at_the_timeout() -> None:
    store = HashStore()
    with pytest.raises(TimeoutError, match="rank 0's placement of the ranks"):
        exchange_hosts(store, "t", 1, 3, timedelta(seconds=0.1))  # sent; rank 0 never answers

    with pytest.raises(TimeoutError, match=r"host names of every rank .*: rank 2 sent none"):
        exchange_hosts(store, "t", 0, 3, timedelta(seconds=0.2))


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
