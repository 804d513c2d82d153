"""barrier: a barrier with a timeout that names the missing ranks, and its store protocol."""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

import torch.distributed as dist
from torch._C._distributed_c10d import TCPStore
from torch.distributed.distributed_c10d import Store

from helios_collectives import _barrier_state, _bounded, _wake
from helios_collectives._checks import as_timedelta
from helios_collectives._errors import BarrierError, BarrierTimeoutError
from helios_collectives._group import global_ranks, require_group

__all__ = ["barrier"]

_AVAILABLE = dist.is_available()
_MAX_POLL = 0.01  # seconds between polls of the arrival count, at most
_GAVE_UP = 1 << 40  # added to a barrier's arrival count once a rank has timed out


def _arrive(store: Store, base: str, me: int, token: str) -> int:
    """Record this rank's arrival and wake token, then count it in; the new count."""
    # Recorded before counted: a rank counted in before a give-up is always recorded.
    # torch's stubs leave out append, which every supported torch's stores have.
    store.append(f"{base}/arrivals", f"{me}:{token},")  # type: ignore[attr-defined]
    return store.add(f"{base}/count", 1)


def _arrivals(store: Store, base: str) -> dict[int, str]:
    """The ranks recorded as arrived at the barrier ``base``, with their wake tokens."""
    key = f"{base}/arrivals"
    if not store.check([key]):
        return {}
    entries = bytes(store.get(key)).decode().split(",")
    return {int(rank): token for rank, _, token in (e.partition(":") for e in entries if e)}


@dataclass(frozen=True)
class _Verdict:
    """What the first rank to time out found: the ranks whose arrival was not recorded."""

    missing: tuple[int, ...]
    timeout: timedelta  # that rank's timeout


def _give_up(
    store: Store,
    base: str,
    ranks: list[int],
    limit: timedelta,
    *,
    root: TCPStore | None = None,
    me: int | None = None,
) -> int:
    # The count decides the outcome. A rank that times out adds _GAVE_UP to it, so no
    # rank can see the count met after that. The first to do so then reads who is
    # missing: every rank that counted itself in before has its arrival recorded, and
    # every later one sees _GAVE_UP and reads this verdict. It is recorded even when
    # nobody is missing (the count was met meanwhile), so that every rank learns it. On
    # a TCPStore the ranks that wait are woken first (they then wait for the verdict).
    jumped = store.add(f"{base}/count", _GAVE_UP)
    before = jumped - _GAVE_UP
    if before < _GAVE_UP:
        missing: tuple[int, ...] = ()
        if before < len(ranks):
            arrived = _arrivals(store, base)
            missing = tuple(rank for rank in ranks if rank not in arrived)
            if root is not None:
                tokens = [token for rank, token in arrived.items() if rank != me]
                _wake.wake(root, tokens, _wake.GAVE_UP)
        record = {"missing": list(missing), "timeout": limit.total_seconds()}
        store.set(f"{base}/verdict", json.dumps(record))
    return jumped


def _read_verdict(store: Store, base: str, ranks: list[int], limit: timedelta) -> _Verdict:
    key = f"{base}/verdict"
    wait = min(limit.total_seconds(), _bounded.MAX_READ_WAIT)
    deadline = time.monotonic() + wait
    while not store.check([key]):
        if time.monotonic() >= deadline:
            # The rank that gave up first died before recording what it found: look
            # at the arrivals now.
            arrived = _arrivals(store, base)
            return _Verdict(tuple(rank for rank in ranks if rank not in arrived), limit)
        time.sleep(_MAX_POLL)
    record = json.loads(store.get(key))
    return _Verdict(tuple(record["missing"]), timedelta(seconds=record["timeout"]))


def _acknowledge(store: Store, base: str, waiting: int, limit: timedelta) -> None:
    # Each rank that raises says it has read the verdict, and stays until all of them
    # have (bounded): the rank whose process hosts the store (rank 0 of a hand-started
    # job) would otherwise take the store away, if it exits on the error, from ranks
    # that have yet to read it. The verdict is known by now, so losing the store here
    # changes nothing.
    read_key = f"{base}/read"
    deadline = time.monotonic() + min(limit.total_seconds(), _bounded.MAX_READ_WAIT)
    with contextlib.suppress(dist.DistError):
        done = store.add(read_key, 1)
        while done < waiting and time.monotonic() < deadline:
            time.sleep(_MAX_POLL)
            done = store.add(read_key, 0)


def barrier(timeout: timedelta | float, *, group: dist.ProcessGroup | None = None) -> None:
    """Wait for every process in the group, and name the ranks that do not come in time.

    The ranks meet in the default group's key-value store, not in a collective: each
    rank records its arrival at this barrier (barriers are numbered per group) and
    counts itself in. On a ``TCPStore`` (torchrun, a hand-started ``env://`` job, srun
    and mpirun through helios_pg) a rank that is not the last then blocks in one store
    request, on a connection of its own that only waits, until the last rank wakes it:
    a barrier costs four or five store requests per rank however long it waits (and
    four more on the group's first rank, which deletes the previous barrier's keys). That
    connection is opened in the background during a process's first barrier on the
    store, which polls the count, at most every 10 ms, as barriers on any other store
    do. Nothing runs on the backend,
    so it works alike on gloo and nccl, and a rank that never arrives leaves the group
    usable. The first rank whose timeout expires settles the outcome
    in the store: from then on no rank can find the count met, and that rank records
    exactly which ranks had not arrived. Every rank that had arrived raises with those
    same ranks, even one whose own timeout has not expired yet, once all of them have
    read them (a wait bounded by ``timeout`` and by 5 s): so a rank exiting on the
    error, such as the one whose process hosts the store, cannot take the store from
    the others before they know. A rank that arrives late, after the others gave up,
    passes at once, so the next barrier still meets. Without an initialized process
    group, or on a rank outside ``group``, it returns at once.

    Every rank must make the same sequence of ``barrier`` calls on a group.

    Args:
        timeout: How long to wait for the other ranks, as a ``timedelta`` or in
            seconds.
        group: Process group to synchronize; None selects the default group.

    Raises:
        BarrierTimeoutError: Some ranks had not arrived when the timeout of the first
            rank to give up expired; its ``missing_ranks`` lists their global ranks, and
            its ``timeout`` is that rank's timeout (a ``RuntimeError``).
        BarrierError: The store could not be reached, as when the process that hosts
            it (rank 0 of a hand-started job, or torchrun's agent) died, or stopped
            answering (its node's link down): then at the latest ``timeout`` plus twice
            ``min(timeout, 5 s)`` plus 2 s after the call (a ``RuntimeError``).
        CollectiveArgumentError: ``timeout`` is not positive and finite (a
            ``ValueError``, raised before anything is sent).
        TypeError: ``timeout`` is not a timedelta or number, or ``group`` is not a
            process group.

    Example::

        from helios_collectives import BarrierTimeoutError, barrier
        from helios_pg import process_group

        with process_group():
            try:
                barrier(timeout=60.0)
            except BarrierTimeoutError as exc:
                print(f"ranks {exc.missing_ranks} did not arrive within 60 s")
                raise
    """
    limit = as_timedelta(timeout)
    if not (_AVAILABLE and dist.is_initialized()):
        return
    group = require_group("barrier", group)
    me = dist.get_rank()
    ranks = global_ranks(group)
    if me not in ranks:
        # As torch's own collectives do for a rank outside the group.
        return
    deadline = time.monotonic() + limit.total_seconds()
    # torch offers no public accessor for the store behind the default group.
    store = dist.distributed_c10d._get_default_store()
    number = _barrier_state.BARRIERS.get(group, 0) + 1
    _barrier_state.BARRIERS[group] = number
    meet = partial(
        _meet, store, group, ranks=ranks, me=me, number=number, deadline=deadline, limit=limit
    )
    _bounded.bounded(meet, limit)


def _meet(
    store: Store,
    group: dist.ProcessGroup,
    alarm: _bounded.Alarm,
    *,
    ranks: list[int],
    me: int,
    number: int,
    deadline: float,
    limit: timedelta,
) -> None:
    """The barrier's store protocol (see :func:`barrier`)."""
    try:
        prefix = _barrier_state.session_prefix(store, group, len(ranks))
        base = f"{prefix}/{number}"
        root = _wake.tcp_root(store)
        pool = None if root is None else _barrier_state.pool(root)
        waiter = None if pool is None else pool.borrow(_bounded.backstop(limit))
        # A rank that will poll publishes no token: nobody sets a wake key for it.
        token = "" if waiter is None else f"{_barrier_state.group_token(group)}.{number}"
        arrived = _arrive(store, base, me, token)
        size = len(ranks)
        woken = None
        if pool is not None and waiter is not None and arrived >= size:
            pool.give_back(waiter)
        if arrived == size and root is not None:
            tokens = [t for rank, t in _arrivals(store, base).items() if rank != me]
            _wake.wake(root, tokens, _wake.MET)
        elif arrived < size:
            if root is not None and pool is not None and waiter is not None:
                woken = _sleep(root, pool, waiter, alarm, token)
            if woken == _wake.MET:
                arrived = size
            elif woken == _wake.GAVE_UP:
                arrived = store.add(f"{base}/count", 0)
            elif woken == _wake.TIMED_OUT:
                arrived = _give_up(store, base, ranks, limit, root=root, me=me)
            else:
                arrived = _poll(
                    store, base, ranks, deadline=deadline, limit=limit, root=root, me=me
                )
        if arrived >= _GAVE_UP:
            verdict = _read_verdict(store, base, ranks, limit)
            if root is not None and token:
                # The first rank to give up wakes the arrived ranks before it records
                # the verdict: a wake key set for this rank after it stopped waiting
                # (or before it waited at all) is there by now, and has no other reader.
                with contextlib.suppress(dist.DistError):
                    root.delete_key(_wake.wake_key(token))
            if me in verdict.missing:
                # This rank came after the others gave up: it passes, so the next
                # barrier still meets.
                return
            if verdict.missing:
                _acknowledge(store, base, size - len(verdict.missing), limit)
                raise _timeout_error(verdict, size, number, group)
        if number > 1 and me == ranks[0]:
            # Every rank has counted itself into this barrier, so every rank has left
            # the previous one: its keys can go and the store stays small.
            for name in ("arrivals", "count", "verdict", "read"):
                store.delete_key(f"{prefix}/{number - 1}/{name}")
    except dist.DistError as exc:  # DistStoreError, DistNetworkError: the store is gone
        message = (
            "barrier: the rendezvous store is unreachable (the process that hosts it, rank 0 "
            f"of a hand-started job or torchrun's agent, may have died): {exc}"
        )
        raise BarrierError(message) from exc


def _sleep(
    root: TCPStore, pool: _wake.Pool, waiter: _wake.Waiter, alarm: _bounded.Alarm, token: str
) -> str | None:
    """Block until this rank's wake key is set; its value, or None to poll instead.

    None when the wait failed: the caller then polls the count on the group's own
    connection, which also reports a store that is gone.
    """
    own = _wake.Alarm(root)
    own.arm(token)
    if not alarm.attach(own):
        own.ring()  # the timeout expired before this rank could wait
    try:
        value = waiter.wait_for(token)
    except (dist.DistError, RuntimeError):
        own.disarm()
        return None
    own.disarm()
    pool.give_back(waiter)
    return value


def _poll(
    store: Store,
    base: str,
    ranks: list[int],
    *,
    deadline: float,
    limit: timedelta,
    root: TCPStore | None,
    me: int,
) -> int:
    """Poll the arrival count until it is met or the deadline passes; the last count."""
    # Poll rather than store.wait() on the group's own connection: a wait that times
    # out there could leave it unusable for the next barrier.
    count_key = f"{base}/count"
    delay = 0.0002
    arrived = store.add(count_key, 0)
    while arrived < len(ranks):
        left = deadline - time.monotonic()
        if left <= 0:
            return _give_up(store, base, ranks, limit, root=root, me=me)
        time.sleep(min(delay, left))
        delay = min(delay * 2, _MAX_POLL)
        arrived = store.add(count_key, 0)
    return arrived


def _timeout_error(
    verdict: _Verdict, size: int, number: int, group: dist.ProcessGroup
) -> BarrierTimeoutError:
    missing = verdict.missing
    label = "rank" if len(missing) == 1 else "ranks"
    message = (
        f"barrier: {label} {', '.join(str(r) for r in missing)} of {size} did not arrive "
        f"within {verdict.timeout.total_seconds():g} s (barrier #{number} on group "
        f"{group.group_name!r}); check that every rank reaches this barrier, or raise the "
        "timeout"
    )
    return BarrierTimeoutError(message, missing_ranks=missing, timeout=verdict.timeout)
