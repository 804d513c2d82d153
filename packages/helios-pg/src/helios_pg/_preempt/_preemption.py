"""Stop every rank after the same step when the job is told to stop, then requeue it once.

:func:`preemption` installs signal handlers that only set a flag, chaining whatever
handler was installed before (submitit's, Lightning's) and restoring it on
:meth:`Preemption.close` or ``shutdown()``. :meth:`Preemption.should_stop` is a
collective over the default group: every rank gets the same answer, true from the first
call after any rank received a signal, also when only one rank did, for one
one-element all-reduce per call. :meth:`Preemption.requeue`, after the checkpoint, waits
for every rank, then rank 0 puts the job back in the queue (:mod:`helios_pg._preempt._requeue`)
and every rank returns the same :class:`~helios_pg._preempt._requeue.Requeue`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

from helios_pg._preempt._requeue import Requeue, decide_requeue, requeue_job
from helios_pg._signals import signal_from

__all__ = ["Preemption", "close_all", "preemption"]

DEFAULT_SIGNALS = ("SIGUSR1", "SIGTERM")
"""SLURM's warning before the time limit (``--signal=USR1@120``) and a stop's signal."""
_active: list[Preemption] = []
Handler = Callable[[int, FrameType | None], Any]


class Preemption:
    """The stop signals of this process, and the collectives that agree on them.

    Made by :func:`preemption`; see there.
    """

    def __init__(self, numbers: Sequence[int]) -> None:
        self.signals = tuple(numbers)
        self.received: int | None = None
        """The first stop signal this process received, if any."""
        self.closed = False
        self._stopping = False
        self._previous: dict[int, Any] = {}
        self._flag: Any = None
        for number in self.signals:
            previous = signal.getsignal(number)
            try:
                signal.signal(number, self._handle)
            except (OSError, ValueError) as exc:
                self.close()
                name = signal.Signals(number).name
                message = f"preemption(signals=...): {name} cannot be caught ({exc}); leave it out"
                raise ValueError(message) from None
            self._previous[number] = previous

    def _handle(self, number: int, frame: FrameType | None) -> None:
        if not self.closed and self.received is None:
            self.received = number
        previous = self._previous.get(number)
        if callable(previous):
            previous(number, frame)  # another library's handler still runs
        elif self.closed and previous in (None, signal.SIG_DFL):
            # Closed while another handler sat on top of this one: act as if this one
            # had never been installed, which is the default action.
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)

    def _exchange(self, value: int) -> int:
        """The largest ``value`` over the default group's ranks (one all-reduce)."""
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return value
        if self._flag is None:
            device = torch.device("cpu")
            if "nccl" in str(dist.get_backend()).lower():
                device = torch.device("cuda", torch.cuda.current_device())
            self._flag = torch.zeros(1, dtype=torch.int32, device=device)
        self._flag.fill_(value)
        dist.all_reduce(self._flag, op=dist.ReduceOp.MAX)
        return int(self._flag.item())

    def should_stop(self) -> bool:
        """Whether the job stops now: the same answer on every rank.

        A collective over the default group: every rank calls it at the same points of
        the loop (every step, or every k steps). True from the first call after any rank
        received a stop signal, on every rank, and from then on without communicating.
        Without a group (one process), whether this process received one.

        Returns:
            True when every rank is to stop after this step.
        """
        if not self._stopping:
            self._stopping = bool(self._exchange(int(self.received is not None)))
        return self._stopping

    def requeue(self, *, timeout: float = 60.0) -> Requeue:
        """Put the job back in the queue, once every rank has reached this call.

        Call it on every rank after the checkpoint is written. Rank 0 requeues: under
        SLURM, ``scontrol requeue`` of the job (``JOBID_TASKID`` for an array task);
        under torchrun alone, nothing (the operator restarts the job: exit cleanly);
        otherwise, or where ``scontrol`` is missing or fails, a marker file and an exit
        status the batch script tests. Every rank returns the same outcome.

        Args:
            timeout: Seconds ``scontrol`` may take.

        Returns:
            What was done, and the exit status to end the program with.
        """
        self._exchange(0)  # every rank has its checkpoint written
        import torch.distributed as dist

        first = not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
        plan = decide_requeue()
        if not first:
            return plan.with_code(self._exchange(0))  # what rank 0 did
        outcome = requeue_job(plan, timeout=timeout)
        self._exchange(outcome.code)
        return outcome

    def close(self) -> None:
        """Put back the handlers that were installed before; safe to call twice.

        Where another handler was installed on top of this one since, it stays, and
        this one only passes each signal on to the handler it replaced.
        """
        if self.closed:
            return
        self.closed = True
        if threading.current_thread() is threading.main_thread():
            for number, replaced in self._previous.items():
                # A watcher closed earlier below this one goes too: its handler passes on.
                previous = replaced
                while isinstance(getattr(previous, "__self__", None), Preemption):
                    below: Preemption = previous.__self__
                    if not below.closed:
                        break
                    previous = below._previous.get(number)
                with contextlib.suppress(ValueError, TypeError, OSError):
                    if signal.getsignal(number) == self._handle:
                        signal.signal(number, previous if previous is not None else signal.SIG_DFL)
        with contextlib.suppress(ValueError):
            _active.remove(self)

    def __enter__(self) -> Preemption:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def preemption(signals: Sequence[str | int] = DEFAULT_SIGNALS) -> Preemption:
    """Watch for the signals that stop a job, until ``close()`` or ``shutdown()``.

    The handlers only set a flag, and call the handler installed before them where it
    is a Python function. Call it in the main thread (Python runs signal handlers
    there), before or after ``init()``.

    Args:
        signals: Names (``"SIGUSR1"``, ``"USR1"``) or numbers of the signals to watch.

    Returns:
        The watcher: ``should_stop()`` in the loop, ``requeue()`` after the checkpoint.

    Raises:
        ValueError: A name or number that is no signal.
        RuntimeError: Called outside the main thread.

    Example::

        import torch
        import torch.distributed as dist
        from helios_pg import preemption, process_group

        with process_group() as info, preemption() as stop:
            for step in range(100):
                dist.all_reduce(torch.ones(1))  # a training step
                if stop.should_stop():  # the same answer on every rank
                    print(f"rank {info.rank} stops after step {step}")
                    raise SystemExit(stop.requeue().exit_status)
    """
    if isinstance(signals, str | int):
        signals = (signals,)
    numbers = [signal_from(value, "preemption(signals=...)") for value in signals]
    if threading.current_thread() is not threading.main_thread():
        message = (
            "preemption() must be called in the main thread, where Python runs signal "
            f"handlers, not in {threading.current_thread().name!r}; call it before "
            "starting the training threads"
        )
        raise RuntimeError(message)
    watcher = Preemption(list(dict.fromkeys(numbers)))
    _active.append(watcher)
    return watcher


def close_all() -> None:
    """Close every watcher still installed, the newest first (``shutdown()`` does)."""
    for watcher in reversed(list(_active)):
        watcher.close()
