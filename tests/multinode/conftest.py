"""Fixtures for the multi-node tests: virtual nodes and a SLURM cluster on them.

Both are built once per session. Skipped where network namespaces or the launchers
cannot run (not root, no ``ip``, no SLURM), failed instead under ``CI=true``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

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


MPI4PY = "mpi4py==4.1.2"
"""The mpi4py of helios-pg's ``mpi`` extra, as uv.lock pins it."""


@pytest.fixture(scope="session")
def mpi4py_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """mpi4py installed apart (not in the test venv), and a library dir for MPICH's ABI name.

    mpi4py's wheel loads MPICH through the MPI ABI name ``libmpi.so.12``, which Debian's
    mpich ships as ``libmpich.so.12``; Open MPI it loads with ``MPI4PY_LIBMPI``.

    Returns:
        The directory to put on ``PYTHONPATH``, and the one for ``LD_LIBRARY_PATH``.
    """
    target = tmp_path_factory.mktemp("mpi4py")
    command = ["uv", "pip", "install", "--quiet", "--target", str(target), "--python"]
    done = subprocess.run(
        [*command, sys.executable, MPI4PY], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        reason = f"cannot install {MPI4PY} apart: {done.stderr.strip()[-500:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    libs = tmp_path_factory.mktemp("mpich-abi")
    found = sorted(Path("/usr/lib").glob("*/libmpich.so.12"))
    if found:
        (libs / "libmpi.so.12").symlink_to(found[0])
    return target, libs
