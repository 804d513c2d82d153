"""Private SLURM clusters for tests (one node, or virtual nodes), and launcher checks.

:func:`private_cluster` starts ``munged``, ``slurmctld`` and ``slurmd`` in the
foreground, each in its own session, with everything (configuration, munge key and
socket, state, spool, logs) in one temporary directory and with controller and node
ports picked free at start. The node is this host under its short hostname,
declared with :data:`DEFAULT_CPUS` CPUs (``SlurmdParameters=config_overrides``) so
that ``srun -n 3`` runs on a two-core machine. No cgroups, no accounting, no
``MpiDefault``: ``srun --mpi=pmi2`` and ``--mpi=pmix`` are asked for explicitly.

:func:`virtual_cluster` runs the same daemons on the virtual nodes of
``tests.support.netns``: slurmctld on the first node, at its address, and one slurmd
per node, registered under the node's name and address, each declaring
:data:`VIRTUAL_CPUS` CPUs. Clients run on the first node.

The daemons run as root (``SlurmUser=root``): :func:`require` skips the test when
the tools are missing or this process is not root, and fails it instead when the
environment variable ``CI`` is ``"true"``. ``bash tools/install_launchers.sh``
installs the tools. This module never imports torch.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.netns import VirtualNodes, with_cgroups
from tests.support.procs import (
    Finished,
    base_env,
    free_port,
    kill_until_gone,
    marked_processes,
    run_processes,
)

__all__ = [
    "INSTALL_HINT",
    "PREEMPT_PARTITION",
    "TOOLS",
    "Cluster",
    "ClusterError",
    "missing_tools",
    "private_cluster",
    "require",
    "virtual_cluster",
]

INSTALL_HINT = "bash tools/install_launchers.sh"
DEFAULT_CPUS = 8
"""CPUs the node declares, whatever the machine has."""
VIRTUAL_CPUS = 4
"""CPUs each virtual node declares (:func:`virtual_cluster`)."""
PARTITION = "debug"
PREEMPT_PARTITION = "high"
"""On :func:`virtual_cluster`: a job here preempts (requeues) the default partition's jobs."""
START_LIMIT = 30.0
"""Seconds :func:`private_cluster` waits for the cluster to run a step."""
STOP_LIMIT = 10.0
MARKER = "HELIOS_TEST_CLUSTER"
"""Set, to the cluster's directory, in the daemons' and the clients' environment."""

TOOLS: Mapping[str, tuple[str, ...]] = {
    "slurm": ("srun", "salloc", "sbatch", "sinfo", "scancel", "slurmctld", "slurmd", "munged"),
    "openmpi": ("mpirun.openmpi",),
    "mpich": ("mpirun.mpich",),
}
"""Commands each launcher group needs; :func:`require` also takes a single command."""


class ClusterError(RuntimeError):
    """The private cluster did not start; the message holds the daemons' logs."""


def _commands(names: Sequence[str]) -> list[str]:
    commands: list[str] = []
    for name in names:
        commands.extend(TOOLS.get(name, (name,)))
    return commands


def missing_tools(*names: str) -> list[str]:
    """The commands of ``names`` (groups of :data:`TOOLS` or commands) not on PATH."""
    return [command for command in _commands(names or tuple(TOOLS)) if not shutil.which(command)]


def _unusable(names: Sequence[str]) -> str | None:
    missing = missing_tools(*names)
    if missing:
        return f"{', '.join(missing)} not installed; `{INSTALL_HINT}` installs it"
    if "slurm" in (names or tuple(TOOLS)) and os.geteuid() != 0:
        return "the private SLURM cluster runs slurmd as root; run the tests as root"
    return None


def require(*names: str) -> None:
    """Skip the calling test unless the launchers ``names`` can run here.

    ``names`` are groups of :data:`TOOLS` (``"slurm"``, ``"openmpi"``, ``"mpich"``) or
    single commands (``"mpirun.openmpi"``). Under ``CI=true`` a missing launcher fails
    the test instead: CI installs them with ``bash tools/install_launchers.sh``.
    """
    reason = _unusable(names)
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


def short_hostname() -> str:
    """This host's name up to the first dot: the name slurmd registers under."""
    return socket.gethostname().split(".", 1)[0]


@dataclass
class Cluster:
    """A running private cluster: what tests need to submit work to it."""

    root: Path
    """The cluster's directory: configuration, munge socket, state and logs."""
    conf: Path
    """Its ``slurm.conf``."""
    env: dict[str, str]
    """An environment for srun/salloc/sbatch/sinfo against this cluster: the test
    process's environment without launcher variables (see ``procs.base_env``), plus
    ``SLURM_CONF``; on virtual nodes, their clean login environment instead."""
    hostname: str
    """The node's name (this host's short hostname); on virtual nodes, the first's."""
    partition: str = PARTITION
    ports: dict[str, int] = field(default_factory=dict)
    """``slurmctld`` and ``slurmd``: the ports chosen at start."""
    nodes: tuple[str, ...] = ()
    """Every node's name, in the order of ``slurm.conf``; empty for :func:`private_cluster`'s
    single node (:attr:`hostname`)."""
    prefix: tuple[str, ...] = ()
    """The command line that :meth:`run` puts before each command: where clients run
    (on the first virtual node for :func:`virtual_cluster`)."""

    def run(
        self,
        args: Sequence[str],
        *,
        limit: float = 60.0,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
    ) -> tuple[int, str, str]:
        """Run a command (``srun ...``) against the cluster, killed after ``limit`` s.

        ``env`` adds to (and overrides) :attr:`env`.

        Returns:
            The exit status, stdout and stderr.

        Raises:
            TimeoutError: The command ran past ``limit``; its jobs are cancelled and
                the message holds the output so far and the daemons' logs.
        """
        finished = self.finish(args, limit=limit, env=env, cwd=cwd)
        return finished.returncode, finished.stdout, finished.stderr

    def finish(
        self,
        args: Sequence[str],
        *,
        limit: float = 60.0,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
    ) -> Finished:
        """Like :meth:`run`, returning a :class:`~tests.support.procs.Finished`."""
        full_env = dict(self.env)
        if env:
            full_env.update(env)
        try:
            return run_processes([([*self.prefix, *args], full_env)], limit=limit, cwd=cwd)[0]
        except TimeoutError as error:
            self.cancel_all()
            raise TimeoutError(f"{error}\n{self.logs()}") from None

    def cancel_all(self, limit: float = 15.0) -> bool:
        """Cancel every job of this cluster and wait until the queue is empty.

        A job still completing holds back the scheduler, so the next test would wait.

        Returns:
            Whether the queue emptied within ``limit`` seconds (best effort: never raises).
        """
        deadline = time.monotonic() + limit
        cancel = [*self.prefix, "scancel", f"--partition={self.partition}"]
        queue = [*self.prefix, "squeue", "-h", "-o", "%i"]
        while time.monotonic() < deadline:
            left = max(1.0, deadline - time.monotonic())
            try:
                run_processes([(cancel, self.env)], limit=left)
                (listed,) = run_processes([(queue, self.env)], limit=left)
            except TimeoutError:
                return False
            if listed.returncode == 0 and not listed.stdout.strip():
                return True
            time.sleep(0.2)
        return False

    def logs(self, lines: int = 40) -> str:
        """The last ``lines`` lines of each daemon's log, for failure messages."""
        parts = []
        for path in sorted((self.root / "log").glob("*")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name} ---\n" + "\n".join(text))
        return "\n".join(parts)


def _write_conf(
    root: Path,
    nodes: Sequence[tuple[str, str]],
    cpus: int,
    ports: Mapping[str, int],
    extra: Sequence[str] = (),
    *,
    kill_wait: int = 2,
    partitions: Sequence[str] = (),
) -> Path:
    """Write ``slurm.conf`` for ``nodes`` (name, address); the first runs the controller.

    With several nodes, each slurmd has its own spool directory, pid file and log
    (``%n``: the node's name), since the nodes share this file system. ``extra``
    lines go before the nodes; ``partitions`` are added to the default one (their
    ``PartitionName=`` lines, or options of the default one where they start with a
    space).
    """
    user = "root"
    conf = root / "slurm.conf"
    (host, addr), names = nodes[0], ",".join(name for name, _ in nodes)
    node = "-%n" if len(nodes) > 1 else ""
    spool = f"{root}/spool/%n" if len(nodes) > 1 else f"{root}/spool"
    options = "".join(line for line in partitions if line.startswith(" "))
    more = "".join(f"{line}\n" for line in partitions if not line.startswith(" "))
    node_lines = "\n".join(
        [
            *extra,
            *(f"NodeName={name} NodeAddr={a} CPUs={cpus} State=UNKNOWN" for name, a in nodes),
        ]
    )
    conf.write_text(
        f"""\
ClusterName=helios-test
SlurmctldHost={host}({addr})
SlurmctldPort={ports["slurmctld"]}
SlurmdPort={ports["slurmd"]}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket
StateSaveLocation={root}/state
SlurmdSpoolDir={spool}
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd{node}.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd{node}.log
TmpFS={root}/tmp
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
InactiveLimit=0
KillWait={kill_wait}
MessageTimeout=10
{node_lines}
PartitionName={PARTITION} Nodes={names} Default=YES MaxTime=INFINITE State=UP{options}
{more}"""
    )
    return conf


def _start(args: Sequence[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen(
            list(args),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(proc: subprocess.Popen[bytes], limit: float = STOP_LIMIT) -> None:
    """SIGTERM the process's session, SIGKILL it after ``limit`` s, and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=limit)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _kill_strays(marker: str, limit: float = STOP_LIMIT) -> None:
    """SIGKILL every process whose environment holds ``MARKER=marker``.

    slurmd double-forks slurmstepd, so it and its tasks are in no session of ours.
    """
    find = functools.partial(marked_processes, MARKER, marker)
    kill_until_gone(find, ClusterError, "processes of the private cluster", limit)


def _wait_ready(cluster: Cluster, daemons: Sequence[subprocess.Popen[bytes]], limit: float) -> None:
    """Wait until a step runs on every node; raise ClusterError after ``limit`` s.

    The step is ``srun -n1 true`` on a single node, and ``srun -N<nodes> hostname``,
    which must print every node's name, on several.
    """
    deadline = time.monotonic() + limit
    probe = (
        ["srun", f"-N{len(cluster.nodes)}", "hostname"]
        if cluster.nodes
        else ["srun", "-n1", "true"]
    )
    last = ""
    while time.monotonic() < deadline:
        for proc in daemons:
            if proc.poll() is not None:
                message = f"{proc.args!r} exited with {proc.returncode}\n{cluster.logs()}"
                raise ClusterError(message)
        left = max(1.0, deadline - time.monotonic())
        try:
            code, out, err = cluster.run(["sinfo", "-h", "-o", "%T"], limit=min(5.0, left))
            if code == 0 and out.strip() == "idle":
                code, out, err = cluster.run(probe, limit=min(10.0, left))
                if code == 0 and sorted(out.split()) == sorted(cluster.nodes):
                    return
            last = f"exit status {code}\n{out}{err}"
        except TimeoutError as error:
            last = str(error)
        time.sleep(0.1)
    message = f"the private cluster was not ready after {limit:.0f} s: {last}\n{cluster.logs()}"
    raise ClusterError(message)


def _make_root(prefix: str) -> Path:
    """The cluster's directory, with its subdirectories and a fresh munge key."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    # munged requires every directory above its socket to be searchable by all.
    root.chmod(0o755)
    for name in ("munge", "state", "spool", "log", "run", "tmp"):
        (root / name).mkdir()
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    return root


@contextlib.contextmanager
def _running(
    cluster: Cluster,
    start_slurm: Callable[[], list[subprocess.Popen[bytes]]],
    *,
    limit: float,
    keep: bool,
) -> Iterator[Cluster]:
    """Start munged, then ``start_slurm``'s daemons (slurmctld first); stop all on exit."""
    root = cluster.root
    munge_dir = root / "munge"
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        daemons.append(
            _start(
                [
                    "munged",
                    "--foreground",
                    f"--socket={munge_dir}/munge.socket",
                    f"--key-file={munge_dir}/munge.key",
                    f"--pid-file={root}/run/munged.pid",
                    f"--seed-file={munge_dir}/munged.seed",
                    f"--log-file={root}/log/munged.log",
                ],
                cluster.env,
                root / "log" / "munged.out",
            )
        )
        # The daemons need the socket before they start; munged makes it in ~0.1 s.
        deadline = time.monotonic() + limit
        while not (munge_dir / "munge.socket").exists():
            if daemons[0].poll() is not None or time.monotonic() > deadline:
                message = f"munged did not create its socket\n{cluster.logs()}"
                raise ClusterError(message)
            time.sleep(0.02)
        daemons.extend(start_slurm())
        _wait_ready(cluster, daemons[1:], max(1.0, deadline - time.monotonic()))
        yield cluster
    finally:
        try:
            if len(daemons) > 2 and daemons[1].poll() is None:
                cluster.cancel_all()
            # slurmd first, so that it starts no more steps; munged last.
            for proc in reversed(daemons[1:]):
                _stop(proc)
            _kill_strays(str(root))
            for proc in daemons[:1]:
                _stop(proc)
        finally:
            if not keep:
                shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def private_cluster(
    *, cpus: int = DEFAULT_CPUS, limit: float = START_LIMIT, keep: bool = False
) -> Iterator[Cluster]:
    """Start a private single-node SLURM cluster; stop it, and all it ran, on exit.

    Args:
        cpus: The CPUs the node declares (more than the machine has is fine).
        limit: Seconds to wait for the cluster to run ``srun -n1 true``.
        keep: Keep the cluster's directory (logs) after it stops.

    Raises:
        ClusterError: A daemon exited or the cluster was not ready within ``limit``.
    """
    root = _make_root("helios-slurm-")
    host = short_hostname()
    ports = {"slurmctld": free_port(), "slurmd": free_port()}
    conf = _write_conf(root, [(host, "127.0.0.1")], cpus, ports)
    env = base_env({"SLURM_CONF": str(conf), MARKER: str(root)})
    cluster = Cluster(root=root, conf=conf, env=env, hostname=host, ports=ports)

    def start_slurm() -> list[subprocess.Popen[bytes]]:
        log = root / "log"
        return [
            _start(["slurmctld", "-D", "-i"], env, log / "slurmctld.out"),
            _start(["slurmd", "-D", "-N", host], env, log / "slurmd.out"),
        ]

    with _running(cluster, start_slurm, limit=limit, keep=keep):
        yield cluster


@contextlib.contextmanager
def virtual_cluster(
    nodes: VirtualNodes,
    *,
    cpus: int = VIRTUAL_CPUS,
    limit: float = START_LIMIT,
    keep: bool = False,
) -> Iterator[Cluster]:
    """Start a SLURM cluster on virtual nodes; stop it, and all it ran, on exit.

    ``slurmctld`` runs on the first node and listens on its address; each node runs
    ``slurmd -D -N <name>`` in its namespace, registered at its address; munged runs
    on this host (its unix socket is reachable from every node). The clients
    (:meth:`Cluster.run`) run on the first node, in :meth:`VirtualNodes.env`'s clean
    environment plus ``SLURM_CONF`` and :data:`MARKER`: tasks inherit it.

    Args:
        nodes: The virtual nodes, which must outlive the cluster.
        cpus: The CPUs each node declares: ``srun -N2 -n4`` puts 3 tasks on the first.
        limit: Seconds to wait for ``srun -N<nodes> hostname`` to name every node.
        keep: Keep the cluster's directory (logs) after it stops.

    Raises:
        ClusterError: A daemon exited or the cluster was not ready within ``limit``.
    """
    root = _make_root(f"{nodes.marker}-slurm-")
    first = nodes.nodes[0]
    ports = {"slurmctld": nodes.free_port(first.index), "slurmd": nodes.free_port(first.index)}
    # sbatch --wait sleeps 2, then 8, then 32 s between polls while the sleep is under
    # MinJobAge / 2 (300 s by default): a job of 10 s is seen done after 42 s. Here it
    # polls every 2 s. A job in PREEMPT_PARTITION preempts the default partition's jobs,
    # which SLURM requeues; a stopped job's ranks have KillWait to save and requeue.
    names = ",".join(node.name for node in nodes.nodes)
    conf = _write_conf(
        root,
        [(node.name, node.address) for node in nodes.nodes],
        cpus,
        ports,
        extra=["MinJobAge=4", "PreemptType=preempt/partition_prio", "PreemptMode=REQUEUE"],
        kill_wait=10,
        partitions=[
            " PriorityTier=1 PreemptMode=REQUEUE",
            f"PartitionName={PREEMPT_PARTITION} Nodes={names} MaxTime=INFINITE State=UP "
            "PriorityTier=2 PreemptMode=OFF",
        ],
    )
    for node in nodes.nodes:
        (root / "spool" / node.name).mkdir()
    env = nodes.env({"SLURM_CONF": str(conf), MARKER: str(root)})
    cluster = Cluster(
        root=root,
        conf=conf,
        env=env,
        hostname=first.name,
        ports=ports,
        nodes=tuple(node.name for node in nodes.nodes),
        prefix=tuple(first.argv()),
    )

    def start_slurm() -> list[subprocess.Popen[bytes]]:
        log = root / "log"
        daemons = [
            nodes.popen(first.index, ["slurmctld", "-D", "-i"], env=env, log=log / "slurmctld.out")
        ]
        for node in nodes.nodes:
            command = with_cgroups("slurmd", "-D", "-N", node.name)
            daemons.append(
                nodes.popen(node.index, command, env=env, log=log / f"slurmd-{node.name}.out")
            )
        return daemons

    with _running(cluster, start_slurm, limit=limit, keep=keep):
        yield cluster
