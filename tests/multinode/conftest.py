"""Fixtures for the multi-node tests: virtual nodes and a SLURM cluster on them.

Both are built once per session. Skipped where network namespaces or the launchers
cannot run (not root, no ``ip``, no SLURM), failed instead under ``CI=true``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import netns, slurm
from tests.support.netns import VirtualNodes, virtual_nodes
from tests.support.slurm import Cluster, virtual_cluster


@pytest.fixture(scope="session")
def nodes() -> Iterator[VirtualNodes]:
    """Two virtual nodes, ``node1`` and ``node2``, each with its own address and name."""
    netns.require()
    with virtual_nodes(2) as built:
        yield built


@pytest.fixture(scope="session")
def cluster(nodes: VirtualNodes) -> Iterator[Cluster]:
    """A two-node SLURM cluster on :func:`nodes`; its clients run on ``node1``.

    Each node declares four CPUs, so ``srun -N2 -n4`` places three tasks on
    ``node1`` and one on ``node2``.
    """
    slurm.require("slurm")
    with virtual_cluster(nodes) as started:
        yield started
