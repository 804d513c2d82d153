"""The value type that describes one process's place in a distributed run."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DistributedInfo"]


@dataclass(frozen=True, slots=True)
class DistributedInfo:
    """Ranks and world sizes of the current process, and its node when that is known.

    Consider two nodes with two GPUs each and one process per GPU: ``local_rank`` is
    0 or 1 on both nodes, ``rank`` runs from 0 to 3 across the nodes,
    ``local_world_size`` is 2 on both nodes and ``world_size`` is 4.

    Nodes may run different numbers of processes (``srun -n4`` on two nodes places
    3 and 1), and ranks may be placed round-robin (MPICH's default), so the node is
    never computed from the ranks: ``node_rank`` and ``num_nodes`` come from the
    launcher where it says them (``SLURM_NODEID``, torchrun's ``GROUP_RANK``), from
    the live group once ``helios_pg.init()`` has learned the layout, and are None
    where nothing says them. When every process runs on one node (``local_world_size
    == world_size``) they are 0 and 1.

    Attributes:
        local_rank: The rank of this process on its node.
        rank: The global rank of this process.
        local_world_size: The number of processes on this node.
        world_size: The number of processes in the whole run.
        node_rank: The index of this process's node, from 0 (the node of rank 0 when
            learned from the group); None when not known.
        num_nodes: The number of nodes of the run; None when not known.
        attempt: Which attempt of the job this is: 0 on the first run, 1 after the
            first requeue or restart (``SLURM_RESTART_COUNT``,
            ``TORCHELASTIC_RESTART_COUNT``; their sum under ``srun torchrun``), the
            same on every rank once ``helios_pg.init()`` has run.
    """

    local_rank: int = 0
    rank: int = 0
    local_world_size: int = 1
    world_size: int = 1
    node_rank: int | None = None
    num_nodes: int | None = None
    attempt: int = 0

    def __post_init__(self) -> None:
        unknown = self.node_rank is None and self.num_nodes is None
        if unknown and self.local_world_size == self.world_size:
            object.__setattr__(self, "node_rank", 0)
            object.__setattr__(self, "num_nodes", 1)

    @property
    def is_main_process(self) -> bool:
        """Whether this is global rank 0."""
        return self.rank == 0

    @property
    def is_local_main_process(self) -> bool:
        """Whether this is local rank 0, the first process of its node."""
        return self.local_rank == 0

    @property
    def is_distributed(self) -> bool:
        """Whether the run has more than one process."""
        return self.world_size > 1
