"""init's exchange through the rendezvous store: every rank's host, attempt, digest, moments.

Where every rank runs the same software (every digest the same: the usual case), the
store traffic grows linearly with the number of ranks N, not with N squared:

- each rank appends one line (its rank, host, attempt, fingerprint digest and start-up
  moments) to one key and counts itself in (two requests of O(1) bytes; a store without
  ``append``, written in Python, gets a key per rank instead);
- rank 0 waits for the count, reads that one key (O(N) bytes, once), and writes one short
  key per host: the job's attempt and number of nodes, the host's node index and its
  ranks as arithmetic runs (``0-7``, ``3-4095/4`` for a cyclic placement), and whether
  every digest is the same;
- every rank reads its own host's key (O(1) bytes for block and cyclic placements).

Where the digests differ (ranks about to fail, or warned of), every rank also reads the
whole job's hosts and digest groups, each as runs of ranks: O(hosts + groups) bytes
each. Rank 0 keeps every rank's entry, for the start-up warning and the agreement's
words; where a rank is missing or given to two processes though all counted in, it says
so to every rank.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any, NamedTuple

from helios_env import DistributedInfo
from helios_env.integration import expected_hosts, ranks_on
from helios_pg._errors import ProcessGroupInitError
from helios_pg._store_lines import arrived, read_lines, send_line
from helios_pg._store_poll import poll, wait_for_keys

__all__ = [
    "Roll",
    "Table",
    "answer",
    "decode_runs",
    "encode_runs",
    "exchange_hosts",
    "send",
]

_AGREED = "agreed"
_DIFFER = "differ"
_REFUSED = "!"
"""Starts rank 0's answer to a host when it refuses the exchange: its message follows."""
_NAMED = 8
"""Doubled ranks named in rank 0's refusal."""
_OLDER_LOOKED = 16
"""Missing ranks looked up, at a timeout, for the entry an older helios-pg sends."""


class Table(NamedTuple):
    """Every rank's entry, by rank."""

    hosts: list[str]
    """Each rank's host name."""
    digests: list[str]
    """Each rank's fingerprint digest; empty where a rank does not check agreement."""
    timings: list[str]
    """Each rank's start-up moments (``Arrival.encode``): rank 0's table only."""


class Roll(NamedTuple):
    """What one rank learned in the exchange."""

    layout: DistributedInfo
    """Its place: node index, number of nodes, rank and size on its node, the attempt."""
    table: Table | None
    """Every rank's entry: rank 0's always, the others' only where the digests differ."""


def encode_runs(ranks: Iterable[int]) -> str:
    """Write ranks as arithmetic runs: ``0-7``, ``1-13/4``, ``9``, joined by commas.

    Args:
        ranks: The ranks, in any order.

    Returns:
        The runs; a block or cyclic placement is one run per host.
    """
    ordered = sorted(set(ranks))
    parts: list[str] = []
    index = 0
    while index < len(ordered):
        start = ordered[index]
        if index + 1 == len(ordered):
            parts.append(str(start))
            break
        step = ordered[index + 1] - start
        end = index + 1
        while end + 1 < len(ordered) and ordered[end + 1] - ordered[end] == step:
            end += 1
        suffix = "" if step == 1 else f"/{step}"
        parts.append(f"{start}-{ordered[end]}{suffix}")
        index = end + 1
    return ",".join(parts)


def decode_runs(text: str) -> list[int]:
    """The ranks of :func:`encode_runs`' words, in order.

    Args:
        text: The runs.

    Returns:
        The ranks.

    Raises:
        ValueError: The text is not runs of ranks.
    """
    ranks: list[int] = []
    for part in filter(None, text.split(",")):
        bounds, _, step = part.partition("/")
        first, _, last = bounds.partition("-")
        ranks.extend(range(int(first), int(last or first) + 1, int(step or 1)))
    return ranks


def _grouped(values: Sequence[str]) -> dict[str, list[int]]:
    """Each value and the ranks that have it, in the order of each value's first rank."""
    groups: dict[str, list[int]] = {}
    for rank, value in enumerate(values):
        groups.setdefault(value, []).append(rank)
    return groups


def _by_rank(lines: Iterable[str], world_size: int) -> list[str]:
    """Spread ``value<TAB>runs`` lines back to one value per rank."""
    values = [""] * world_size
    for line in lines:
        value, _, runs = line.rpartition("\t")
        for rank in decode_runs(runs):
            if rank < world_size:
                values[rank] = value
    return values


Entry = tuple[str, str, str, str]
"""One rank's host, attempt, digest and moments, as it sent them."""


def _parse(line: str) -> Entry:
    host, said, digest, timing = (*line.split("\t"), "", "", "")[:4]
    return host, said, digest, timing


def _text(store: Any, key: str) -> str:
    return bytes(store.get(key)).decode(errors="replace")


def _sent(store: Any, prefix: str, world_size: int) -> dict[int, list[Entry]]:
    """Every line the ranks sent so far, by rank: appended, or in a key of its own."""
    found = read_lines(store, prefix, world_size)
    return {rank: [_parse(line) for line in lines] for rank, lines in found.items()}


def _older(store: Any, prefix: str, ranks: list[int]) -> list[int]:
    """Of ``ranks``, those that sent the entry of the exchange this one replaced."""
    return [rank for rank in ranks[:_OLDER_LOOKED] if store.check([f"{prefix}/host/{rank}"])]


def _refuse(store: Any, prefix: str, found: dict[int, list[Entry]], world_size: int) -> None:
    """Rank 0: where ranks are missing or doubled though all counted in, tell them all; raise."""
    doubled = sorted(rank for rank, entries in found.items() if len(entries) > 1)
    missing = [rank for rank in range(world_size) if rank not in found]
    if not (doubled or missing):
        return
    hosts = {rank: sorted({entry[0] for entry in entries}) for rank, entries in found.items()}
    parts = [f"{ranks_on([rank], [])} was given to {len(found[rank])} processes (on "
             f"{', '.join(hosts[rank])})" for rank in doubled[:_NAMED]]  # fmt: skip
    if missing:
        parts.append(f"{ranks_on(missing, [])} to none")
    message = (
        f"the ranks of a world of {world_size} are not each given to one process: "
        f"{'; '.join(parts)}. Give each process its own RANK (0 to {world_size - 1})"
    )
    for host in {entry[0] for entries in found.values() for entry in entries}:
        store.set(f"{prefix}/on/{host}", _REFUSED + message)
    raise ProcessGroupInitError(message)


def _collect(store: Any, prefix: str, world_size: int, deadline: float) -> tuple[Table, int]:
    """Rank 0: wait for every rank's line, then read them all (one request)."""
    if not poll(lambda: arrived(store, prefix) >= world_size, deadline - time.monotonic()):
        found = _sent(store, prefix, world_size)
        missing = [rank for rank in range(world_size) if rank not in found]
        absent = ranks_on(missing, expected_hosts(world_size) or [], where="expected on ")
        message = (
            "the host names of every rank did not arrive at the rendezvous store in time: "
            f"{absent} sent none"
        )
        older = _older(store, prefix, missing)
        if older:
            message += (
                f"; {ranks_on(older, [])} sent the entry of an older helios-pg: install the same "
                "helios-pg on every node"
            )
        raise TimeoutError(message)
    found = _sent(store, prefix, world_size)
    _refuse(store, prefix, found, world_size)
    table = Table([""] * world_size, [""] * world_size, [""] * world_size)
    attempt = 0
    for rank, ((host, said, digest, timing),) in sorted(found.items()):
        if rank < world_size:
            for column, value in zip(table, (host, digest, timing), strict=True):
                column[rank] = value
        attempt = max(attempt, int(said) if said.isdigit() else 0)
    return table, attempt


def _publish(store: Any, prefix: str, table: Table, attempt: int) -> None:
    """Rank 0: one key per host with what its ranks need; the detail where digests differ."""
    nodes = _grouped(table.hosts)
    agreed = len(set(table.digests)) == 1
    for index, (host, ranks) in enumerate(nodes.items()):
        store.set(
            f"{prefix}/on/{host}",
            f"{attempt}\t{len(nodes)}\t{index}\t{encode_runs(ranks)}\t"
            f"{_AGREED if agreed else _DIFFER}",
        )
    if not agreed:
        lines = [f"{host}\t{encode_runs(ranks)}" for host, ranks in nodes.items()]
        lines.append("")  # hosts above, digest groups below
        groups = _grouped(table.digests)
        lines += [f"{digest}\t{encode_runs(ranks)}" for digest, ranks in groups.items()]
        store.set(f"{prefix}/detail", "\n".join(lines))


def _detail(store: Any, prefix: str, world_size: int, deadline: float) -> Table:
    """Every rank's host and digest, from rank 0's runs (only where the digests differ)."""
    wait_for_keys(store, [f"{prefix}/detail"], deadline, "rank 0's groups of digests")
    hosts, _, digests = _text(store, f"{prefix}/detail").partition("\n\n")
    return Table(
        _by_rank(hosts.splitlines(), world_size),
        _by_rank(digests.splitlines(), world_size),
        [],
    )


def send(store: Any, prefix: str, rank: int, host: str, entry: str) -> None:
    """Send this rank's entry and count it in: two requests of O(1) bytes.

    Args:
        store: The exchange's store.
        prefix: The exchange's keys.
        rank: This rank.
        host: This rank's host name.
        entry: Its attempt, digest and moments, tab-separated.
    """
    send_line(store, prefix, rank, f"{host}\t{entry}")


def answer(
    store: Any, prefix: str, rank: int, host: str, world_size: int, *, deadline: float
) -> tuple[DistributedInfo, bool]:
    """This rank's place, from rank 0's key for its host (one short read).

    Args:
        store: The exchange's store.
        prefix: The exchange's keys.
        rank: This rank.
        host: This rank's host name, as sent.
        world_size: The number of ranks.
        deadline: ``time.monotonic()`` by which rank 0 must have answered.

    Returns:
        Its layout, with the job's attempt, and whether every rank's digest is the same.

    Raises:
        TimeoutError: Rank 0 did not answer in time.
        ProcessGroupInitError: Rank 0 found ranks missing or doubled.
        RuntimeError: Rank 0 did not place this rank on its host.
    """
    mine = f"{prefix}/on/{host}"
    wait_for_keys(store, [mine], deadline, "rank 0's placement of the ranks on their hosts")
    said = _text(store, mine)
    if said.startswith(_REFUSED):
        raise ProcessGroupInitError(said.removeprefix(_REFUSED))
    attempt, nodes, index, runs, agreed = said.split("\t")
    ranks = decode_runs(runs)
    if rank not in ranks:
        message = (
            f"rank {rank} is not among the ranks rank 0 placed on {host!r} ({runs}): two "
            "processes were given the same RANK; give each process its own"
        )
        raise RuntimeError(message)
    layout = DistributedInfo(
        local_rank=ranks.index(rank),
        rank=rank,
        local_world_size=len(ranks),
        world_size=world_size,
        node_rank=int(index),
        num_nodes=int(nodes),
        attempt=int(attempt),
    )
    return layout, agreed == _AGREED


def exchange_hosts(
    store: Any,
    prefix: str,
    rank: int,
    world_size: int,
    timeout: timedelta,
    *,
    job_attempt: int = 0,
    digest: str = "",
    timing: str = "",
    host: str | None = None,
) -> Roll:
    """Exchange every rank's host name, attempt, fingerprint digest and moments.

    Args:
        store: The group's rendezvous store (every rank's, the same keys).
        prefix: Keys under which this init's exchange runs (unique per init).
        rank: This rank.
        world_size: The number of ranks.
        timeout: How long to wait for the others.
        job_attempt: The attempt this rank's launcher variables say.
        digest: This rank's fingerprint digest; empty when it does not check agreement.
        timing: This rank's start-up moments (``Arrival.encode``), or empty.
        host: This rank's host name; the machine's (``socket.gethostname()``) by default.

    Returns:
        This rank's layout (with the largest attempt any rank said) and, on rank 0 or
        where the digests differ, every rank's entry.

    Raises:
        TimeoutError: A rank did not send its entry, or rank 0 its answer, in time; rank
            0 names the ranks that sent none.
        ProcessGroupInitError: Every rank counted in, but some rank was given to two
            processes (and another to none); every rank that came raises it.
        RuntimeError: Rank 0 did not place this rank on its host.
    """
    deadline = time.monotonic() + timeout.total_seconds()
    host = socket.gethostname() if host is None else host
    send(store, prefix, rank, host, f"{job_attempt}\t{digest}\t{timing}")
    table = None
    if rank == 0:
        table, _ = collected = _collect(store, prefix, world_size, deadline)
        _publish(store, prefix, *collected)
    layout, agreed = answer(store, prefix, rank, host, world_size, deadline=deadline)
    if table is None and not agreed:
        table = _detail(store, prefix, world_size, deadline)
    return Roll(layout, table)
