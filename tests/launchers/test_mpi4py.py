"""mpi4py under the real mpirun of Open MPI and MPICH, with nothing set.

mpi4py's wheel (installed apart, as ``helios-pg[mpi]`` pins it) picks its MPI by the
first library it finds; with both MPIs installed, Debian's ``libmpi.so`` is one of
them, and Debian ships MPICH as ``libmpich.so.12`` only, not under the ABI name
``libmpi.so.12`` the wheel needs. helios-pg has it load the library of the MPI that
launched the process: each rank imports ``mpi4py.MPI`` and takes part in a broadcast.
Skipped without the launchers (failed under ``CI=true``).
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

from helios_env import Launcher
from helios_pg._setup import _mpi
from tests.support.mpi import run_mpich, run_openmpi
from tests.support.procs import REPO_ROOT, Finished, results
from tests.support.slurm import require

WORKER = [sys.executable, str(Path(__file__).parent / "workers" / "mpi4py_bcast.py")]
LIMIT = 90.0

pytestmark = pytest.mark.launchers


def with_mpi4py(site: Path, **variables: str) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(site)]), **variables}


def broadcast(finished: Finished, size: int) -> list[dict[str, object]]:
    """Check that every rank imported mpi4py.MPI and got rank 0's value."""
    ranks = sorted(results(finished), key=lambda item: int(str(item.get("rank", -1))))
    assert [item.get("rank") for item in ranks] == list(range(size)), finished.describe()
    assert {item["size"] for item in ranks} == {size}, finished.describe()
    assert len({item["sent"] for item in ranks}) == 1, finished.describe()
    return ranks


def test_open_mpi_ranks_load_open_mpi_s_library(mpi4py_site: Path) -> None:
    require("openmpi")
    finished = run_openmpi(2, WORKER, extra_env=with_mpi4py(mpi4py_site), limit=LIMIT)

    assert finished.returncode == 0, finished.describe()
    assert {item["libmpi"] for item in broadcast(finished, 2)} == {"libmpi.so.40"}


def test_mpich_ranks_load_mpich_s_library(mpi4py_site: Path) -> None:
    require("mpich")
    finished = run_mpich(2, WORKER, extra_env=with_mpi4py(mpi4py_site), limit=LIMIT)

    assert finished.returncode == 0, finished.describe()
    loaded = {item["libmpi"] for item in broadcast(finished, 2)}
    assert loaded in ({"libmpi.so.12"}, {"libmpich.so.12"}), finished.describe()


def test_a_library_the_user_names_wins_and_its_failure_is_said(mpi4py_site: Path) -> None:
    require("openmpi")
    environ = with_mpi4py(mpi4py_site, MPI4PY_LIBMPI="libhelios-absent.so.1")
    finished = run_openmpi(1, WORKER, extra_env=environ, limit=LIMIT)

    [item] = results(finished)
    problem = str(item["problem"])
    assert problem.startswith("mpi4py is installed but cannot load MPI"), problem
    assert "MPI4PY_LIBMPI='libhelios-absent.so.1'" in problem
    assert "libmpi.so.40" not in problem


@pytest.mark.parametrize(
    ("launcher", "names"),
    [(Launcher.OPEN_MPI, ["libmpi.so.40"]), (Launcher.MPICH, ["libmpi.so.12", "libmpich.so.12"])],
)
def test_without_a_loadable_library_each_one_tried_is_named(
    monkeypatch: pytest.MonkeyPatch, launcher: Launcher, names: list[str]
) -> None:
    # No MPI library anywhere: each name is replaced by one that no folder holds.
    monkeypatch.delenv(_mpi.LIBRARY_VARIABLE, raising=False)
    absent = {name: f"libhelios-absent-{index}.so" for index, name in enumerate(names)}
    libraries = {
        key: tuple(absent.get(n, n) for n in value) for key, value in _mpi.LIBRARIES.items()
    }
    monkeypatch.setattr(_mpi, "LIBRARIES", libraries)
    monkeypatch.setattr(_mpi, "DEBIAN_MPICH", absent.get(_mpi.DEBIAN_MPICH, _mpi.DEBIAN_MPICH))

    problem = _mpi.load_library(launcher)

    assert problem is not None
    assert [part.split(" (", 1)[0] for part in problem.removeprefix("tried ").split("; ")] == [
        absent[name] for name in names
    ]
    assert _mpi.LIBRARY_VARIABLE not in os.environ


def test_the_renamed_mpich_library_differs_only_in_its_name() -> None:
    require("mpich")
    path = next(
        folder / "libmpich.so.12"
        for folder in _mpi.search_path()
        if (folder / "libmpich.so.12").is_file()
    )
    image = path.read_bytes()

    renamed = _mpi.renamed(image, b"libmpi.so.12")

    assert renamed is not None
    assert len(renamed) == len(image)
    changed = [index for index, (a, b) in enumerate(zip(image, renamed, strict=True)) if a != b]
    assert changed, "nothing was renamed"
    assert changed[-1] - changed[0] < len("libmpich.so.12")
    assert b"libmpi.so.12\0\0\0" in renamed
    assert _mpi.renamed(b"not an ELF file" * 8, b"libmpi.so.12") is None


def test_pals_ranks_on_several_nodes_meet_where_mpi4py_says(mpi4py_site: Path) -> None:
    # PALS's variables, as its mpiexec sets them for one rank a node, over MPICH's real
    # mpirun (Cray MPICH keeps MPICH's ABI): PBS_NODEFILE is not set, so rank 0's host
    # comes through MPI.
    require("mpich")
    pals = (
        "PALS_RANKID=$PMI_RANK PALS_LOCAL_RANKID=0 PALS_NODEID=$PMI_RANK "
        f"PALS_APID=helios-{uuid.uuid4().hex[:8]} PMI_LOCAL_RANK=0 PMI_LOCAL_SIZE=1"
    )
    worker = [sys.executable, str(Path(__file__).parent / "workers" / "form_group.py")]
    command = ["sh", "-c", f'{pals} exec "$@"', "pals", *worker]
    finished = run_mpich(2, command, extra_env=with_mpi4py(mpi4py_site), limit=LIMIT)

    assert finished.returncode == 0, finished.describe()
    ranks = sorted(results(finished), key=lambda item: int(item["rank"]))
    assert [item["total"] for item in ranks] == [3.0, 3.0], finished.describe()
    assert {item["launcher"] for item in ranks} == {"pals"}, finished.describe()
    assert {item["sources"]["master_addr"] for item in ranks} == {
        "not derived: PBS_NODEFILE is not set; set MASTER_ADDR to rank 0's host, or "
        "install mpi4py (helios-pg[mpi])"
    }, finished.describe()
