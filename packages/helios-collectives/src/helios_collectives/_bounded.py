"""The bound on barrier's store protocol: a daemon thread, an alarm at the timeout, a backstop.

A store request to a host that is unreachable or stopped can block past any timeout
the store was given. :func:`bounded` runs the protocol in a daemon thread and reports
the store as gone once :func:`backstop` has passed; at the rank's timeout the calling
thread rings the protocol's :class:`Alarm`, which ends its blocking wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

from helios_collectives import _wake
from helios_collectives._errors import BarrierError

__all__ = ["MAX_READ_WAIT", "Alarm", "backstop", "bounded"]

MAX_READ_WAIT = 5.0  # seconds a rank that timed out waits for the others to read why
_STORE_GRACE = 2.0  # seconds past the protocol's own bound before the store counts as gone


def bounded(meet: Callable[[Alarm], None], limit: timedelta) -> None:
    """Run the barrier's store protocol, giving up when the store stops answering.

    A store request to a host that is unreachable (its link down) or stopped can block
    past any timeout the store was given: the protocol runs in a daemon thread, and
    this rank raises once the protocol's own bound has passed. At this rank's timeout
    the calling thread rings the protocol's alarm, which ends its blocking wait.
    """
    outcome: list[BaseException | None] = []
    alarm = Alarm()

    def run() -> None:
        try:
            meet(alarm)
        except BaseException as exc:  # re-raised in the caller's thread
            outcome.append(exc)
        else:
            outcome.append(None)

    start = time.monotonic()
    worker = threading.Thread(target=run, name="helios-barrier", daemon=True)
    worker.start()
    seconds = limit.total_seconds()
    worker.join(seconds)
    if worker.is_alive():
        # From a thread of its own, never waited for: the ring is a store request on the
        # group's connection, which another thread of the program may be holding.
        threading.Thread(target=alarm.ring, name="helios-barrier-alarm", daemon=True).start()
    # The protocol waits up to its timeout, then up to min(timeout, 5 s) twice.
    bound = backstop(limit).total_seconds()
    worker.join(max(0.0, start + bound - time.monotonic()))
    if not outcome:
        message = (
            f"barrier: the rendezvous store did not answer within {bound:g} s; the host that "
            "serves it (rank 0 of a hand-started job, or torchrun's agent) is unreachable or "
            "stopped"
        )
        raise BarrierError(message)
    if outcome[0] is not None:
        raise outcome[0]


class Alarm:
    """The caller's side of a waiting rank's alarm: rings one once the protocol arms it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._alarm: _wake.Alarm | None = None
        self._rung = False

    def attach(self, alarm: _wake.Alarm) -> bool:
        """Hand over the protocol's alarm; False when the timeout has already expired."""
        with self._lock:
            self._alarm = alarm
            return not self._rung

    def ring(self) -> None:
        with self._lock:
            self._rung = True
            alarm = self._alarm
        if alarm is not None:
            alarm.ring()


def backstop(limit: timedelta) -> timedelta:
    # How long a blocking wait may last: only a backstop, since this rank's alarm sets
    # its key at the deadline; past it the barrier reports the store as gone anyway.
    seconds = limit.total_seconds()
    return timedelta(seconds=seconds + 2 * min(seconds, MAX_READ_WAIT) + _STORE_GRACE)
