"""Environments as real launchers set them, and a stand-in for ``torch.distributed``."""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping

import pytest

__all__ = [
    "FakeDistributed",
    "LiveGroup",
    "hand_set_env",
    "open_mpi_env",
    "set_environ",
    "slurm_env",
    "torchrun_env",
]


def torchrun_env(
    *,
    rank: int = 0,
    world_size: int = 1,
    local_rank: int | None = None,
    local_world_size: int | None = None,
    node_rank: int = 0,
    num_nodes: int = 1,
    run_id: str = "none",
    master_addr: str = "127.0.0.1",
    master_port: int = 29500,
) -> dict[str, str]:
    """The variables torch elastic's local agent sets for one worker (torch 2.x).

    ``_start_workers`` in ``torch/distributed/elastic/agent/server/local_elastic_agent.py``
    sets exactly these, for the standalone, static and c10d rendezvous alike.
    """
    local_world_size = world_size // num_nodes if local_world_size is None else local_world_size
    local_rank = rank % local_world_size if local_rank is None else local_rank
    return {
        "RANK": str(rank),
        "GROUP_RANK": str(node_rank),
        "ROLE_RANK": str(rank),
        "ROLE_NAME": "default",
        "LOCAL_WORLD_SIZE": str(local_world_size),
        "WORLD_SIZE": str(world_size),
        "GROUP_WORLD_SIZE": str(num_nodes),
        "ROLE_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "LOCAL_RANK": str(local_rank),
    }


def hand_set_env(*, rank: int, world_size: int) -> dict[str, str]:
    """What an ``mp.spawn`` program or a hand-started process typically sets."""
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
    }


def open_mpi_env(
    *, rank: int, world_size: int, local_rank: int, local_world_size: int
) -> dict[str, str]:
    """The rank variables Open MPI's ``mpirun`` sets for each process."""
    return {
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_SIZE": str(world_size),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(local_rank),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_world_size),
        "OMPI_COMM_WORLD_NODE_RANK": "0",
    }


def slurm_env(
    *,
    rank: int,
    world_size: int,
    local_rank: int,
    node: int,
    tasks_per_node: str,
    num_nodes: int,
) -> dict[str, str]:
    """The variables of one task of an ``srun`` step inside a batch allocation."""
    return {
        "SLURM_JOB_ID": "4242",
        "SLURM_STEP_ID": "0",
        "SLURM_NNODES": str(num_nodes),
        "SLURM_STEP_NUM_NODES": str(num_nodes),
        "SLURM_PROCID": str(rank),
        "SLURM_STEP_NUM_TASKS": str(world_size),
        "SLURM_NTASKS": str(world_size),
        "SLURM_LOCALID": str(local_rank),
        "SLURM_NODEID": str(node),
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
    }


class FakeGroup:
    """The stand-in default process group: ``rank()`` and ``size()``."""

    def __init__(self, rank: int, world_size: int, error: Exception | None) -> None:
        self._rank = rank
        self._world_size = world_size
        self._error = error
        self.calls = 0

    def rank(self) -> int:
        self.calls += 1
        if self._error is not None:
            raise self._error
        return self._rank

    def size(self) -> int:
        return self._world_size


class FakeDistributed(types.ModuleType):
    """A ``torch.distributed`` stand-in: ``group.WORLD``, which helios_env reads.

    Without distributed support torch has no ``group`` at all; without an initialized
    default group ``group.WORLD`` is None.

    Attributes:
        calls: How many times the group's ``rank()`` was called.
    """

    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        available: bool,
        initialized: bool,
        error: Exception | None,
    ) -> None:
        super().__init__("torch.distributed")
        self._world = FakeGroup(rank, world_size, error) if initialized else None
        if available:
            self.group = types.SimpleNamespace(WORLD=self._world)

    @property
    def calls(self) -> int:
        return 0 if self._world is None else self._world.calls


LiveGroup = Callable[..., FakeDistributed]
"""The ``live_group`` fixture: installs a :class:`FakeDistributed` and returns it."""


def set_environ(monkeypatch: pytest.MonkeyPatch, environ: Mapping[str, str]) -> None:
    """Set every variable of ``environ`` for the current test."""
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
