"""The ledger of failures: the store's order decides, and a withdrawn entry names no one."""

from __future__ import annotations

import threading
import time

from torch._C._distributed_c10d import HashStore

from helios_pg._reports._ledger import Ledger


def ledger() -> Ledger:
    return Ledger(HashStore(), "job/failed")


def test_the_first_entry_published_is_the_culprit() -> None:
    failures = ledger()
    failures.publish(rank=2, line="rank 2 on a failed: TypeError: x", timestamp=50, kind="own")
    failures.publish(rank=1, line="rank 1 on a failed: ValueError: y", timestamp=40, kind="own")

    first = failures.first(0)

    assert first is not None
    assert (first.rank, first.number) == (2, 1)  # the store's order, not the clock's
    assert first.first_line() == "rank 2 on a failed first: TypeError: x"
    assert first.later(49) == 51


def test_a_withdrawn_hang_names_no_one() -> None:
    failures = ledger()
    hang = failures.publish(rank=1, line="rank 1 on a failed: hang: ...", timestamp=9, kind="hang")
    failures.withdraw(hang)
    assert failures.first(0) is None

    failures.publish(rank=2, line="rank 2 on a failed: ValueError: z", timestamp=20, kind="own")
    first = failures.first(0)
    assert first is not None
    assert first.rank == 2


def test_a_hang_that_no_rank_answered_for_dates_later_failures_well_after() -> None:
    failures = ledger()
    failures.publish(
        rank=1, line="rank 1 on a failed: hang: ...", timestamp=9, kind="hang", answered=False
    )
    first = failures.first(0)
    assert first is not None
    assert first.later(9) > 10 + 5  # torchrun dates the silent rank when it stops it


def test_an_entry_numbered_but_not_yet_written_is_waited_for() -> None:
    failures = ledger()
    failures.store.add("job/failed/count", 1)  # another rank took number 1 ...

    def write_it() -> None:
        time.sleep(0.2)
        failures.store.set("job/failed/1", '{"rank": 3, "line": "l", "timestamp": 1}')

    writer = threading.Thread(target=write_it)
    writer.start()
    failures.publish(rank=0, line="rank 0 on a failed: E", timestamp=2, kind="own")
    first = failures.first(5)
    writer.join()

    assert first is not None
    assert first.rank == 3  # ... and is first, though its text came later
    assert failures.first(0) is not None
    assert ledger().first(0.05) is None  # nothing published: nobody is named


def test_an_entry_never_written_is_passed_over_once_the_wait_is_over() -> None:
    failures = ledger()
    failures.store.add("job/failed/count", 1)  # a rank took number 1, then died
    failures.publish(rank=2, line="rank 2 on a failed: E", timestamp=2, kind="own")

    first = failures.first(0.2)

    assert first is not None
    assert first.rank == 2


def test_a_thread_that_died_names_the_culprit_only_where_nothing_else_stands() -> None:
    failures = ledger()
    line = "rank 3 on a failed: OSError: x (in thread loader)"
    failures.publish(rank=3, line=line, timestamp=1, kind="thread")
    alone = failures.first(0.05)
    assert alone is not None
    assert alone.rank == 3

    failures.publish(rank=1, line="rank 1 on a failed: ValueError: y", timestamp=9, kind="own")
    first = failures.first(0.05)
    assert first is not None
    assert first.rank == 1  # the rank whose own code failed, though published later


def test_a_thread_that_died_first_explains_its_own_rank_failure() -> None:
    failures = ledger()
    line = "rank 1 on a failed: RuntimeError: x (in thread loader)"
    failures.publish(rank=1, line=line, timestamp=1, kind="thread")
    failures.publish(rank=1, line="rank 1 on a failed: SystemExit: 3", timestamp=2, kind="own")

    first = failures.first(0.05)

    assert first is not None
    assert (first.rank, first.kind) == (1, "thread")


def test_a_rank_that_left_is_named_after_hangs_and_before_threads() -> None:
    failures = ledger()
    failures.publish(
        rank=0, line="rank 0 on a failed: OSError: x (in thread m)", timestamp=1, kind="thread"
    )
    left = "rank 2 on b left the job early: it shut down its process group, without an error"
    failures.publish(rank=2, line=left, timestamp=2, kind="exit")
    first = failures.first(0)
    assert first is not None
    assert (first.rank, first.kind, first.first_line()) == (2, "exit", left)  # as it reads
    hang = failures.publish(rank=1, line="rank 1 on a failed: hang: ...", timestamp=3, kind="hang")
    named = failures.first(0)
    assert named is not None
    assert named.rank == 1  # a hang standing outranks it
    failures.withdraw(hang)
    failures.publish(rank=1, line="rank 1 on a failed: ValueError: y", timestamp=4, kind="own")
    own = failures.first(0)
    assert own is not None
    assert own.kind == "own"  # a rank's own failure outranks everything


def test_a_thread_of_the_rank_that_left_explains_why_it_left() -> None:
    failures = ledger()
    failures.publish(
        rank=2, line="rank 2 on b failed: OSError: x (in thread loader)", timestamp=1, kind="thread"
    )
    failures.publish(rank=2, line="rank 2 on b left the job early: ...", timestamp=2, kind="exit")
    first = failures.first(0)
    assert first is not None
    assert (first.rank, first.kind) == (2, "thread")
