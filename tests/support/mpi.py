"""Command lines and environments for the real ``mpirun`` of Open MPI and MPICH.

Debian installs both; ``mpirun.openmpi`` and ``mpirun.mpich`` are their explicit
names (plain ``mpirun`` is whichever the alternatives system picked). The
environments here pin a run on this host to loopback, so that it never looks for
other interfaces or hosts; the commands also place ranks on the virtual nodes of
``tests.support.netns``, reached through its ssh stand-in. Never imports torch.
:func:`tests.support.slurm.require` skips tests when they are missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.procs import DEFAULT_LIMIT, Finished, base_env, run_processes

__all__ = [
    "MPI4PY",
    "OPENMPI_ENV",
    "install_mpi4py",
    "mpich_command",
    "mpich_env",
    "openmpi_command",
    "openmpi_env",
    "run_mpich",
    "run_openmpi",
]

OPENMPI_ENV: Mapping[str, str] = {
    # Loopback only, for the runtime (oob) and the TCP transport (btl).
    "OMPI_MCA_oob_tcp_if_include": "lo",
    "OMPI_MCA_btl_tcp_if_include": "lo",
    # No ssh/rsh lookup: one node, processes started by the local daemon.
    "OMPI_MCA_plm_rsh_agent": "",
    # More processes than cores is expected here; do not bind them to cores.
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_MCA_hwloc_base_binding_policy": "none",
    # Quiet: no "component unused" or fork warnings, no aggregated help banners.
    "OMPI_MCA_btl_base_warn_component_unused": "0",
    "OMPI_MCA_mpi_warn_on_fork": "0",
    "OMPI_MCA_orte_base_help_aggregate": "0",
    # PMIx's shared-memory data store warns in some containers; the hash store does not.
    "PMIX_MCA_gds": "hash",
}
"""Environment for a quick, quiet single-node Open MPI 4.x run."""

MPICH_ENV: Mapping[str, str] = {
    "HYDRA_IFACE": "lo",
}
"""Environment for a single-node MPICH (Hydra) run."""


MPI4PY = "mpi4py==4.1.2"
"""The mpi4py of helios-pg's ``mpi`` extra, as uv.lock pins it."""


def install_mpi4py(target: Path) -> None:
    """Install :data:`MPI4PY` into ``target``, apart from the test venv (``PYTHONPATH``).

    Its wheel loads MPICH by the MPI ABI name ``libmpi.so.12`` and Open MPI by
    ``libmpi.so.40``; nothing else is installed or linked: helios-pg has it load the
    library of the MPI that launched the process.

    Raises:
        RuntimeError: uv could not install it; the message holds uv's output.
    """
    command = ["uv", "pip", "install", "--quiet", "--target", str(target), "--python"]
    done = subprocess.run(
        [*command, sys.executable, MPI4PY], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"cannot install {MPI4PY} apart: {done.stderr.strip()[-500:]}")


def _root_options() -> list[str]:
    return ["--allow-run-as-root"] if os.geteuid() == 0 else []


def openmpi_command(
    nproc: int, *args: str, hosts: str | None = None, rsh_agent: str | Path | None = None
) -> list[str]:
    """``mpirun.openmpi`` for ``nproc`` processes on this host, then ``args``.

    ``hosts`` (``--host``, e.g. ``node1:2,node2:2``) places them on other hosts,
    which mpirun reaches with ``rsh_agent`` (``--mca plm_rsh_agent``), the command
    that stands for ssh.
    """
    options = ["--host", hosts] if hosts else []
    if rsh_agent is not None:
        options += ["--mca", "plm_rsh_agent", str(rsh_agent)]
    return [
        "mpirun.openmpi",
        *_root_options(),
        "--oversubscribe",
        "--bind-to",
        "none",
        *options,
        "-n",
        str(nproc),
        *args,
    ]


def openmpi_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """``procs.base_env`` (gloo on ``lo``) plus :data:`OPENMPI_ENV` and ``extra``."""
    env = base_env(OPENMPI_ENV)
    if extra:
        env.update(extra)
    return env


def mpich_command(
    nproc: int,
    *args: str,
    launcher: str | None = "fork",
    hosts: str | None = "localhost",
    launcher_exec: str | Path | None = None,
) -> list[str]:
    """``mpirun.mpich`` for ``nproc`` processes on ``hosts``, then ``args``.

    Hydra starts its proxy with ``launcher``: ``fork`` (the default here) keeps it
    local even inside a SLURM allocation, where Hydra would otherwise start it with
    ``srun``; ``None`` lets Hydra choose. Inside an allocation pass ``hosts=None``
    too: Hydra then takes the allocation's nodes, and ``srun --nodelist=localhost``
    fails ("Requested node configuration is not available") and leaves mpirun hanging.
    With ``launcher="ssh"``, ``launcher_exec`` is the command that stands for ssh.
    """
    options = ["-launcher", launcher] if launcher else []
    if launcher_exec is not None:
        options += ["-launcher-exec", str(launcher_exec)]
    if hosts:
        options += ["-hosts", hosts]
    return ["mpirun.mpich", *options, "-n", str(nproc), *args]


def mpich_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """``procs.base_env`` (gloo on ``lo``) plus :data:`MPICH_ENV` and ``extra``."""
    env = base_env(MPICH_ENV)
    if extra:
        env.update(extra)
    return env


def run_openmpi(
    nproc: int,
    args: Sequence[str],
    *,
    extra_env: Mapping[str, str] | None = None,
    limit: float = DEFAULT_LIMIT,
) -> Finished:
    """Run ``args`` under ``mpirun.openmpi -n nproc``, killed after ``limit`` s."""
    command = openmpi_command(nproc, *args)
    return run_processes([(command, openmpi_env(extra_env))], limit=limit)[0]


def run_mpich(
    nproc: int,
    args: Sequence[str],
    *,
    extra_env: Mapping[str, str] | None = None,
    limit: float = DEFAULT_LIMIT,
) -> Finished:
    """Run ``args`` under ``mpirun.mpich -n nproc`` on localhost, killed after ``limit`` s."""
    command = mpich_command(nproc, *args)
    return run_processes([(command, mpich_env(extra_env))], limit=limit)[0]
