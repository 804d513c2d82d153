"""Where the ranks of a job meet, and which job they are, when nobody said.

``MASTER_ADDR`` and ``MASTER_PORT`` always win. Where a launcher states its own
meeting point (AzureML's ``AZ_BATCH_MASTER_NODE``, Kubeflow Trainer's
``PET_MASTER_ADDR`` and ``PET_MASTER_PORT``), that is used next. Under srun, mpirun and
the launchers that list their hosts, when they are unset, they are derived the same
way on every rank:

- the address is loopback when every rank runs on one node, else the host of rank 0:
  the first host of the srun step's nodelist (the first line of ``SLURM_HOSTFILE``
  under ``--distribution=arbitrary``), the first compute host of an LSF job
  (``LSB_DJOB_RANKFILE``, else ``LSB_MCPU_HOSTS``), the first host of SageMaker's
  ``SM_HOSTS``, the first line of PBS's ``PBS_NODEFILE`` under PALS; under any other
  mpirun on several nodes it cannot be known from the environment alone;
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

import socket
import zlib
from dataclasses import dataclass
from pathlib import Path

from helios_env._environ import Getter
from helios_env._errors import HostlistError, LauncherEnvError
from helios_env._hostlist import first_host
from helios_env._hostlists import file_first_host, first_entry, given_meeting, listed_hosts
from helios_env._hydra import hydra_control, proxy_ancestor
from helios_env._info import DistributedInfo
from helios_env._integers import read_int
from helios_env._launcher import (
    SPECS,
    GivenMeeting,
    Hostfile,
    HostsJson,
    Launcher,
    LauncherSpec,
    LsfHosts,
    SlurmHosts,
)
from helios_env._placement import stated_nodes
from helios_env._sources import ASSUMED

__all__ = [
    "LOOPBACK",
    "MPI4PY_HINT",
    "Derived",
    "derive",
    "ephemeral_ports",
    "port_range",
    "read_master",
]

LOOPBACK = "127.0.0.1"
MPI4PY_HINT = "install mpi4py (helios-pg[mpi])"
"""What an address that mpirun does not say asks for: helios-pg then learns it through MPI."""
_EPHEMERAL_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LINUX_EPHEMERAL = (32768, 60999)
_LOWEST = 10000  # below: well-known services and what people pick by hand
# Hydra starts every rank of a node below one proxy process, whatever wraps the program
# (a shell script, uv run, a profiler): on one node that proxy names the job.
_LSF = SPECS[Launcher.LSF]


@dataclass(frozen=True, slots=True)
class Derived:
    """The rendezvous address, port and job identity, each with where it came from."""

    addr: str | None
    addr_source: str
    port: int | None
    port_source: str
    job: str | None
    job_source: str


def read_master(get: Getter) -> tuple[str | None, int | None]:
    """``MASTER_ADDR`` and ``MASTER_PORT`` as set, validated: the one place both are read."""
    addr = get("MASTER_ADDR")
    if addr is not None and not addr.strip():
        message = (
            f"MASTER_ADDR must be the rank-0 host's name or address, got MASTER_ADDR={addr!r}; "
            "set it or unset it"
        )
        raise LauncherEnvError("MASTER_ADDR", addr, message)
    port = read_int(get, "MASTER_PORT", minimum=1)
    if port is not None and port > 65535:
        raw = get("MASTER_PORT")
        message = f"MASTER_PORT must be a TCP port in 1..65535, got MASTER_PORT={raw!r}"
        raise LauncherEnvError("MASTER_PORT", raw, message)
    return addr, port


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
    """The job's identity, shown as its launcher's entry says, and where it came from."""
    spec = SPECS.get(launcher)
    if spec is not None and spec.job and not spec.mpi:
        # Each part of the job's name from the first of its variables that is set.
        names = [
            next((name for name in part if get(name) is not None), part[-1]) for part in spec.job
        ]
        values = [get(name) for name in names]
        if None in values:
            return None, f"not known: {' or '.join(names)} is not set"
        return spec.job_format.format(*values), ", ".join(names)
    if spec is None:
        return None, "no launcher, so no job"
    if not spec.mpi:
        return None, f"not known: {launcher} sets no job id"
    for name in spec.job[0]:
        value = get(name)
        if value:
            return spec.job_format.format(value), name
    proxy = proxy_ancestor()
    if proxy is not None:
        control = hydra_control(proxy)
        if control is not None:
            source = "the launcher's proxy (--control-port)"
            return f"{launcher} job of mpiexec at {control}", source
        if one_node:
            host = socket.gethostname()
            return f"{launcher} job of proxy pid {proxy} on {host}", "the launcher's proxy"
    return None, f"not known: {launcher} sets no job id"


def _address(get: Getter, spec: LauncherSpec, one_node: str | None) -> tuple[str | None, str]:
    """Rank 0's host, derived from what the launcher says of its hosts."""
    if one_node is not None:
        return LOOPBACK, f"derived: one node ({one_node})"
    if isinstance(spec.hosts, SlurmHosts):
        return _slurm_first(get, spec.hosts)
    if isinstance(spec.hosts, Hostfile):  # PBS's: an MPI job, whose rank 0 mpi4py can tell
        host, why = file_first_host(get, spec.hosts)
        return host, why if host is not None else f"{why}, or {MPI4PY_HINT}"
    if isinstance(spec.hosts, HostsJson):
        listed = listed_hosts(get, spec.hosts)
        if listed is not None:
            return listed[0], f"derived: first host of {spec.hosts.hosts}"
    lsf = _LSF.hosts
    if isinstance(lsf, LsfHosts) and (spec is _LSF or get(_LSF.names.world_size) is not None):
        found = _lsf_first_compute_host(get, lsf)
        if found is not None:
            return found
    return None, (
        f"not derived: {spec.launcher} ranks on several nodes; set MASTER_ADDR to rank 0's "
        f"host, or {MPI4PY_HINT}"
    )


def _slurm_first(get: Getter, hosts: SlurmHosts) -> tuple[str | None, str]:
    """Rank 0's host in an srun step: the first of its nodelist, or of its hostfile."""
    if (get(hosts.distribution) or "").split(",", 1)[0].strip() == "arbitrary":
        return _arbitrary_first(get, hosts)
    for name in hosts.nodelists:
        raw = get(name)
        if raw is None:
            continue
        try:
            return first_host(raw), f"derived: first host of {name}"
        except HostlistError as exc:
            message = f"{name} is not a SLURM hostlist, got {name}={raw!r}: {exc.reason}"
            raise LauncherEnvError(name, raw, message) from None
    return None, f"not derived: no {hosts.nodelists[0]}; set MASTER_ADDR"


def _arbitrary_first(get: Getter, hosts: SlurmHosts) -> tuple[str | None, str]:
    """Rank 0's host under ``srun --distribution=arbitrary``: line 1 of the hostfile."""
    by = f"{hosts.distribution}=arbitrary places rank 0 by {hosts.hostfile}"
    path = get(hosts.hostfile)
    if not path:
        return None, f"not derived: {by}, which is not set; set MASTER_ADDR to rank 0's host"
    entry, problem = first_entry(path)
    if problem is not None:
        return None, (
            f"not derived: {by}={path!r}, which cannot be read on this node ({problem}); set "
            "MASTER_ADDR to rank 0's host"
        )
    if entry is not None:
        try:
            return first_host(entry), f"derived: first host of {hosts.hostfile} (arbitrary)"
        except HostlistError as exc:
            message = f"{hosts.hostfile} {path!r} starts with {entry!r}: {exc.reason}"
            raise LauncherEnvError(hosts.hostfile, path, message) from None
    return None, f"not derived: {hosts.hostfile}={path!r} lists no host; set MASTER_ADDR"


def _lsf_first_compute_host(get: Getter, hosts: LsfHosts) -> tuple[str, str] | None:
    """The first compute host of an LSF job: its rankfile lists the launch node first."""
    path = get(hosts.rankfile)
    if path:
        try:
            lines = [line.strip() for line in Path(path).read_text().splitlines()]
        except (OSError, UnicodeDecodeError):
            lines = []
        lines = [host for host in lines if host]
        if lines:
            return lines[min(1, len(lines) - 1)], f"derived: first compute host of {hosts.rankfile}"
    names = (get(hosts.slots) or "").split()[0::2]
    if names:
        return names[min(1, len(names) - 1)], f"derived: first compute host of {hosts.slots}"
    return None


def _port(
    get: Getter, spec: LauncherSpec, job: str | None, job_source: str, *, one_node: bool
) -> tuple[int | None, str]:
    if job is None:
        return None, f"not derived: {job_source}; set MASTER_PORT"
    # Every rank must derive the same port: the kernel's own range is read only when
    # every rank runs on this host; across nodes, Linux's default range is assumed.
    ephemeral = ephemeral_ports() if one_node else _LINUX_EPHEMERAL
    first, count = port_range(ephemeral)
    numbers = [get(part[0]) or "" for part in spec.job]
    if len(numbers) == 2 and all(number.isdigit() for number in numbers):
        # A numbered job and step (SLURM's): consecutive steps of one job, and
        # consecutive jobs, land on different ports.
        seed = int(numbers[0]) * 31 + int(numbers[1])
    else:
        seed = zlib.crc32(job.encode())
    outside = f"outside the ephemeral ports {ephemeral[0]}-{ephemeral[1]}"
    return first + seed % count, f"derived: {job_source} ({outside})"


def _one_node(
    get: Getter, spec: LauncherSpec, info: DistributedInfo, sources: dict[str, str]
) -> str | None:
    """Why every rank of the job runs on this node; None when they may not."""
    if spec.nodes or isinstance(spec.hosts, HostsJson):
        count = stated_nodes(get, [spec]).count
        if count is None or count.value != 1:
            return None
        return f"{count.variable}={get(count.variable)}"
    local = sources.get("local_world_size")
    known = local is not None and not local.startswith(ASSUMED)
    return local if known and info.local_world_size == info.world_size else None


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
        LauncherEnvError: ``MASTER_ADDR``, ``MASTER_PORT`` or a SLURM nodelist is
            malformed.
    """
    addr, port = read_master(get)
    addr_source = "not set" if addr is None else "MASTER_ADDR"
    port_source = "not set" if port is None else "MASTER_PORT"
    spec = SPECS.get(launcher)
    if spec is None or not spec.derives:
        return Derived(addr, addr_source, port, port_source, *_job(get, launcher, one_node=False))
    one_node = _one_node(get, spec, info, sources)
    job, job_source = _job(get, launcher, one_node=one_node is not None)
    if isinstance(spec.hosts, GivenMeeting):
        # The launcher's own meeting point, where it states one.
        given_addr, given_port = given_meeting(get, spec.hosts)
        if addr is None and given_addr is not None:
            addr, addr_source = given_addr
        if port is None and given_port is not None:
            port, port_source = given_port
    if addr is None:
        addr, addr_source = _address(get, spec, one_node)
    if port is None:
        port, port_source = _port(get, spec, job, job_source, one_node=one_node is not None)
    return Derived(addr, addr_source, port, port_source, job, job_source)
