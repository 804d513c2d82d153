"""The ``exchange`` case: init's exchange of host names, digests and moments at scale.

Simulated as the issue that asked for it did: one process, one ``TCPStore`` on
127.0.0.1, its client shared by every simulated rank in turn; ranks placed eight to a
host in blocks (``node00000``: ranks 0-7), each entry as init sends it (a 16-character
digest, six start-up moments). Every rank sends its entry, then rank 0 reads and
answers, then every other rank reads its answer: the requests each rank makes at init,
one after another. helios's exchange (:mod:`helios_pg._setup._exchange`) runs beside
the one it replaced, kept here: each rank wrote its own key, rank 0 read them all and
wrote one table of every rank's line, and every rank read that whole table. Bytes read
are the values the store returned. At 4,096 and 16,384 ranks the replaced exchange's read
of the table is made by 1,024 ranks and counted, and timed, for all of them (each reads
the same bytes: the count is exact, the time extrapolated), since reading some 30 GB
through one client would take minutes. Every digest is the same (the usual case).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from torch._C._distributed_c10d import TCPStore

from helios_pg._setup._exchange import answer, exchange_hosts, send
from tests.support.procs import free_port
from tools.bench.common import Measured, Row, row

__all__ = ["exchange"]

SIZES = (1_024, 4_096, 16_384)
_PER_HOST = 8
_SAMPLE = 1_024
_WAIT = timedelta(seconds=600)


class _Counted:
    """A store client that counts the bytes its ``get`` returned."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.read = 0

    def get(self, key: str) -> bytes:
        value = bytes(self._store.get(key))
        self.read += len(value)
        return value

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _host(rank: int) -> str:
    return f"node{rank // _PER_HOST:05d}"


def _entry(rank: int) -> str:
    moments = ",".join(f"{1_765_000_000 + rank % 97 + step / 10:.3f}" for step in range(6))
    return f"0\t{'0123456789abcdef'}\t{moments}"


def _helios(store: _Counted, prefix: str, world_size: int) -> float:
    """helios's exchange, rank by rank; its seconds."""
    started = time.perf_counter()
    for rank in range(1, world_size):
        send(store, prefix, rank, _host(rank), _entry(rank))
    attempt, digest, timing = _entry(0).split("\t")
    exchange_hosts(
        store, prefix, 0, world_size, _WAIT, job_attempt=int(attempt), digest=digest,
        timing=timing, host=_host(0),
    )  # fmt: skip
    deadline = time.monotonic() + _WAIT.total_seconds()
    for rank in range(1, world_size):
        layout, agreed = answer(store, prefix, rank, _host(rank), world_size, deadline=deadline)
        assert agreed
        assert layout.local_world_size == _PER_HOST
    return time.perf_counter() - started


def _replaced(store: _Counted, prefix: str, world_size: int) -> float:
    """The exchange helios made before: every rank reads rank 0's whole table; its seconds."""
    started = time.perf_counter()
    for rank in range(world_size):
        store.set(f"{prefix}/host/{rank}", f"{_host(rank)}\t{_entry(rank)}")
    keys = [f"{prefix}/host/{rank}" for rank in range(world_size)]
    assert store.check(keys)
    table = "\n".join(store.get(key).decode() for key in keys)
    store.set(f"{prefix}/hosts", table)
    rank0 = time.perf_counter() - started
    sample = min(world_size - 1, _SAMPLE)
    before, began = store.read, time.perf_counter()
    for _ in range(sample):
        assert store.check([f"{prefix}/hosts"])
        store.get(f"{prefix}/hosts").decode().split("\n")
    scale = (world_size - 1) / sample
    store.read = before + round((store.read - before) * scale)
    return rank0 + (time.perf_counter() - began) * scale


def exchange() -> Measured:
    """Bytes read and seconds of the whole exchange at 1,024, 4,096 and 16,384 ranks."""
    port = free_port()
    server = TCPStore("127.0.0.1", port, 1, True, timeout=_WAIT)
    rows: list[Row] = []
    data: dict[str, Any] = {}
    for world_size in SIZES:
        ours, theirs = _Counted(server), _Counted(server)
        ours_s = _helios(ours, f"helios/{world_size}", world_size)
        theirs_s = _replaced(theirs, f"replaced/{world_size}", world_size)
        case = f"exchange at init: {world_size:,} ranks, 8 per host"
        helios = "each rank reads its host's key"
        other = "each rank reads rank 0's whole table (the exchange replaced)"
        rows.append(
            row(f"{case}, bytes read", helios, other, [ours.read, theirs.read], unit="B",
                goal="<= 0.02" if world_size == SIZES[-1] else "report")
        )  # fmt: skip
        rows.append(row(f"{case}, seconds", helios, other, [ours_s, theirs_s]))
        data[str(world_size)] = {
            "helios": {"bytes": ours.read, "seconds": ours_s},
            "replaced": {"bytes": theirs.read, "seconds": theirs_s},
        }
    return rows, data
