"""The main job's links section: point-to-point latency and bandwidth between every pair.

One rank per node stands for its node (its lowest rank); on one node, every rank stands
for itself, so the pairs of local ranks are measured. The pairs run in rounds, as in a
round-robin tournament (the circle method): in each round every endpoint is in one pair
at most, the pairs of a round run at once, and a barrier closes the round. In a pair,
the lower rank leads:

- latency: a warm-up round trip, then :data:`TRIPS` round trips of one float; the
  leader's median, halved;
- bandwidth, each way in turn: the sender sends a header (the size, 0 to stop) and a
  payload, from :data:`FIRST` bytes doubling up to :data:`LARGEST`, and the receiver
  answers each payload with one float; the sender's rate is the median over the
  messages of the largest size it reached. Each way stops once its share of
  :data:`BUDGET` is spent, so a slow link costs its time, not more.

Every rank then has every measurement (one ``gather_objects``); :mod:`.link_report`
says which link is slowest and which node is common to the slow links.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from helios_collectives._main.link_report import Link, Links
from helios_collectives._main.sweep import synchronize
from helios_collectives._objects import gather_objects
from helios_collectives._safe_barrier import safe_barrier

__all__ = ["BUDGET", "FIRST", "LARGEST", "TRIPS", "endpoints", "measure_links", "rounds"]

TRIPS = 20
"""Timed round trips of one float per pair."""
FIRST = 64 * 1024
"""Bytes of the first bandwidth message each way."""
LARGEST = 16 * 1024 * 1024
"""Bytes of the largest bandwidth message."""
BUDGET = 3.0
"""Seconds of bandwidth messages for the whole section, shared by the rounds' ways."""
_WAY = (0.02, 0.25)
"""The least and the most seconds one way of one pair sends for."""


def rounds(count: int) -> list[list[tuple[int, int]]]:
    """Pair ``count`` endpoints in rounds, each endpoint in one pair per round at most.

    Args:
        count: The number of endpoints.

    Returns:
        The rounds, each a list of ``(lower, higher)`` endpoint pairs; every pair of
        endpoints appears once.
    """
    players: list[int | None] = [*range(count), *([None] if count % 2 else [])]
    found = []
    for _ in range(len(players) - 1):
        half = len(players) // 2
        pairs = [(players[i], players[-1 - i]) for i in range(half)]
        chosen = [(min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None]
        if chosen:
            found.append(chosen)
        players = [players[0], players[-1], *players[1:-1]]
    return found


def endpoints(hosts: list[str]) -> tuple[str, list[int], list[str]]:
    """The ranks that stand for the endpoints: the first of each host, or every rank.

    Args:
        hosts: Every rank's host, by rank.

    Returns:
        ``"nodes"`` or ``"local ranks"``, each endpoint's rank, and each endpoint's name.
    """
    firsts = {host: rank for rank, host in reversed(list(enumerate(hosts)))}
    if len(firsts) > 1:
        ranks = sorted(firsts.values())
        return "nodes", ranks, [hosts[rank] for rank in ranks]
    return "local ranks", list(range(len(hosts))), [f"rank {rank}" for rank in range(len(hosts))]


def _round_trips(peer: int, lead: bool, device: torch.device) -> float:
    one = torch.zeros(1, device=device)
    times = []
    for _ in range(TRIPS + 1):
        start = time.perf_counter()
        if lead:
            dist.send(one, peer)
            dist.recv(one, peer)
        else:
            dist.recv(one, peer)
            dist.send(one, peer)
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]) / 2


def _send_for(peer: int, seconds: float, buffer: torch.Tensor, device: torch.device) -> float:
    header = torch.zeros(1, dtype=torch.int64, device=device)
    ack = torch.zeros(1, device=device)
    rates: list[tuple[int, float]] = []
    size, deadline = FIRST, time.perf_counter() + seconds
    while True:
        start = time.perf_counter()
        header.fill_(size)
        dist.send(header, peer)
        dist.send(buffer[:size], peer)
        dist.recv(ack, peer)
        synchronize(device)
        rates.append((size, size / (time.perf_counter() - start)))
        if time.perf_counter() > deadline:
            break
        size = min(size * 2, LARGEST)
    header.fill_(0)
    dist.send(header, peer)
    return statistics.median(rate for sent, rate in rates if sent == size) / 1e9


def _receive(peer: int, buffer: torch.Tensor, device: torch.device) -> None:
    header = torch.zeros(1, dtype=torch.int64, device=device)
    ack = torch.zeros(1, device=device)
    while True:
        dist.recv(header, peer)
        size = int(header.item())
        if size == 0:
            return
        dist.recv(buffer[:size], peer)
        dist.send(ack, peer)


def measure_links(hosts: list[str], device: torch.device) -> Links:
    """Measure every pair of endpoints; a collective: every rank of the group calls it.

    Args:
        hosts: Every rank's host, by rank (the same list on every rank).
        device: This rank's device, which holds the messages.

    Returns:
        The measurements, the same on every rank.
    """
    started = time.perf_counter()
    scope, ranks, names = endpoints(hosts)
    schedule = rounds(len(ranks)) if len(ranks) > 1 else []
    way = min(max(BUDGET / max(2 * len(schedule), 1), _WAY[0]), _WAY[1])
    me = dist.get_rank()
    mine: list[tuple[int, int, str, float]] = []
    buffer = torch.zeros(LARGEST, dtype=torch.uint8, device=device) if me in ranks else None
    for pairs in schedule:
        for low, high in pairs:
            if me not in (ranks[low], ranks[high]) or buffer is None:
                continue
            lead, peer = me == ranks[low], ranks[high] if me == ranks[low] else ranks[low]
            latency = _round_trips(peer, lead, device)
            if lead:
                mine.append((low, high, "latency", latency))
            for sender in (lead, not lead):
                if sender:
                    rate = _send_for(peer, way, buffer, device)
                    mine.append((low, high, "up" if lead else "down", rate))
                else:
                    _receive(peer, buffer, device)
        safe_barrier()
    measured = [item for found in gather_objects(mine) for item in found]
    links = [Link(names[low], names[high]) for pairs in schedule for low, high in pairs]
    by_pair = {(link.a, link.b): link for link in links}
    for low, high, kind, value in measured:
        link = by_pair[(names[low], names[high])]
        by_pair[(link.a, link.b)] = link.with_value(kind, value)
    ordered = sorted(by_pair.values(), key=lambda link: (names.index(link.a), names.index(link.b)))
    seconds = time.perf_counter() - started
    return Links(scope, names, ranks, ordered, len(schedule), seconds)
