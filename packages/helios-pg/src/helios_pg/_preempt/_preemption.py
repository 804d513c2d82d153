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
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

from helios_pg._errors import PreemptionError
from helios_pg._preempt._cause import StopCause, read_cause
from helios_pg._preempt._grace import Grace, find_grace, grace_from, variable_grace
from helios_pg._preempt._requeue import Requeue, decide_requeue, marker_consumed, requeue_job
from helios_pg._preempt._shield import install
from helios_pg._reports import named_hung
from helios_pg._signals import signal_from

__all__ = ["Preemption", "close_all", "preemption", "refuse_without_group"]

_MARK = 0x5A_5A5A_5A5A
"""Added to every value a rank sends in the agreement, so that a word from another
collective reads as something else; small enough that a million ranks' sum fits int64."""
_LIMIT = 1 << 16
"""Values are a flag or an exit status: anything at or above this came from elsewhere."""
DEFAULT_SIGNALS = ("SIGUSR1", "SIGTERM")
"""SLURM's warning before the time limit (``--signal=USR1@120``) and a stop's signal."""
_CAUSE_TIMEOUT = 10.0
"""Seconds rank 0's ``scontrol show job`` may take in ``requeue()``, out of the grace."""
_active: list[Preemption] = []
Handler = Callable[[int, FrameType | None], Any]


class Preemption:
    """The stop signals of this process, and the collectives that agree on them.

    Made by :func:`preemption`; see there.
    """

    def __init__(
        self, numbers: Sequence[int], *, shield_workers: bool = True, grace: Grace | None = None
    ) -> None:
        self.signals = tuple(numbers)
        self.shield_workers = shield_workers
        """Whether DataLoader workers started while it is open block its signals."""
        self._grace = grace
        self._cause: StopCause | None = None
        self.received: int | None = None
        """The first stop signal this process received, if any."""
        self.received_at: float | None = None
        """When it came, in :func:`time.monotonic` seconds."""
        self.last_save: float | None = None
        """Seconds the last :meth:`saving` block took."""
        self._warned = False
        self.closed = False
        self._stopping = False
        self._previous: dict[int, Any] = {}
        self._flag: Any = None
        self._world = 1
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
        stuck = named_hung()  # it would never look at the flag: the signal must end it
        if not self.closed and self.received is None and not stuck:
            self.received, self.received_at = number, time.monotonic()
        previous = self._previous.get(number)
        if callable(previous):
            previous(number, frame)  # another library's handler still runs
        elif (stuck or self.closed) and previous in (None, signal.SIG_DFL):
            # Named hung by the roll call, or closed while another handler sat on top
            # of this one: act as if this one had never been installed, which is the
            # default action.
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)

    def _exchange(self, value: int, call: str) -> int:
        """The sum of ``value`` over the default group's ranks (one all-reduce).

        Each rank sends ``_MARK + value`` in one int64: the sum is the group's size times
        ``_MARK`` plus the values' sum. Where another rank made another collective at
        that moment, the sum falls outside that range (with overwhelming likelihood), and
        every rank that gets it raises instead of answering.
        """
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            _refuse_without_group(call)
            return value
        if self._flag is None:
            device = torch.device("cpu")
            if "nccl" in str(dist.get_backend()).lower():
                device = torch.device("cuda", torch.cuda.current_device())
            self._flag = torch.zeros(1, dtype=torch.int64, device=device)
            self._world = dist.get_world_size()
        self._flag.fill_(_MARK + value)
        dist.all_reduce(self._flag)
        total = int(self._flag.item())
        values = total - self._world * _MARK
        if not 0 <= values < self._world * _LIMIT:
            message = (
                f"Preemption.{call}() met another collective on some rank (it got back "
                f"{total:#x}, not {self._world} marked words), so it cannot answer: every "
                f"rank must call {call}() at the same points of the loop, between the same "
                "collectives (not under `if rank == 0`, not in a loop with another number "
                "of steps on some ranks)"
            )
            raise PreemptionError(message)
        return values

    def should_stop(self) -> bool:
        """Whether the job stops now: the same answer on every rank.

        A collective over the default group: every rank calls it at the same points of
        the loop (every step, or every k steps). True from the first call after any rank
        received a stop signal, on every rank, and from then on without communicating.
        Without a group (one process), whether this process received one.

        Returns:
            True when every rank is to stop after this step.

        Raises:
            PreemptionError: The launcher started several ranks but no process group
                exists (call ``helios_pg.init()`` first), or the call met another
                collective on some rank (call it at the same points on every rank).
        """
        if not self._stopping:
            self._stopping = bool(self._exchange(int(self.received is not None), "should_stop"))
        return self._stopping

    def requeue(self, *, timeout: float = 60.0, max_requeues: int | None = None) -> Requeue:
        """Put the job back in the queue, once every rank has reached this call.

        Call it on every rank after the checkpoint is written. Rank 0 asks why the job
        stops (:meth:`cause`), then requeues: under SLURM, ``scontrol requeue`` of the
        job (``JOBID_TASKID`` for an array task), or nothing where SLURM has requeued it
        itself (a preemption; the cap below cannot undo that) or is cancelling it
        (``scancel``); under torchrun alone, nothing (the operator restarts the job:
        exit cleanly); otherwise, or where ``scontrol`` is missing or fails, a marker
        file and an exit status the batch script tests. Every rank returns the same
        outcome.

        Args:
            timeout: Seconds ``scontrol`` may take.
            max_requeues: How many times the job may be requeued: once its attempt
                (``info.attempt``, the same on every rank after ``init()``) has reached
                it, nothing is requeued and the outcome says so (``how == "limit"``,
                exit status 1). None: no limit.

        Returns:
            What was done, and the exit status to end the program with.

        Raises:
            PreemptionError: As :meth:`should_stop`.
            ValueError: ``max_requeues`` is not a non-negative integer.
        """
        given: object = max_requeues
        if given is not None and (
            not isinstance(given, int) or isinstance(given, bool) or given < 0
        ):
            message = (
                f"requeue(max_requeues={max_requeues!r}): give how many times the job may "
                "be requeued, an integer >= 0, or None for no limit"
            )
            raise ValueError(message)
        self._exchange(0, "requeue")  # every rank has its checkpoint written
        import torch.distributed as dist

        from helios_env import get_dist_info

        first = not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
        attempt = get_dist_info().attempt
        if not first:
            plan = decide_requeue(attempt=attempt, max_requeues=max_requeues)
            return plan.with_code(self._exchange(0, "requeue"))  # what rank 0 did
        cause = self._ask_cause(min(timeout, _CAUSE_TIMEOUT), keep=True)
        plan = decide_requeue(attempt=attempt, max_requeues=max_requeues, cause=cause)
        outcome = requeue_job(plan, timeout=timeout, attempt=attempt)
        self._exchange(outcome.code, "requeue")
        return outcome

    def cause(self, *, timeout: float = 10.0) -> StopCause:
        """Why the job is being stopped, as far as the launcher says; asked once.

        Under SLURM, one ``scontrol show job`` tells its time limit, a preemption, a
        cancellation and a signal while the job runs apart (with the time left before
        the time limit); elsewhere the signal is all there is. No collective, and each
        rank asks for itself: on rank 0, :meth:`requeue` asks and follows the answer,
        and once it has requeued the job another rank may read ``"requeued"``. Never
        branch a collective call on it; to act on it, broadcast rank 0's.

        Args:
            timeout: Seconds ``scontrol`` may take.

        Returns:
            The cause; once the job stops, the same object on later calls.
        """
        return self._ask_cause(timeout, keep=self.received is not None or self._stopping)

    def _ask_cause(self, timeout: float, *, keep: bool) -> StopCause:
        if self._cause is not None:
            return self._cause
        if self.received is not None:
            said = signal.Signals(self.received).name
        elif self._stopping:
            said = "a stop (another rank's signal)"
        else:
            said = "a stop without a signal"
        cause = read_cause(said, timeout=timeout)
        if keep:
            self._cause = cause  # what SLURM says changes no more once the job stops
        return cause

    @property
    def grace(self) -> Grace:
        """Seconds from the stop signal to SIGKILL, and who says so.

        ``preemption(grace=...)``, else ``HELIOS_PREEMPTION_GRACE``, else the launcher's,
        found the first time it is asked for (SLURM's with ``scontrol show config``).
        """
        if self._grace is None:
            self._grace = find_grace(None)
        return self._grace

    @property
    def deadline(self) -> float | None:
        """When the launcher kills this process at the earliest, in :func:`time.monotonic` s.

        Counted from this process's first stop signal: None before it (also on a rank
        that received none while ``should_stop()`` says True), or where no launcher says
        its grace (:attr:`grace`; ``preemption(grace=...)`` or
        ``HELIOS_PREEMPTION_GRACE`` then). Never branch a collective call on it.
        """
        if self.received_at is None or self.grace.seconds is None:
            return None
        return self.received_at + self.grace.seconds

    def time_left(self) -> float | None:
        """Seconds left before the launcher kills this process (see :attr:`deadline`)."""
        deadline = self.deadline
        return None if deadline is None else deadline - time.monotonic()

    @contextlib.contextmanager
    def saving(self) -> Iterator[None]:
        """Time the checkpoint written inside, and warn once if it outlasts the grace.

        A save that takes longer than the launcher waits between its stop signal and
        SIGKILL cannot finish after a stop: the warning comes at the first such save,
        during training, before it matters, from global rank 0 (one line per job).
        The time is :attr:`last_save`, on every rank.

        Example::

            import torch
            from helios_pg import preemption

            with preemption(grace=30) as stop:
                with stop.saving():
                    torch.save({"step": 1}, "/tmp/helios-example-checkpoint.pt")
                print(f"the save took {stop.last_save:.3f} s of {stop.grace.seconds:g}")
        """
        started = time.monotonic()
        try:
            yield
        finally:
            self.last_save = time.monotonic() - started
            self._warn_slow_save(self.last_save)

    def _warn_slow_save(self, took: float) -> None:
        if self._warned or self.grace.seconds is None or took <= self.grace.seconds:
            return
        self._warned = True
        from helios_env import get_dist_info

        if get_dist_info().rank != 0:
            return  # one line for the job, not one per rank
        message = (
            f"helios preemption: the last checkpoint took {took:.1f} s, but "
            f"{self.grace.source}: a save after a stop signal would be killed before it "
            "ends. Save less or faster (torch.distributed.checkpoint's async_save, a "
            "sharded state), or give the job more time and say so (preemption(grace=...) "
            "or HELIOS_PREEMPTION_GRACE)\n"
        )
        sys.stderr.write(message)
        sys.stderr.flush()

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


def refuse_without_group(call: str, risk: str) -> None:
    """Raise where the launcher started several ranks but no process group exists.

    Args:
        call: What was called (``"Preemption.should_stop()"``), for the message.
        risk: What would go wrong if each rank went on alone.

    Raises:
        PreemptionError: Several ranks, no group.
    """
    from helios_env import get_dist_info

    info = get_dist_info()
    if info.world_size > 1:
        message = (
            f"{call} needs the process group: the launcher started {info.world_size} "
            f"ranks (this is rank {info.rank}), but none is initialized, so {risk}; "
            "call helios_pg.init() first (and shutdown() after the loop)"
        )
        raise PreemptionError(message)


def _refuse_without_group(call: str) -> None:
    refuse_without_group(
        f"Preemption.{call}()",
        "each rank would answer for itself and one could stop while the others train on",
    )


def preemption(
    signals: Sequence[str | int] = DEFAULT_SIGNALS,
    *,
    shield_workers: bool = True,
    grace: float | None = None,
) -> Preemption:
    """Watch for the signals that stop a job, until ``close()`` or ``shutdown()``.

    The handlers only set a flag, and call the handler installed before them where it
    is a Python function. Call it in the main thread (Python runs signal handlers
    there), before or after ``init()``, and before the first DataLoader with workers
    is iterated.

    A cluster signals every process of the job at once, DataLoader workers included,
    which die of it. While the watcher is open, the workers of every DataLoader
    iterated (``fork``, ``spawn`` and ``forkserver`` alike) start with the watched
    signals blocked: they serve batches until the loop stops and the iterator ends
    them. A worker that still cannot block them (forked by a forkserver started before
    this call) is named on stderr.

    Args:
        signals: Names (``"SIGUSR1"``, ``"USR1"``) or numbers of the signals to watch.
        shield_workers: False to leave DataLoader workers as torch starts them.
        grace: Seconds the job has between the stop signal and SIGKILL, where the
            launcher does not say it or says it wrong; else ``HELIOS_PREEMPTION_GRACE``,
            else the launcher's (SLURM's ``KillWait``, torchrun's 30 s, Kubernetes' 30 s
            default). See :attr:`Preemption.grace`, :meth:`Preemption.time_left` and
            :meth:`Preemption.saving`.

    Returns:
        The watcher: ``should_stop()`` in the loop, ``requeue()`` after the checkpoint.

    Raises:
        ValueError: A name or number that is no signal, or a grace (argument or
            ``HELIOS_PREEMPTION_GRACE``) that is not a positive number of seconds.
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
    # The argument and the variable are checked now; the launcher's is found when needed.
    given = variable_grace()
    if grace is not None:
        seconds = grace_from(grace, "grace")
        given = Grace(seconds, f"preemption(grace={seconds:g})")
    watcher = Preemption(list(dict.fromkeys(numbers)), shield_workers=shield_workers, grace=given)
    _active.append(watcher)
    _one_process_started()
    if shield_workers:
        install(_shielded_signals)
    return watcher


def _one_process_started() -> None:
    """A program of one process without ``init()``: its run has started, the marker goes."""
    import torch.distributed as dist

    from helios_env import get_dist_info

    if dist.is_available() and dist.is_initialized():
        return  # init() has removed it
    if get_dist_info().world_size == 1:
        marker_consumed(0)


def _shielded_signals() -> frozenset[int]:
    """The signals of the open watchers that shield DataLoader workers."""
    return frozenset(
        number
        for watcher in _active
        if watcher.shield_workers and not watcher.closed
        for number in watcher.signals
    )


def close_all() -> None:
    """Close every watcher still installed, the newest first (``shutdown()`` does)."""
    for watcher in reversed(list(_active)):
        watcher.close()
