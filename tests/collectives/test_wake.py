"""The barrier's blocking waits on a real ``TCPStore``, one step at a time, in one process.

The multi-rank behaviour (a barrier's store requests stay the same however long its
ranks wait) is checked on real ranks in tests/integration/test_reliability.py.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from torch._C._distributed_c10d import TCPStore

from helios_collectives import _barrier, _bounded, _wake

BASE = "b/1"
RANKS = [0, 1, 2]
LIMIT = timedelta(seconds=2)


@pytest.fixture
def root() -> Iterator[TCPStore]:
    server = TCPStore("127.0.0.1", 0, None, True, timeout=LIMIT, wait_for_workers=False)
    yield server
    del server


def test_the_store_under_a_prefix_is_found_and_other_stores_have_none(root: TCPStore) -> None:
    from torch._C._distributed_c10d import HashStore, PrefixStore

    wrapped = PrefixStore("x", PrefixStore("y", root))
    found = _wake.tcp_root(wrapped)
    assert found is not None
    assert (found.host, found.port) == (root.host, root.port)
    assert _wake.tcp_root(HashStore()) is None


def test_the_first_rank_to_give_up_wakes_the_arrived_ranks_but_not_itself(
    root: TCPStore,
) -> None:
    _barrier._arrive(root, BASE, 0, "t0")
    _barrier._arrive(root, BASE, 2, "t2")
    _barrier._give_up(root, BASE, RANKS, LIMIT, root=root, me=0)
    assert bytes(root.get(_wake.wake_key("t2"))).decode() == _wake.GAVE_UP
    assert not root.check([_wake.wake_key("t0")])
    assert _barrier._read_verdict(root, BASE, RANKS, LIMIT).missing == (1,)


def test_a_rank_that_polls_publishes_no_token_and_is_never_woken(root: TCPStore) -> None:
    _barrier._arrive(root, BASE, 0, "t0")
    _barrier._arrive(root, BASE, 1, "")  # no waiting connection yet: it polls
    assert _barrier._arrivals(root, BASE) == {0: "t0", 1: ""}
    _barrier._give_up(root, BASE, RANKS, LIMIT, root=root, me=0)
    assert not root.check([_wake.wake_key("")])


def test_a_waiter_returns_the_value_and_deletes_its_last_key_before_the_next_wait(
    root: TCPStore,
) -> None:
    waiter = _wake.Waiter(_wake.open_waiter(root.host, root.port, LIMIT))
    threading.Timer(0.2, root.set, (_wake.wake_key("a"), _wake.MET)).start()
    start = time.monotonic()
    assert waiter.wait_for("a") == _wake.MET
    assert time.monotonic() - start >= 0.15  # it blocked until the key was set
    root.set(_wake.wake_key("b"), _wake.GAVE_UP)
    assert waiter.wait_for("b") == _wake.GAVE_UP
    assert not root.check([_wake.wake_key("a")])  # at most one key left behind


def test_the_alarm_sets_the_key_only_while_armed(root: TCPStore) -> None:
    alarm = _wake.Alarm(root)
    alarm.ring()  # not armed: nothing
    alarm.arm("x")
    alarm.disarm()
    alarm.ring()
    assert not root.check([_wake.wake_key("x")])
    alarm.arm("x")
    alarm.ring()
    assert bytes(root.get(_wake.wake_key("x"))).decode() == _wake.TIMED_OUT


def test_the_callers_alarm_rung_before_the_wait_rings_the_protocols_at_once(
    root: TCPStore,
) -> None:
    caller = _bounded.Alarm()
    caller.ring()  # the timeout expired while the protocol was still arriving
    own = _wake.Alarm(root)
    own.arm("late")
    assert not caller.attach(own)


def test_the_pool_opens_in_the_background_and_never_hands_a_parents_connection_to_a_child(
    root: TCPStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = _wake.Pool(root)
    assert pool.borrow(LIMIT) is None  # the first barrier polls while it opens
    deadline = time.monotonic() + 30
    while not pool.idle():
        assert time.monotonic() < deadline, "the waiting connection never opened"
        time.sleep(0.01)
    waiter = pool.borrow(LIMIT)
    assert waiter is not None
    pool.give_back(waiter)
    parent = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: parent + 1)  # as in a forked child
    assert pool.borrow(LIMIT) is None  # it opens one of its own
    while not pool.idle():  # before the fixture stops the server
        assert time.monotonic() < deadline, "the child's waiting connection never opened"
        time.sleep(0.01)
