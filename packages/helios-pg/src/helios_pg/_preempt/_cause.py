"""Why the job is being stopped, where the launcher says: SLURM's view of the job.

At a stop signal SLURM's record of the job (``scontrol show job``) tells its causes apart:

- the time limit: ``Reason=TimeLimit`` (the job is ending, SIGTERM then SIGKILL);
- a preemption that requeues: SLURM has already put the job back in the queue, so its
  ``Restarts`` count is past the one this attempt started with (``SLURM_RESTART_COUNT``);
- a preemption that cancels: ``PreemptTime`` is set (``JobState`` says ``COMPLETING``
  then, as it does for every job that is ending);
- a cancellation (``scancel`` without ``--signal``): the job is ending (``COMPLETING``,
  ``CANCELLED``) with ``Reason=None``, for none of the reasons above;
- a signal while the job runs (``scancel --signal``, ``sbatch --signal=SIG@N``'s warning,
  a ``kill``): ``RUNNING``, with the time left before the time limit where it has one.

Elsewhere (torchrun, Kubernetes, a terminal) a signal is all there is to know.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from helios_pg._preempt._scontrol import run_scontrol

__all__ = ["Kind", "StopCause", "cause_from_job", "read_cause"]

Kind = Literal["time_limit", "preempted", "requeued", "cancelled", "signal"]
_ENDING = ("COMPLETING", "CANCELLED")


@dataclass(frozen=True)
class StopCause:
    """Why the job is being stopped, as this rank found it (:meth:`Preemption.cause`).

    Attributes:
        kind: ``"time_limit"`` (SLURM's time limit ends the job), ``"preempted"``
            (SLURM preempted it and cancels it), ``"requeued"`` (SLURM preempted it, or
            someone ran ``scontrol requeue``, and has put it back in the queue itself),
            ``"cancelled"`` (the job is ending for another reason: ``scancel`` without
            ``--signal``) or ``"signal"`` (a signal while the job runs: ``scancel
            --signal``, SLURM's warning before the time limit, torchrun's agent stopped,
            Kubernetes deleting the pod, Ctrl-C).
        detail: One line that says so, with what SLURM reported.
        time_left: Seconds left before the job's time limit when SLURM was asked,
            where SLURM sets one and the job still runs (``sbatch --signal=USR1@120``
            leaves about 120 at the signal).
    """

    kind: Kind
    detail: str
    time_left: float | None = None


def _duration(seconds: float) -> str:
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def cause_from_job(
    fields: Mapping[str, str], *, job: str, restarts: int, signal: str, now: float
) -> StopCause:
    """The cause SLURM's record of the job gives.

    Args:
        fields: ``scontrol show job``'s fields (``JobState``, ``Reason``, ``Restarts``,
            ``PreemptTime``, ``EndTime``, ``TimeLimit``).
        job: The job's id, for the line.
        restarts: ``SLURM_RESTART_COUNT`` when this attempt started.
        signal: The signal's name (``"SIGTERM"``), or words for a stop without one here.
        now: When the fields were read, in :func:`time.time` seconds.

    Returns:
        What the fields say, most specific first.
    """
    state = fields.get("JobState", "")
    reason = fields.get("Reason", "")
    said = f"JobState={state} Reason={reason}"
    if state == "TIMEOUT" or reason == "TimeLimit":
        limit = fields.get("TimeLimit", "")
        return StopCause("time_limit", f"SLURM's time limit ({limit}) ends job {job} ({said})")
    count = fields.get("Restarts", "")
    if count.isdigit() and int(count) > restarts:
        detail = (
            f"SLURM has requeued job {job} itself (Restarts={count}, this attempt started "
            f"at {restarts}: a preemption, or scontrol requeue)"
        )
        return StopCause("requeued", detail)
    preempted_at = fields.get("PreemptTime", "None")
    if state == "PREEMPTED" or preempted_at not in ("", "None", "Unknown"):
        detail = f"SLURM preempted job {job} (PreemptTime={preempted_at} {said})"
        return StopCause("preempted", detail)
    if state in _ENDING and reason == "None":
        detail = f"job {job} is being cancelled ({said}: scancel, not a preemption)"
        return StopCause("cancelled", detail)
    if state in _ENDING:
        return StopCause("signal", f"{signal} as SLURM ends job {job} ({said})")
    left = None
    with_limit = ""
    try:
        end = datetime.fromisoformat(fields.get("EndTime", "")).timestamp()
    except ValueError:
        end = None
    if end is not None and fields.get("TimeLimit", "UNLIMITED") != "UNLIMITED":
        left = end - now
        with_limit = f", {_duration(left)} before its time limit ({fields['TimeLimit']})"
    detail = f"{signal} while SLURM job {job} runs ({said}{with_limit})"
    return StopCause("signal", detail, left)


def _fields(text: str) -> dict[str, str]:
    return dict(re.findall(r"(\S+?)=(\S*)", text))


def read_cause(
    signal: str, environ: Mapping[str, str] | None = None, *, timeout: float = 10.0
) -> StopCause:
    """Why the job is being stopped, asked of SLURM where the job is SLURM's.

    Args:
        signal: The signal's name, or words for a stop without one here.
        environ: The environment; ``os.environ`` when omitted.
        timeout: Seconds ``scontrol show job`` may take.

    Returns:
        SLURM's answer, else a plain ``"signal"`` cause that says why SLURM was not asked.
    """
    env = os.environ if environ is None else environ
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    job = f"{array}_{task}" if array and task else env.get("SLURM_JOB_ID")
    if not job:
        return StopCause("signal", f"{signal}, not under SLURM")
    if shutil.which("scontrol") is None:
        return StopCause("signal", f"{signal} to SLURM job {job} (scontrol is not on PATH)")
    command = ["scontrol", "show", "job", "--oneliner", job]
    try:
        done = run_scontrol(command[1:], timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return StopCause("signal", f"{signal} to SLURM job {job} ({' '.join(command)}: {exc})")
    if done.returncode:
        said = done.stderr.strip() or f"exit status {done.returncode}"
        return StopCause("signal", f"{signal} to SLURM job {job} ({' '.join(command)}: {said})")
    restarts = env.get("SLURM_RESTART_COUNT", "0")
    count = int(restarts) if restarts.isdigit() else 0
    return cause_from_job(
        _fields(done.stdout), job=job, restarts=count, signal=signal, now=time.time()
    )
