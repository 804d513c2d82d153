"""Learn which ranks share a node, from the host names of the group, once per init.

Used where no launcher variable says which node a rank runs on (mpirun's ranks on
several nodes, a group formed with ``init_method`` and no variables), and to count
the hosts a job really spans. Through the rendezvous store, not a collective: every
rank writes its host name, rank 0 reads them all and publishes the list, every rank
reads that one key. The ranks of rank 0's host form node 0, the next new host node
1, and so on, in rank order.
"""

from __future__ import annotations

import socket
import time
from datetime import timedelta
from typing import Any

from helios_env._layout import Layout

__all__ = ["exchange_hosts", "layout_of"]

_POLL_LIMIT = 0.05


def _wait(store: Any, keys: list[str], deadline: float, what: str) -> None:
    delay = 0.001
    while not store.check(keys):
        left = deadline - time.monotonic()
        if left <= 0:
            message = f"{what} did not arrive at the rendezvous store in time"
            raise TimeoutError(message)
        time.sleep(min(delay, left))
        delay = min(delay * 2, _POLL_LIMIT)


def exchange_hosts(
    store: Any, prefix: str, rank: int, world_size: int, timeout: timedelta
) -> list[str]:
    """Return every rank's host name, in rank order.

    Args:
        store: The group's rendezvous store (every rank's, the same keys).
        prefix: Keys under which this init's exchange runs (unique per init).
        rank: This rank.
        world_size: The number of ranks.
        timeout: How long to wait for the others.

    Returns:
        The host names, one per rank.

    Raises:
        TimeoutError: A rank did not write its name, or rank 0 its list, in time.
    """
    deadline = time.monotonic() + timeout.total_seconds()
    store.set(f"{prefix}/host/{rank}", socket.gethostname())
    table = f"{prefix}/hosts"
    if rank == 0:
        keys = [f"{prefix}/host/{index}" for index in range(world_size)]
        _wait(store, keys, deadline, "the host names of every rank")
        hosts = [bytes(store.get(key)).decode(errors="replace") for key in keys]
        store.set(table, "\n".join(hosts))
        return hosts
    _wait(store, [table], deadline, "rank 0's table of host names")
    return bytes(store.get(table)).decode(errors="replace").split("\n")


def layout_of(hosts: list[str], rank: int) -> Layout:
    """The layout of ``rank`` among ranks that run on ``hosts`` (one per rank).

    Args:
        hosts: Each rank's host name, in rank order.
        rank: The rank to place.

    Returns:
        Its node index (nodes numbered by their first rank), the number of nodes, and
        its rank and the number of ranks on its node.
    """
    nodes = list(dict.fromkeys(hosts))
    mine = hosts[rank]
    return Layout(
        rank=rank,
        world_size=len(hosts),
        node_rank=nodes.index(mine),
        num_nodes=len(nodes),
        local_rank=hosts[:rank].count(mine),
        local_world_size=hosts.count(mine),
    )
