"""A private single-node SLURM cluster for tests, and checks for the real launchers.

:func:`private_cluster` starts ``munged``, ``slurmctld`` and ``slurmd`` in the
foreground, each in its own session, with everything (configuration, munge key and
socket, state, spool, logs) in one temporary directory and with controller and node
ports picked free at start. The node is this host under its short hostname,
declared with :data:`DEFAULT_CPUS` CPUs (``SlurmdParameters=config_overrides``) so
that ``srun -n 3`` runs on a two-core machine. No cgroups, no accounting, no
``MpiDefault``: ``srun --mpi=pmi2`` and ``--mpi=pmix`` are asked for explicitly.

The daemons run as root (``SlurmUser=root``): :func:`require` skips the test when
the tools are missing or this process is not root, and fails it instead when the
environment variable ``CI`` is ``"true"``. ``bash tools/install_launchers.sh``
installs the tools. This module never imports torch.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.procs import Finished, base_env, free_port, run_processes

__all__ = [
    "INSTALL_HINT",
    "TOOLS",
    "Cluster",
    "ClusterError",
    "missing_tools",
    "private_cluster",
    "require",
]

INSTALL_HINT = "bash tools/install_launchers.sh"
DEFAULT_CPUS = 8
"""CPUs the node declares, whatever the machine has."""
PARTITION = "debug"
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
    ``SLURM_CONF``."""
    hostname: str
    """The node's name (this host's short hostname)."""
    partition: str = PARTITION
    ports: dict[str, int] = field(default_factory=dict)
    """``slurmctld`` and ``slurmd``: the ports chosen at start."""

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
            return run_processes([(list(args), full_env)], limit=limit, cwd=cwd)[0]
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
        cancel = ["scancel", f"--partition={self.partition}"]
        queue = ["squeue", "-h", "-o", "%i"]
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


def _write_conf(root: Path, host: str, cpus: int, ports: Mapping[str, int]) -> Path:
    user = "root"
    conf = root / "slurm.conf"
    conf.write_text(
        f"""\
ClusterName=helios-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ports["slurmctld"]}
SlurmdPort={ports["slurmd"]}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
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
KillWait=2
MessageTimeout=10
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName={PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""
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


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _strays(marker: str) -> list[int]:
    """Processes whose environment holds ``MARKER=marker``: slurmstepd and its tasks.

    slurmd double-forks slurmstepd, so they are in no session of ours.
    """
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def _kill_strays(marker: str, limit: float = STOP_LIMIT) -> None:
    deadline = time.monotonic() + limit
    while True:
        pids = [pid for pid in _strays(marker) if _alive(pid)]
        if not pids:
            return
        if time.monotonic() > deadline:
            message = f"processes of the private cluster survived SIGKILL: {pids}"
            raise ClusterError(message)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _wait_ready(cluster: Cluster, daemons: Sequence[subprocess.Popen[bytes]], limit: float) -> None:
    """Wait until ``srun -n1 true`` succeeds; raise ClusterError after ``limit`` s."""
    deadline = time.monotonic() + limit
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
                code, out, err = cluster.run(["srun", "-n1", "true"], limit=min(10.0, left))
                if code == 0:
                    return
            last = f"exit status {code}\n{out}{err}"
        except TimeoutError as error:
            last = str(error)
        time.sleep(0.1)
    message = f"the private cluster was not ready after {limit:.0f} s: {last}\n{cluster.logs()}"
    raise ClusterError(message)


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
    root = Path(tempfile.mkdtemp(prefix="helios-slurm-"))
    # munged requires every directory above its socket to be searchable by all.
    root.chmod(0o755)
    for name in ("munge", "state", "spool", "log", "run", "tmp"):
        (root / name).mkdir()
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    host = short_hostname()
    ports = {"slurmctld": free_port(), "slurmd": free_port()}
    conf = _write_conf(root, host, cpus, ports)
    env = base_env({"SLURM_CONF": str(conf), MARKER: str(root)})
    cluster = Cluster(root=root, conf=conf, env=env, hostname=host, ports=ports)
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        munge_dir = root / "munge"
        daemons.append(
            _start(
                [
                    "munged",
                    "--foreground",
                    f"--socket={munge_dir}/munge.socket",
                    f"--key-file={key}",
                    f"--pid-file={root}/run/munged.pid",
                    f"--seed-file={munge_dir}/munged.seed",
                    f"--log-file={root}/log/munged.log",
                ],
                env,
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
        daemons.append(_start(["slurmctld", "-D", "-i"], env, root / "log" / "slurmctld.out"))
        daemons.append(_start(["slurmd", "-D", "-N", host], env, root / "log" / "slurmd.out"))
        _wait_ready(cluster, daemons[1:], max(1.0, deadline - time.monotonic()))
        yield cluster
    finally:
        try:
            if len(daemons) == 3 and daemons[1].poll() is None:
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
