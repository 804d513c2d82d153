"""How long a job has between the stop signal and SIGKILL, where the launcher says it.

In the order of precedence: ``preemption(grace=...)``, ``HELIOS_PREEMPTION_GRACE``,
then what the launcher does: SLURM sends SIGKILL ``KillWait`` seconds after its SIGTERM
(``scontrol show config``); torchrun's agent 30 s after the SIGTERM it forwards (under
``srun torchrun`` the shorter of the two); Kubernetes after the pod's
``terminationGracePeriodSeconds``, which a pod cannot read: 30 s, its default. Elsewhere
nothing is known.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from helios_pg._preempt._scontrol import run_scontrol

__all__ = ["GRACE_VARIABLE", "Grace", "find_grace", "grace_from", "variable_grace"]

GRACE_VARIABLE = "HELIOS_PREEMPTION_GRACE"
TORCHRUN_GRACE = 30.0
"""torchrun's agent: SIGKILL this long after the SIGTERM it forwards to its workers."""
KUBERNETES_GRACE = 30.0
"""Kubernetes' default ``terminationGracePeriodSeconds``."""
_KILL_WAIT = re.compile(r"^KillWait\s*=\s*(\d+)\s*sec", re.MULTILINE)


@dataclass(frozen=True)
class Grace:
    """Seconds from the stop signal to SIGKILL, and who says so.

    Attributes:
        seconds: The grace; None where nothing says it.
        source: Who kills the job when, in words (``"torchrun: SIGKILL 30 s after its
            SIGTERM"``), for messages.
    """

    seconds: float | None
    source: str


def grace_from(value: object, what: str) -> float:
    """A grace given as a number of seconds (an argument or a variable's text).

    Raises:
        ValueError: Not a positive, finite number of seconds.
    """
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        message = (
            f"{what}={value!r} is not a grace period: give the seconds the job has between "
            "the stop signal and SIGKILL, a positive number (for example 30)"
        )
        raise ValueError(message)
    return seconds


def _kill_wait(timeout: float = 5.0) -> float | None:
    """SLURM's ``KillWait``, from ``scontrol show config``; None where it cannot be read."""
    try:
        done = run_scontrol(["show", "config"], timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = _KILL_WAIT.search(done.stdout)
    return float(found.group(1)) if found and done.returncode == 0 else None


def variable_grace(environ: Mapping[str, str] | None = None) -> Grace | None:
    """The grace ``HELIOS_PREEMPTION_GRACE`` gives, if set.

    Raises:
        ValueError: It is not a positive number.
    """
    env = os.environ if environ is None else environ
    text = env.get(GRACE_VARIABLE, "").strip()
    if not text:
        return None
    return Grace(grace_from(text, GRACE_VARIABLE), f"{GRACE_VARIABLE}={text}")


def find_grace(given: float | None, environ: Mapping[str, str] | None = None) -> Grace:
    """The grace of this job: ``given``, the variable, or the launcher's.

    Args:
        given: ``preemption(grace=...)``, already checked.
        environ: The environment; ``os.environ`` when omitted.

    Raises:
        ValueError: ``HELIOS_PREEMPTION_GRACE`` is not a positive number.
    """
    env = os.environ if environ is None else environ
    if given is not None:
        return Grace(given, f"preemption(grace={given:g})")
    variable = variable_grace(env)
    if variable is not None:
        return variable
    found: list[Grace] = []
    if env.get("SLURM_JOB_ID"):
        wait = _kill_wait()
        if wait is not None:
            found.append(Grace(wait, f"SLURM: SIGKILL {wait:g} s after its SIGTERM (KillWait)"))
    if env.get("TORCHELASTIC_RUN_ID"):
        source = f"torchrun: SIGKILL {TORCHRUN_GRACE:g} s after its SIGTERM"
        found.append(Grace(TORCHRUN_GRACE, source))
    elif env.get("KUBERNETES_SERVICE_HOST"):
        source = (
            f"Kubernetes: SIGKILL {KUBERNETES_GRACE:g} s after its SIGTERM by default "
            f"(terminationGracePeriodSeconds; set {GRACE_VARIABLE} to the pod's)"
        )
        found.append(Grace(KUBERNETES_GRACE, source))
    if not found:
        return Grace(None, f"no launcher here says it; set {GRACE_VARIABLE} or grace=")
    return min(found, key=lambda grace: grace.seconds or 0.0)
