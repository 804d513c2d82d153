"""Open MPI's and MPICH's mpirun, started on node1, place ranks on both virtual nodes.

mpirun reaches node2 through the nodes' ssh stand-in, which runs its daemon (Open
MPI's orted, Hydra's proxy) there in a clean login environment: nothing of the
caller's environment reaches node2's ranks unless mpirun passes it (``-x``,
``-genv``). No interface is pinned: no ``GLOO_SOCKET_IFNAME``, no ``*_if_include``,
no ``HYDRA_IFACE``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.multinode.checks import FORM_GROUP, LIMIT, TEST_TIMEOUT, describe, spread
from tests.support.mpi import mpich_command, openmpi_command
from tests.support.netns import VirtualNodes
from tests.support.procs import Finished
from tests.support.slurm import require

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(TEST_TIMEOUT)]

OPEN_MPI_PLACEMENT = {0: 0, 1: 0, 2: 1, 3: 1}
"""``--host node1:2,node2:2``: two slots on each node, filled in order."""
MPICH_PLACEMENT = {0: 0, 1: 1, 2: 0, 3: 1}
"""``-hosts node1,node2``: Hydra places ranks round-robin, one per host in turn."""


def open_mpi(nodes: VirtualNodes, *args: str) -> list[str]:
    hosts = ",".join(f"{node.name}:2" for node in nodes.nodes)
    return openmpi_command(4, *args, hosts=hosts, rsh_agent=nodes.ssh)


def mpich(nodes: VirtualNodes, *args: str) -> list[str]:
    hosts = ",".join(node.name for node in nodes.nodes)
    return mpich_command(4, *args, launcher="ssh", hosts=hosts, launcher_exec=nodes.ssh)


def master(nodes: VirtualNodes) -> dict[str, str]:
    return {"MASTER_ADDR": nodes.nodes[0].address, "MASTER_PORT": str(nodes.free_port(0))}


def config_errors(finished: Finished) -> list[str]:
    """The error line of each of the four ranks, each a RendezvousConfigError."""
    assert finished.returncode != 0
    errors = [
        line for line in finished.stderr.splitlines() if line.startswith("helios_pg._errors.")
    ]
    assert len(errors) == 4, describe(finished)
    for line in errors:
        assert "RendezvousConfigError" in line, describe(finished)
    return errors


def test_open_mpi_runs_on_both_nodes(nodes: VirtualNodes) -> None:
    require("openmpi")
    finished = nodes.run(0, open_mpi(nodes, "hostname"), limit=LIMIT)

    assert finished.returncode == 0, describe(finished)
    assert sorted(finished.stdout.split()) == ["node1", "node1", "node2", "node2"]


def test_mpich_runs_on_both_nodes(nodes: VirtualNodes) -> None:
    require("mpich")
    finished = nodes.run(0, mpich(nodes, "hostname"), limit=LIMIT)

    assert finished.returncode == 0, describe(finished)
    assert sorted(finished.stdout.split()) == ["node1", "node1", "node2", "node2"]


def test_open_mpi_forms_the_group_with_master_passed(nodes: VirtualNodes) -> None:
    require("openmpi")
    passed = [word for name, value in master(nodes).items() for word in ("-x", f"{name}={value}")]
    finished = nodes.run(0, open_mpi(nodes, *passed, *FORM_GROUP), limit=LIMIT)

    assert finished.returncode == 0, describe(finished)
    spread(finished, nodes, 4, placement=OPEN_MPI_PLACEMENT)


def test_open_mpi_forms_the_group_with_mpi4py_and_nothing_set(
    nodes: VirtualNodes, mpi4py_site: Path
) -> None:
    # mpi4py installed, nothing else: no MPI4PY_LIBMPI, no MASTER_ADDR, no library link.
    require("openmpi")
    passed = ["-x", f"PYTHONPATH={mpi4py_site}"]
    finished = nodes.run(0, open_mpi(nodes, *passed, *FORM_GROUP), limit=LIMIT)

    assert finished.returncode == 0, describe(finished)
    spread(finished, nodes, 4, placement=OPEN_MPI_PLACEMENT)


def test_mpich_forms_the_group_with_master_addr_alone(nodes: VirtualNodes) -> None:
    # The port is derived from the mpiexec behind each node's Hydra proxy.
    require("mpich")
    passed = ["-genv", "MASTER_ADDR", nodes.nodes[0].address]
    finished = nodes.run(0, mpich(nodes, *passed, *FORM_GROUP), limit=LIMIT)

    assert finished.returncode == 0, describe(finished)
    spread(finished, nodes, 4, placement=MPICH_PLACEMENT)


def test_mpich_forms_the_group_with_master_passed(nodes: VirtualNodes) -> None:
    require("mpich")
    passed = [word for name, value in master(nodes).items() for word in ("-genv", name, value)]
    finished = nodes.run(0, mpich(nodes, *passed, *FORM_GROUP), limit=LIMIT)

    assert finished.returncode == 0, describe(finished)
    spread(finished, nodes, 4, placement=MPICH_PLACEMENT)


def test_mpich_forms_the_group_with_mpi4py_and_nothing_set(
    nodes: VirtualNodes, mpi4py_site: Path
) -> None:
    # Debian's MPICH is libmpich.so.12 only: no libmpi.so.12 on any path, nothing set.
    require("mpich")
    passed = ["-genv", "PYTHONPATH", str(mpi4py_site)]
    finished = nodes.run(0, mpich(nodes, *passed, *FORM_GROUP), limit=LIMIT)

    assert finished.returncode == 0, describe(finished)
    spread(finished, nodes, 4, placement=MPICH_PLACEMENT)


def test_mpich_with_nothing_set_names_master_addr(nodes: VirtualNodes) -> None:
    # Without mpi4py nothing tells a rank where rank 0 is: every rank says what to set.
    require("mpich")
    finished = nodes.run(0, mpich(nodes, *FORM_GROUP), limit=LIMIT)

    for line in config_errors(finished):
        assert "MASTER_ADDR" in line
        assert "mpi4py" in line


def test_mpi4py_that_cannot_load_mpi_is_named_not_install_mpi4py(
    nodes: VirtualNodes, mpi4py_site: Path
) -> None:
    # The user's MPI4PY_LIBMPI wins, and names a library that is not there.
    require("mpich")
    absent = "libhelios-absent.so.1"
    passed = ["-genv", "PYTHONPATH", str(mpi4py_site), "-genv", "MPI4PY_LIBMPI", absent]
    finished = nodes.run(0, mpich(nodes, *passed, *FORM_GROUP), limit=LIMIT)

    for line in config_errors(finished):
        assert "mpi4py is installed but cannot load MPI" in line
        assert f"MPI4PY_LIBMPI={absent!r}" in line
        assert "install mpi4py" not in line
