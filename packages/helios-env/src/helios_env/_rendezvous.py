"""Where the ranks of a job meet, and which job they are, when nobody said.

``MASTER_ADDR`` and ``MASTER_PORT`` always win. Under srun and mpirun, when they are
unset, they are derived the same way on every rank:

- the address is loopback when every rank runs on one node, else the host of rank 0:
  the first host of the srun step's nodelist (the first line of ``SLURM_HOSTFILE``
  under ``--distribution=arbitrary``), the first compute host of an LSF job
  (``LSB_DJOB_RANKFILE``, else ``LSB_MCPU_HOSTS``); under any other mpirun on several
  nodes it cannot be known from the environment alone;
- the port is computed from the job's identity (the SLURM job and step, the MPI job)
  into a range outside the kernel's ephemeral ports, so a port the kernel handed to
  some connection is not taken, and two steps of one job get different ports. The
  kernel's range is read when every rank is on this host; across nodes every rank
  assumes Linux's default, so that all derive the same port.

The job's identity also lets the ranks of one job recognise each other at the store.
MPICH's Hydra sets no job variable: its proxy on each node is started with the
address of the ``mpiexec`` that runs the job (``--control-port host:port``), which
every rank on every node shares.
"""

from __future__ import annotations

import itertools
import os
import socket
import zlib
from dataclasses import dataclass
from pathlib import Path

from helios_env._environ import Getter
from helios_env._errors import HostlistError, LauncherEnvError
from helios_env._hostlist import first_host
from helios_env._info import DistributedInfo
from helios_env._launcher import MPI_LAUNCHERS, Launcher
from helios_env._variables import ASSUMED_ONE_NODE, read_int

__all__ = ["LOOPBACK", "Derived", "derive", "ephemeral_ports", "port_range"]

LOOPBACK = "127.0.0.1"
_EPHEMERAL_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LINUX_EPHEMERAL = (32768, 60999)
_LOWEST = 10000  # below: well-known services and what people pick by hand
_DERIVING = frozenset({Launcher.SLURM, *(entry[0] for entry in MPI_LAUNCHERS)})
# Variables that name one MPI job, in the order they are tried, for each flavour.
# LSF's LSB_JOBID names the bsub job, not one jsrun step of it: only PMIx's namespace
# tells two steps apart. Hydra (MPICH) sets no job variable at all.
_MPI_JOB_VARIABLES = {
    Launcher.OPEN_MPI: ("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "OMPI_MCA_orte_ess_jobid"),
    Launcher.MVAPICH2: ("MPIRUN_ID", "PMI_JOBID"),
    Launcher.LSF: ("PMIX_NAMESPACE",),
    Launcher.MPICH: ("I_MPI_HYDRA_UUID", "PMI_JOBID"),
}
# Hydra starts every rank of a node below one proxy process, whatever wraps the program
# (a shell script, uv run, a profiler): on one node that proxy names the job.
_PROXIES = frozenset({b"hydra_pmi_proxy", b"pmi_proxy"})
_PROC = Path("/proc")
NODELIST_VARIABLES = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")


@dataclass(frozen=True, slots=True)
class Derived:
    """The rendezvous address, port and job identity, each with where it came from."""

    addr: str | None
    addr_source: str
    port: int | None
    port_source: str
    job: str | None
    job_source: str


def ephemeral_ports(path: Path = _EPHEMERAL_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range: Linux's ``ip_local_port_range``, else its default.

    Args:
        path: The file to read.

    Returns:
        The first and last port the kernel hands out to outgoing connections.
    """
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return _LINUX_EPHEMERAL
    return (low, high) if 0 < low <= high <= 65535 else _LINUX_EPHEMERAL


def port_range(ephemeral: tuple[int, int]) -> tuple[int, int]:
    """The widest range of ports from 10000 up that avoids ``ephemeral``.

    Args:
        ephemeral: The kernel's ephemeral range, first and last port.

    Returns:
        The first port and the number of ports of the range derived ports fall in.
    """
    low, high = ephemeral
    below = (_LOWEST, max(0, low - _LOWEST))
    above = (max(_LOWEST, high + 1), max(0, 65535 - max(_LOWEST, high + 1) + 1))
    best = max(below, above, key=lambda candidate: candidate[1])
    if best[1] < 100:  # an ephemeral range that covers nearly everything
        return _LOWEST, 65535 - _LOWEST + 1
    return best


def _job(get: Getter, launcher: Launcher, *, one_node: bool) -> tuple[str | None, str]:
    if launcher is Launcher.TORCHRUN:
        run = get("TORCHELASTIC_RUN_ID")
        return f"torchrun run {run}", "TORCHELASTIC_RUN_ID"
    if launcher is Launcher.SLURM:
        job_name = "SLURM_JOB_ID" if get("SLURM_JOB_ID") is not None else "SLURM_JOBID"
        step_name = "SLURM_STEP_ID" if get("SLURM_STEP_ID") is not None else "SLURM_STEPID"
        job, step = get(job_name), get(step_name)
        if job is not None and step is not None:
            return f"SLURM job {job} step {step}", f"{job_name}, {step_name}"
        return None, f"not known: {job_name} or {step_name} is not set"
    for name in _MPI_JOB_VARIABLES.get(launcher, ()):
        value = get(name)
        if value:
            return f"{launcher} job {value}", name
    if launcher in _DERIVING:
        proxy = _proxy_ancestor()
        if proxy is not None:
            control = _hydra_control(proxy)
            if control is not None:
                source = "the launcher's proxy (--control-port)"
                return f"{launcher} job of mpiexec at {control}", source
            if one_node:
                host = socket.gethostname()
                return f"{launcher} job of proxy pid {proxy} on {host}", "the launcher's proxy"
    return None, f"not known: {launcher} sets no job id"


def _hydra_control(pid: int, proc: Path = _PROC) -> str | None:
    """``host:port (pgid N)`` of the mpiexec behind a Hydra proxy, from its command line."""
    try:
        args = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    found: dict[bytes, str] = {}
    for flag, value in itertools.pairwise(args):
        if flag in (b"--control-port", b"--pgid") and value:
            found[flag] = value.decode(errors="replace")
    control = found.get(b"--control-port")
    if control is None:
        return None
    return f"{control} (pgid {found.get(b'--pgid', '0')})"


def _proxy_ancestor(proc: Path = _PROC) -> int | None:
    """The pid of the nearest ancestor that is an MPI launcher's proxy, on Linux."""
    pid = os.getppid()
    for _ in range(32):
        try:
            stat = (proc / str(pid) / "stat").read_bytes()
        except OSError:
            return None
        name, _, rest = stat.partition(b" (")[2].rpartition(b") ")
        if name in _PROXIES:
            return pid
        fields = rest.split()
        if len(fields) < 2 or not fields[1].isdigit() or int(fields[1]) <= 1:
            return None
        pid = int(fields[1])
    return None


def _address(
    get: Getter, launcher: Launcher, sources: dict[str, str], *, one_node: bool
) -> tuple[str | None, str]:
    addr = get("MASTER_ADDR")
    if addr is not None:
        return addr, "MASTER_ADDR"
    if launcher not in _DERIVING:
        return None, "not set"
    if launcher is Launcher.SLURM:
        if one_node:
            return LOOPBACK, "derived: one node (SLURM_STEP_NUM_NODES=1)"
        distribution = (get("SLURM_DISTRIBUTION") or "").split(",", 1)[0].strip()
        if distribution == "arbitrary":
            return _arbitrary_first(get)
        for name in NODELIST_VARIABLES:
            raw = get(name)
            if raw is None:
                continue
            try:
                return first_host(raw), f"derived: first host of {name}"
            except HostlistError as exc:
                message = f"{name} is not a SLURM hostlist, got {name}={raw!r}: {exc.reason}"
                raise LauncherEnvError(name, raw, message) from None
        return None, "not derived: no SLURM_STEP_NODELIST; set MASTER_ADDR"
    if one_node:
        return LOOPBACK, f"derived: one node ({sources['local_world_size']})"
    if launcher is Launcher.LSF or get("JSM_NAMESPACE_SIZE") is not None:
        lsf = _lsf_first_compute_host(get)
        if lsf is not None:
            return lsf
    return None, (
        f"not derived: {launcher} ranks on several nodes; set MASTER_ADDR to rank 0's "
        "host, or install mpi4py (helios-pg[mpi])"
    )


def _arbitrary_first(get: Getter) -> tuple[str | None, str]:
    """Rank 0's host under ``srun --distribution=arbitrary``: line 1 of SLURM_HOSTFILE."""
    path = get("SLURM_HOSTFILE")
    if not path:
        return None, (
            "not derived: SLURM_DISTRIBUTION=arbitrary places rank 0 by SLURM_HOSTFILE, "
            "which is not set; set MASTER_ADDR to rank 0's host"
        )
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        return None, (
            f"not derived: SLURM_DISTRIBUTION=arbitrary places rank 0 by SLURM_HOSTFILE="
            f"{path!r}, which cannot be read on this node ({exc}); set "
            "MASTER_ADDR to rank 0's host"
        )
    for line in lines:
        entry = line.split("#", 1)[0].strip()
        if entry:
            try:
                return first_host(entry), "derived: first host of SLURM_HOSTFILE (arbitrary)"
            except HostlistError as exc:
                message = f"SLURM_HOSTFILE {path!r} starts with {entry!r}: {exc.reason}"
                raise LauncherEnvError("SLURM_HOSTFILE", path, message) from None
    return None, f"not derived: SLURM_HOSTFILE={path!r} lists no host; set MASTER_ADDR"


def _lsf_first_compute_host(get: Getter) -> tuple[str, str] | None:
    """The first compute host of an LSF job: its rankfile lists the launch node first."""
    path = get("LSB_DJOB_RANKFILE")
    if path:
        try:
            hosts = [line.strip() for line in Path(path).read_text().splitlines()]
        except (OSError, UnicodeDecodeError):
            hosts = []
        hosts = [host for host in hosts if host]
        if hosts:
            return hosts[min(1, len(hosts) - 1)], "derived: first compute host of LSB_DJOB_RANKFILE"
    words = (get("LSB_MCPU_HOSTS") or "").split()
    names = words[0::2]
    if names:
        return names[min(1, len(names) - 1)], "derived: first compute host of LSB_MCPU_HOSTS"
    return None


def _port(
    get: Getter, launcher: Launcher, job: str | None, job_source: str, *, one_node: bool
) -> tuple[int | None, str]:
    port = read_int(get, "MASTER_PORT", minimum=1)
    if port is not None:
        return port, "MASTER_PORT"
    if launcher not in _DERIVING:
        return None, "not set"
    if job is None:
        return None, f"not derived: {job_source}; set MASTER_PORT"
    # Every rank must derive the same port: the kernel's own range is read only when
    # every rank runs on this host; across nodes, Linux's default range is assumed.
    ephemeral = ephemeral_ports() if one_node else _LINUX_EPHEMERAL
    first, count = port_range(ephemeral)
    job_id, step_id = get("SLURM_JOB_ID") or "", get("SLURM_STEP_ID") or ""
    if launcher is Launcher.SLURM and job_id.isdigit() and step_id.isdigit():
        # Consecutive steps of one job, and consecutive jobs, land on different ports.
        seed = int(job_id) * 31 + int(step_id)
    else:
        seed = zlib.crc32(job.encode())
    outside = f"outside the ephemeral ports {ephemeral[0]}-{ephemeral[1]}"
    return first + seed % count, f"derived: {job_source} ({outside})"


def derive(
    get: Getter, launcher: Launcher, info: DistributedInfo, sources: dict[str, str]
) -> Derived:
    """Derive the rendezvous of this process's job, each part with its source.

    Args:
        get: Looks a variable up by name.
        launcher: The detected launcher.
        info: The resolved ranks and sizes.
        sources: Where each field of ``info`` came from.

    Returns:
        Address and port (None where neither set nor derivable) and the job's identity.

    Raises:
        LauncherEnvError: ``MASTER_PORT`` or a SLURM nodelist is malformed.
    """
    if launcher is Launcher.SLURM:
        one_node = read_int(get, "SLURM_STEP_NUM_NODES", minimum=1) == 1
    else:
        known = sources.get("local_world_size") != ASSUMED_ONE_NODE
        one_node = known and info.local_world_size == info.world_size
    job, job_source = _job(get, launcher, one_node=one_node)
    addr, addr_source = _address(get, launcher, sources, one_node=one_node)
    port, port_source = _port(get, launcher, job, job_source, one_node=one_node)
    return Derived(addr, addr_source, port, port_source, job, job_source)
