"""The value type that describes one process's place in a distributed run."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DistributedInfo"]


@dataclass(frozen=True, slots=True)
class DistributedInfo:
    """Ranks and world sizes of the current process.

    Consider two nodes with two GPUs each and one process per GPU: ``local_rank`` is
    0 or 1 on both nodes, ``rank`` runs from 0 to 3 across the nodes,
    ``local_world_size`` is 2 on both nodes and ``world_size`` is 4.

    Attributes:
        local_rank: The rank of this process on its node.
        rank: The global rank of this process.
        local_world_size: The number of processes on this node.
        world_size: The number of processes in the whole run.
    """

    local_rank: int = 0
    rank: int = 0
    local_world_size: int = 1
    world_size: int = 1

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

    @property
    def node_rank(self) -> int:
        """The index of this process's node, assuming every node runs as many processes."""
        return self.rank // self.local_world_size

    @property
    def num_nodes(self) -> int:
        """The number of nodes, assuming every node runs as many processes."""
        return -(-self.world_size // self.local_world_size)
