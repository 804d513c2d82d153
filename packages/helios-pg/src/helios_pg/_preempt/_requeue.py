"""Put a job back in the queue, or say plainly how the batch script should.

Rank 0 does it, once every rank has saved (``Preemption.requeue``):

- under SLURM with ``scontrol`` on ``PATH``: ``scontrol requeue JOB``, where ``JOB`` is
  ``SLURM_ARRAY_JOB_ID_SLURM_ARRAY_TASK_ID`` for an array task and ``SLURM_JOB_ID``
  otherwise (the job must be submitted with ``--requeue``). SLURM then stops the
  job's processes and queues it again; the program exits with status 0;
- under torchrun without SLURM: nothing to call. The documented end is a clean exit
  (status 0), after which the operator that runs the job (Kubernetes' controller, say)
  starts it again;
- otherwise, and where ``scontrol`` is missing or fails: rank 0 writes a marker file
  (``HELIOS_REQUEUE_FILE``, by default ``helios-requeue-NAME`` in the working
  directory, ``NAME`` being SLURM's job name, else ``job``) that records this run's
  attempt, and the program is to exit with :data:`EXIT_REQUEUE` (75, ``EX_TEMPFAIL``),
  which the batch script tests to resubmit itself; the run it starts counts the next
  attempt and removes the marker (:mod:`helios_env`, ``helios_pg.init()``). Never a
  silent no-op: rank 0 prints what it did, or why it could not.

Where SLURM says why the job stops (:mod:`helios_pg._preempt._cause`), rank 0 follows it:
a job SLURM has requeued itself (a preemption in ``PreemptMode=REQUEUE``) is not requeued
again (``"slurm"``, status 0), and a cancelled one (``scancel`` without ``--signal``) is
not brought back (``"cancelled"``, :data:`EXIT_STOPPED`). Past ``max_requeues`` (the
job's attempt, :attr:`helios_env.DistributedInfo.attempt`, which counts SLURM's requeues,
torchrun's restarts and runs started from a marker, has reached it), nothing is
requeued: the job ends with :data:`EXIT_STOPPED` and a line that says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from helios_env import get_dist_info
from helios_env.integration import (
    REQUEUE_MARKER_VARIABLE as MARKER_VARIABLE,
)
from helios_env.integration import consume_requeue_marker, requeue_marker
from helios_pg._preempt._cause import StopCause, read_cause
from helios_pg._preempt._scontrol import run_scontrol

__all__ = [
    "EXIT_REQUEUE",
    "EXIT_STOPPED",
    "Requeue",
    "decide_requeue",
    "marker_consumed",
    "requeue_job",
]

EXIT_REQUEUE = 75
"""The exit status that asks the batch script to resubmit the job (``EX_TEMPFAIL``)."""
EXIT_STOPPED = 1
"""The exit status of a job that ends unfinished: past its requeues, or cancelled."""
_RECHECK = 5.0
"""Seconds ``scontrol show job`` may take after a failed ``scontrol requeue``."""
How = Literal["scontrol", "slurm", "launcher", "marker", "limit", "cancelled"]
_CODES: dict[How, int] = {
    "scontrol": 1,
    "launcher": 2,
    "marker": 3,
    "limit": 4,
    "slurm": 5,
    "cancelled": 6,
}


@dataclass(frozen=True)
class Requeue:
    """What ``requeue()`` did, the same on every rank.

    Attributes:
        how: ``"scontrol"`` (rank 0 requeued the job), ``"slurm"`` (SLURM had requeued
            it already: a preemption), ``"launcher"`` (torchrun alone: exit cleanly, the
            operator restarts the job), ``"marker"`` (a marker file was written; the
            batch script resubmits on :attr:`exit_status`), ``"limit"`` (the job's
            attempt has reached ``max_requeues``) or ``"cancelled"`` (SLURM is ending
            a cancelled job: it is not brought back). After the last two nothing was
            done, and the job ends with status 1.
        exit_status: The status to end the program with.
        job: The job requeued or to requeue, where a launcher names one.
        marker: The marker file, for ``"marker"``.
        detail: One line that says what was done, or why it could not be.
    """

    how: How
    exit_status: int
    job: str | None
    marker: Path | None
    detail: str

    @property
    def requeued(self) -> bool:
        """Whether the job is back in SLURM's queue."""
        return self.how in ("scontrol", "slurm")

    @property
    def code(self) -> int:
        """A number for :attr:`how`, which rank 0 sends to the others."""
        return _CODES[self.how]

    def with_code(self, code: int) -> Requeue:
        """What rank 0 did, from the number it sent, as this rank reports it."""
        how: How = next((name for name, number in _CODES.items() if number == code), "marker")
        if how == self.how:
            return self
        if how == "scontrol":
            return Requeue("scontrol", 0, self.job, None, f"rank 0 requeued SLURM job {self.job}")
        if how == "launcher":
            return _fallback(self.job, "", how="launcher")
        if how == "slurm":
            detail = f"rank 0 found SLURM job {self.job} requeued already: nothing to do"
            return Requeue("slurm", 0, self.job, None, detail)
        if how == "limit":
            detail = "rank 0 found the job at max_requeues: not requeuing it again"
            return Requeue("limit", EXIT_STOPPED, self.job, None, detail)
        if how == "cancelled":
            detail = f"rank 0 found SLURM job {self.job} cancelled: not requeuing it"
            return Requeue("cancelled", EXIT_STOPPED, self.job, None, detail)
        return _fallback(self.job, "rank 0 could not requeue the job")


def _job(environ: dict[str, str] | os._Environ[str]) -> str | None:
    array, task = environ.get("SLURM_ARRAY_JOB_ID"), environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return environ.get("SLURM_JOB_ID") or None


def _fallback(job: str | None, why: str, *, how: How = "marker") -> Requeue:
    if how == "launcher":
        detail = (
            "torchrun without SLURM, nothing to requeue: exit with status 0 and let the "
            "job's operator start it again"
        )
        return Requeue("launcher", 0, job, None, detail)
    marker = requeue_marker()
    detail = (
        f"{why}: wrote {marker}; exit with status {EXIT_REQUEUE} and let the batch "
        "script resubmit the job"
    )
    return Requeue("marker", EXIT_REQUEUE, job, marker, detail)


def decide_requeue(
    environ: dict[str, str] | None = None,
    *,
    attempt: int = 0,
    max_requeues: int | None = None,
    cause: StopCause | None = None,
) -> Requeue:
    """What ``requeue()`` will do here, from the launcher's variables.

    Args:
        environ: The environment; ``os.environ`` when omitted.
        attempt: The job's attempt, the same on every rank.
        max_requeues: How many times the job may be requeued; None: no limit.
        cause: Why the job stops, where rank 0 asked the launcher.

    Returns:
        The plan.
    """
    env = os.environ if environ is None else environ
    job = _job(env)
    if cause is not None and cause.kind == "requeued":
        return Requeue("slurm", 0, job, None, f"{cause.detail}: nothing to do")
    if cause is not None and cause.kind == "cancelled":
        detail = (
            f"{cause.detail}: not bringing it back; it ends here with status "
            f"{EXIT_STOPPED} (submit it again to resume from its checkpoint; to stop a "
            "job so that it requeues, signal it: scancel --signal=TERM)"
        )
        return Requeue("cancelled", EXIT_STOPPED, job, None, detail)
    if max_requeues is not None and attempt >= max_requeues:
        detail = (
            f"this is attempt {attempt} of the job (SLURM's requeues, torchrun's restarts "
            f"and runs started from a marker), at max_requeues={max_requeues}: not "
            "requeuing it again; it ends "
            f"here with status {EXIT_STOPPED} (raise max_requeues to let it go on)"
        )
        return Requeue("limit", EXIT_STOPPED, job, None, detail)
    if job is not None:
        if shutil.which("scontrol") is None:
            return _fallback(job, f"cannot requeue SLURM job {job}: scontrol is not on PATH")
        why = f"{cause.detail}: " if cause is not None else ""
        return Requeue("scontrol", 0, job, None, f"{why}requeue SLURM job {job} (scontrol requeue)")
    if env.get("TORCHELASTIC_RUN_ID"):
        return _fallback(None, "", how="launcher")
    return _fallback(None, "not under SLURM, nothing to requeue")


def requeue_job(plan: Requeue, *, timeout: float, attempt: int = 0) -> Requeue:
    """Carry out ``plan`` (rank 0 does), and say what was done on stderr.

    Args:
        plan: From :func:`decide_requeue`.
        timeout: Seconds ``scontrol`` may take.
        attempt: This run's attempt, which a marker records for the next run.

    Returns:
        What was done: ``plan``, or the marker file where ``scontrol`` failed.
    """
    outcome = plan
    if plan.how == "scontrol" and plan.job is not None:
        try:
            done = run_scontrol(["requeue", plan.job], timeout=timeout)
            said = done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}"
            failure = said if done.returncode else ""
        except (OSError, subprocess.TimeoutExpired) as exc:
            failure = str(exc)
        if failure:
            outcome = _requeued_after_all(plan, failure, timeout)
    if outcome.how == "marker" and outcome.marker is not None:
        record = {
            "attempt": attempt,
            "job": outcome.job,
            "detail": outcome.detail,
            "time": time.time(),
        }
        try:
            outcome.marker.parent.mkdir(parents=True, exist_ok=True)
            outcome.marker.write_text(json.dumps(record) + "\n")
        except OSError as exc:
            detail = (
                f"{outcome.detail}; but the marker could not be written ({exc}): the next "
                f"run will not count this attempt (point {MARKER_VARIABLE} at a writable "
                "file)"
            )
            outcome = replace(outcome, detail=detail)
    sys.stderr.write(f"helios requeue: {outcome.detail}\n")
    sys.stderr.flush()
    return outcome


def _requeued_after_all(plan: Requeue, failure: str, timeout: float) -> Requeue:
    """What a failed ``scontrol requeue`` leaves: SLURM's record decides.

    ``scontrol`` can end before it answers when SLURM has taken the request (its time
    limit, a signal it does not ignore): where the job's ``Restarts`` count is past this
    attempt's, the job is back in the queue, and a marker would count the next attempt
    twice. The record is asked for briefly: the other ranks wait, and SLURM's
    ``KillWait`` runs.
    """
    after = read_cause("a failed scontrol requeue", timeout=min(timeout, _RECHECK))
    if after.kind == "requeued":
        detail = (
            f"scontrol requeue {plan.job} ended without success ({failure}), but SLURM "
            f"has the job requeued: {after.detail}"
        )
        return replace(plan, detail=detail)
    why = f"scontrol requeue {plan.job} failed ({failure}; submitted with --requeue?)"
    return _fallback(plan.job, why)


def marker_consumed(rank: int) -> Path | None:
    """Remove the marker that asked for this run, now that its group has formed.

    Every rank has counted it by then (each read it before it joined the group). Rank
    0 removes it and says so on stderr; the other ranks leave it.

    Args:
        rank: This process's rank in the new group.

    Returns:
        The marker removed, or None.
    """
    if rank != 0:
        return None
    removed = consume_requeue_marker()
    if removed is not None:
        attempt = get_dist_info().attempt
        sys.stderr.write(
            f"helios requeue: this run is attempt {attempt} of the job, asked for by the "
            f"marker {removed}, which is now removed\n"
        )
        sys.stderr.flush()
    return removed
