"""Which attempt of the job this is: 0 on the first run, more after a requeue or restart.

SLURM counts the requeues of a job in ``SLURM_RESTART_COUNT``; torchrun counts the
restarts of its worker group in ``TORCHELASTIC_RESTART_COUNT``. Under ``srun torchrun``
both count, and the attempt is their sum. A run that a requeue marker asked for
(:mod:`helios_env._marker`) adds one to the attempt of the run that wrote it.
torchrun's count is its agent's, which may differ between nodes; ``helios_pg.init()``
makes the attempt the largest over the job's ranks where it exchanges their host
names (the recorded layout), so every rank agrees.
"""

from __future__ import annotations

from helios_env._environ import Getter
from helios_env._info import DistributedInfo
from helios_env._integers import read_int
from helios_env._marker import marker_attempt

__all__ = ["ATTEMPT_VARIABLES", "FIRST_ATTEMPT", "read_attempt"]

ATTEMPT_VARIABLES = ("SLURM_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT")
FIRST_ATTEMPT = "default: no restart count is set"
_LEARNED = "process group: the largest over the ranks, learned by helios_pg.init()"


def read_attempt(get: Getter, sources: dict[str, str], learned: DistributedInfo | None) -> int:
    """The attempt, and its source in ``sources["attempt"]``.

    Args:
        get: Reads a variable.
        sources: Where the source is written.
        learned: The layout ``helios_pg.init()`` learned for the live group, if any.

    Raises:
        LauncherEnvError: A restart count that is not a non-negative integer.
    """
    counts = {name: read_int(get, name, minimum=0) for name in ATTEMPT_VARIABLES}
    present = {name: value for name, value in counts.items() if value is not None}
    path, written_by = marker_attempt(get)
    if written_by is not None:
        present[f"the requeue marker {path} (attempt {written_by} + 1)"] = written_by + 1
    attempt = sum(present.values())
    if learned is not None and learned.attempt > attempt:
        sources["attempt"] = _LEARNED
        return learned.attempt
    sources["attempt"] = " + ".join(present) if present else FIRST_ATTEMPT
    return attempt
