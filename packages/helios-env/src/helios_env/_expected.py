"""Where each rank of the job should run, as its launcher's variables say it.

For naming the ranks that never came to a rendezvous, and where they were to run:

- an srun step whose tasks are the ranks: its node list and each node's task count
  (``SLURM_STEP_NODELIST``, ``SLURM_STEP_TASKS_PER_NODE``), the ranks placed as SLURM
  places them (``SLURM_DISTRIBUTION``: ``block``, the default where there are more tasks
  than nodes, a node's ranks one after another; ``cyclic``, one rank per node in turn);
- torchrun (each node's agent starts ``LOCAL_WORLD_SIZE`` ranks, numbered one after
  another): the node by its place in torchrun's rendezvous, ``torchrun node 1``, since
  torchrun does not tell a rank the other nodes' names.

Nothing is assumed: where the variables do not say it (an MPI launcher, SLURM's
``plane`` and ``arbitrary`` distributions, counts that do not add up to the world
size), there is no answer.
"""

from __future__ import annotations

from collections.abc import Mapping

from helios_env._environ import Getter, getter_for
from helios_env._errors import HostlistError, LauncherEnvError
from helios_env._hostlist import expand_hostlist
from helios_env._integers import read_int
from helios_env._placement import tasks_per_node

__all__ = ["expected_hosts"]

_SLURM_NODELISTS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
_SLURM_COUNTS = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")


def expected_hosts(world_size: int, environ: Mapping[str, str] | None = None) -> list[str] | None:
    """Each rank's host, by rank, as the launcher places the ranks.

    Args:
        world_size: The number of ranks the job starts.
        environ: The variables to read; ``os.environ`` when omitted.

    Returns:
        ``world_size`` names (a host, or ``torchrun node K``), or None where the
        launcher's variables do not say where every rank runs.
    """
    get = getter_for(environ)
    try:
        return _slurm(get, world_size) or _torchrun(get, world_size)
    except (LauncherEnvError, HostlistError):
        return None  # the launcher's own variables are refused where they are used


def _slurm(get: Getter, world_size: int) -> list[str] | None:
    if read_int(get, "SLURM_STEP_NUM_TASKS", minimum=1) != world_size:
        return None  # not a step whose tasks are the ranks (srun of torchrun, say)
    listed = next((get(name) for name in _SLURM_NODELISTS if get(name)), None)
    counts = next((c for c in (tasks_per_node(get, n) for n in _SLURM_COUNTS) if c), None)
    if listed is None or counts is None:
        return None
    nodes = expand_hostlist(listed)
    if len(nodes) != len(counts) or sum(counts) != world_size:
        return None
    distribution = (get("SLURM_DISTRIBUTION") or "block").split(",")[0].split(":")[0]
    if distribution.strip() == "block":
        return [node for node, count in zip(nodes, counts, strict=True) for _ in range(count)]
    if distribution.strip() != "cyclic":
        return None
    placed: list[str] = []
    left = list(counts)
    while len(placed) < world_size:  # one rank per node with room left, in turn
        for index, node in enumerate(nodes):
            if left[index]:
                placed.append(node)
                left[index] -= 1
    return placed


def _torchrun(get: Getter, world_size: int) -> list[str] | None:
    if not get("TORCHELASTIC_RUN_ID"):
        return None
    local = read_int(get, "LOCAL_WORLD_SIZE", minimum=1)
    if local is None or world_size % local:
        return None
    return [f"torchrun node {rank // local}" for rank in range(world_size)]
