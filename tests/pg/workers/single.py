"""Worker for one plain process: the world-size-one path, and what reaches torch.

Started with no launcher variable and no ``MASTER_*``. It compares the process's
listening TCP sockets (gloo's transport may open its own, on an ephemeral port) and
its environment before and after ``init``, checks that the probe sees a socket it
opens itself, and registers a probe backend that records the ``pg_options`` and
``timeout`` torch hands to a backend's constructor.
"""

from __future__ import annotations

import os
import socket
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import helios_pg
from tests.support.worker import group_timeout, report

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp


def listening_sockets() -> list[str]:
    """The listening TCP sockets this process holds, as ``local_address:port`` in hex."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = str(fd.readlink())
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with Path(table).open() as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if fields[3] == LISTEN and fields[9] in inodes:
                    found.append(fields[1])
    return sorted(found)


def ephemeral_range() -> list[int]:
    """The kernel's range of ports for sockets bound to port 0."""
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return [int(low), int(high)]


def control() -> bool:
    """Whether the probe sees a listening socket this process opens on purpose."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = f"{sock.getsockname()[1]:04X}"
        return any(address.endswith(f":{port}") for address in listening_sockets())


def world_of_one() -> None:
    environ = dict(os.environ)
    before = listening_sockets()
    with helios_pg.process_group(timeout=group_timeout()) as info:
        after = listening_sockets()
        tensor = torch.ones(2)
        work = dist.all_reduce(tensor, async_op=True)
        assert work is not None
        work.wait()
        report(
            check="world-of-one",
            world_size=info.world_size,
            backend=dist.get_backend(),
            total=tensor.tolist(),
            new_listeners=sorted(set(after) - set(before)),
            ephemeral=ephemeral_range(),
            changed=sorted(
                k for k in {*environ, *os.environ} if environ.get(k) != os.environ.get(k)
            ),
        )
    report(check="world-of-one-exit", initialized=dist.is_initialized())


def forwarding() -> None:
    seen: dict[str, Any] = {}

    def create(options: Any, backend_options: object) -> dist.ProcessGroupGloo:
        seen["pg_options"] = backend_options
        seen["timeout"] = options.timeout
        return dist.ProcessGroupGloo(
            options.store, options.group_rank, options.group_size, timeout=options.timeout
        )

    dist.Backend.register_backend("heliosprobe", create, extended_api=True, devices=["cpu"])
    options = object()  # gloo's own options are ignored by its creator; any object will do
    helios_pg.init(backend="heliosprobe", pg_options=options, timeout=timedelta(seconds=42))
    try:
        report(
            check="forwarding",
            backend=dist.get_backend(),
            pg_options_is_given=seen.get("pg_options") is options,
            timeout=seen["timeout"].total_seconds(),
        )
    finally:
        helios_pg.shutdown()


def main() -> int:
    world_of_one()
    report(check="control", seen=control())
    forwarding()
    return 0


if __name__ == "__main__":
    sys.exit(main())
