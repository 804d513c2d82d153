"""Run real worker processes with a parent-side time limit; never imports torch.

Each worker runs in a new session, so a worker that hangs is killed together with
every process it started. Workers report results by printing lines that begin with
``RESULT `` followed by JSON; :func:`results` collects them.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helios_env._rendezvous import ephemeral_ports, port_range

__all__ = [
    "LAUNCHER_VARIABLES",
    "PORT_RESERVATIONS",
    "Finished",
    "base_env",
    "free_port",
    "is_alive",
    "is_launcher_variable",
    "kill_until_gone",
    "marked_processes",
    "plain_environment",
    "process_tree",
    "results",
    "run_hand_started",
    "run_processes",
    "run_torchrun",
    "run_two_nodes",
    "signal_all",
    "torchrun_command",
]

DEFAULT_LIMIT = 90.0
ABORT_GRACE = 3.0
"""Seconds a process killed at its time limit has to print its stacks."""
REPO_ROOT = Path(__file__).resolve().parents[2]
RESULT_PREFIX = "RESULT "
PART_PREFIX = "RESULT-PART "

LAUNCHER_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_PROCID",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_LOCALID",
    "SLURM_NODEID",
)
"""Variables a launcher sets for a process, by name."""
LAUNCHER_PREFIXES = (
    "SLURM_",
    "OMPI_",
    "TORCHELASTIC_",
    "GROUP_",
    "ROLE_",
    "PMI_",
    "PMIX_",
    "MV2_",
    "MPI_LOCAL",
    "JSM_",
    "LSB_",
    "PET_",
    "HELIOS_LAUNCHER",
)
"""Prefixes of the rest: this test run may itself sit inside srun, mpirun or torchrun."""


def is_launcher_variable(name: str) -> bool:
    """Whether a launcher may have set ``name`` (and a plain process must not see it)."""
    return name in LAUNCHER_VARIABLES or name.startswith(LAUNCHER_PREFIXES)


def plain_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without any variable a launcher may have set."""
    return {k: v for k, v in environ.items() if not is_launcher_variable(k)}


@dataclass(frozen=True)
class Finished:
    """One finished process: its command, exit status and output."""

    args: Sequence[str]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (
            f"$ {' '.join(self.args)}\nexit status {self.returncode}\n"
            f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"
        )


def is_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (Linux's ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def marked_processes(variable: str, value: str | None, netns: Iterable[int] = ()) -> list[int]:
    """Live processes whose environment holds ``variable=value``, or in a network namespace.

    Args:
        variable: The marker's name.
        value: The marker's value; None matches by namespace only.
        netns: Inodes of network namespaces whose every process matches.
    """
    needle = f"{variable}={value}".encode() if value is not None else None
    inodes = set(netns)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            ours = bool(inodes) and (entry / "ns" / "net").stat().st_ino in inodes
            if not ours and needle is not None:
                ours = needle in (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if ours and is_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def kill_until_gone(
    find: Callable[[], list[int]], error: type[Exception], what: str, limit: float
) -> list[int]:
    """SIGKILL the processes ``find`` returns until it returns none; return those killed.

    Raises:
        error: Some still live after ``limit`` seconds, named as ``what``.
    """
    killed: set[int] = set()
    deadline = time.monotonic() + limit
    while pids := find():
        if time.monotonic() > deadline:
            message = f"{what} survived SIGKILL: {pids}"
            raise error(message)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed.update(pids)
        time.sleep(0.05)
    return sorted(killed)


# The operating system's randomness: processes forked from one another pick apart.
_RANDOM = random.SystemRandom()
PORT_RESERVATIONS = Path(tempfile.gettempdir()) / f"helios-test-ports-{os.getuid()}"
"""One file per port a process handed out: its lock (flock) is that process's reservation."""
_KEPT_RESERVATIONS = 64
_reserved: collections.deque[int] = collections.deque()
_reserving = threading.Lock()


def _reserve(port: int) -> bool:
    """Take ``port``'s reservation unless another process holds it; keep the newest few.

    A reservation lasts until this process has handed out ``_KEPT_RESERVATIONS`` ports
    more, or ends (processes it forked meanwhile share it, and keep it while they run);
    by then the port's listener is up, or gone.
    """
    path = PORT_RESERVATIONS / str(port)
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
    except FileNotFoundError:
        PORT_RESERVATIONS.mkdir(exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    with _reserving:
        _reserved.append(fd)
        while len(_reserved) > _KEPT_RESERVATIONS:
            os.close(_reserved.popleft())
    return True


def free_port() -> int:
    """A TCP port free on 127.0.0.1, at random outside the kernel's ephemeral range.

    The kernel's own pick (a bind to port 0) comes from its ephemeral range, from which
    it also hands out the local ports of outgoing connections: between this check and
    the listener's bind, any connection of any process (a gloo pair, a store client of
    a test running beside) can take the port. Outside that range only another listener
    can, and helios derives its own ports there for the same reason. Two test runs side
    by side (CI runs two nox sessions at a time) could still pick the same free port before
    either listens: each port handed out is reserved (:data:`PORT_RESERVATIONS`), and
    a port another process holds is never handed out.
    """
    first, count = port_range(ephemeral_ports())
    for _ in range(200):
        port = first + _RANDOM.randrange(count)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        if _reserve(port):
            return port
    message = (
        f"no free, unreserved TCP port on 127.0.0.1 in {first}..{first + count - 1} after "
        f"200 tries (reservations: {PORT_RESERVATIONS})"
    )
    raise RuntimeError(message)


def base_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any launcher variable, plus ``extra``."""
    env = plain_environment(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    # A process killed at its time limit first prints its stacks (see _dump_stacks).
    env["PYTHONFAULTHANDLER"] = "1"
    # Worker scripts import tests.support.worker.
    paths = [str(REPO_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("HELIOS_TEST_PG_TIMEOUT", "10")
    # Gloo picks its interface from the hostname; pin it to loopback.
    env["GLOO_SOCKET_IFNAME"] = "lo"
    env["TORCH_CPP_LOG_LEVEL"] = env.get("TORCH_CPP_LOG_LEVEL", "ERROR")
    if extra:
        env.update(extra)
    return env


def _children() -> dict[int, list[int]]:
    """Every live process's children, from ``/proc``: pid to child pids."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: the parent's pid is
        # the second field after its closing parenthesis.
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        children[parent].append(int(entry.name))
    return children


def process_tree(pid: int) -> list[int]:
    """``pid`` and its live descendants, also those in sessions of their own (torchrun's
    workers run in new sessions, out of reach of a kill of torchrun's session)."""
    children = _children()
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        queue.extend(children.get(current, []))
    return found


def signal_all(pids: Iterable[int], signal_number: int) -> None:
    """Send ``signal_number`` to each of ``pids`` that still exists."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal_number)


def _dump_stacks(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """Have every process under ``procs`` write its Python stacks, then end them all.

    Workers run with ``PYTHONFAULTHANDLER`` (:func:`base_env`), so SIGABRT makes each
    Python process print every thread's stack to its stderr before it dies: the
    report of a job killed at its time limit says where each process was.
    """
    pids = [pid for proc in procs if proc.poll() is None for pid in process_tree(proc.pid)]
    signal_all(pids, signal.SIGABRT)
    deadline = time.monotonic() + ABORT_GRACE
    while time.monotonic() < deadline and any(is_alive(pid) for pid in pids):
        time.sleep(0.05)
    signal_all(pids, signal.SIGKILL)


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        signal_all(process_tree(proc.pid), signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def run_processes(
    commands: Sequence[tuple[Sequence[str], Mapping[str, str]]],
    *,
    limit: float = DEFAULT_LIMIT,
    cwd: str | Path | None = None,
    raise_on_timeout: bool = True,
    first_exit: bool = False,
) -> list[Finished]:
    """Start every command at once and wait for all, killing all of them at ``limit``.

    With ``first_exit``, the others are killed as soon as one has exited (status -9):
    for jobs where one process fails and its peers would wait on.

    Raises:
        TimeoutError: Some process was still running after ``limit`` seconds; the
            message holds every process's output so far. With ``raise_on_timeout``
            false, the processes killed at the limit are returned with status -9.
    """
    # Output goes to files, not pipes: a rank that prints a lot never blocks on a
    # full pipe while the parent waits for another rank.
    with contextlib.ExitStack() as files:
        sinks = [
            (
                files.enter_context(tempfile.TemporaryFile()),
                files.enter_context(tempfile.TemporaryFile()),
            )
            for _ in commands
        ]
        procs: list[subprocess.Popen[bytes]] = []
        timed_out = False
        try:
            for (args, env), (out, err) in zip(commands, sinks, strict=True):
                procs.append(
                    subprocess.Popen(
                        list(args),
                        env=dict(env),
                        cwd=cwd,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=err,
                        start_new_session=True,
                    )
                )
            deadline = time.monotonic() + limit
            while first_exit and time.monotonic() < deadline:
                if any(proc.poll() is not None for proc in procs):
                    for proc in procs:
                        _kill_session(proc)
                    break
                time.sleep(0.05)
            for proc in procs:
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
                    _dump_stacks(procs)
                    for other in procs:
                        _kill_session(other)
                    proc.wait()
        finally:
            # Reap anything the workers left behind in their sessions, also when the
            # wait is interrupted (pytest-timeout, Ctrl-C): a process left running
            # would be reported later, in whichever test collects its Popen.
            for proc in procs:
                _kill_session(proc)
                proc.wait()
        outputs = []
        for out, err in sinks:
            out.seek(0)
            err.seek(0)
            outputs.append((_text(out.read()), _text(err.read())))
    finished = [
        Finished(list(args), proc.returncode, out, err)
        for (args, _), proc, (out, err) in zip(commands, procs, outputs, strict=True)
    ]
    if timed_out and raise_on_timeout:
        detail = "\n".join(f.describe() for f in finished)
        message = f"processes still running after the {limit:.0f} s limit were killed:\n{detail}"
        raise TimeoutError(message)
    return finished


def launcher_variables(rank: int, world_size: int, port: int | str) -> dict[str, str]:
    """What a hand-started launch sets for ``rank`` of ``world_size`` on 127.0.0.1."""
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def run_hand_started(
    script: str | Path,
    world_size: int,
    *,
    args: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
    per_rank_env: Mapping[int, Mapping[str, str]] | None = None,
    limit: float = DEFAULT_LIMIT,
) -> list[Finished]:
    """Start ``world_size`` Python processes with hand-set RANK/WORLD_SIZE/MASTER_*."""
    port = str(free_port())
    commands = []
    for rank in range(world_size):
        env = base_env(extra_env)
        env.update(launcher_variables(rank, world_size, port))
        if per_rank_env and rank in per_rank_env:
            env.update(per_rank_env[rank])
        commands.append(([sys.executable, str(script), *args], env))
    return run_processes(commands, limit=limit)


def torchrun_command(*options: str) -> list[str]:
    """The command line of the real ``torchrun`` for this interpreter."""
    exe = Path(sys.executable).with_name("torchrun")
    if exe.exists():
        return [str(exe), *options]
    return [sys.executable, "-m", "torch.distributed.run", *options]


def run_torchrun(
    script_and_args: Sequence[str],
    *,
    nproc: int,
    options: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
    limit: float = DEFAULT_LIMIT,
) -> Finished:
    """Run ``torchrun --standalone --nproc-per-node N`` on a script (or ``-m module``)."""
    command = torchrun_command(
        "--standalone", f"--nproc-per-node={nproc}", *options, *script_and_args
    )
    return run_processes([(command, base_env(extra_env))], limit=limit)[0]


def run_two_nodes(
    script_and_args: Sequence[str],
    *,
    nproc_per_node: int = 2,
    options: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
    limit: float = DEFAULT_LIMIT,
) -> list[Finished]:
    """Run two torchrun agents that meet through a c10d rendezvous on a free loopback port.

    The two agents stand for two nodes: together they run ``2 * nproc_per_node``
    workers with node-local ranks.
    """
    port = free_port()
    run_id = f"helios-test-{uuid.uuid4().hex[:12]}"
    commands = []
    for _node in range(2):
        command = torchrun_command(
            "--nnodes=2",
            f"--nproc-per-node={nproc_per_node}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            f"--rdzv-id={run_id}",
            "--rdzv-conf=timeout=60,read_timeout=60",
            "--local-addr=127.0.0.1",
            *options,
            *script_and_args,
        )
        commands.append((command, base_env(extra_env)))
    return run_processes(commands, limit=limit)


def results(finished: Finished | Iterable[Finished]) -> list[dict[str, Any]]:
    """Collect the ``RESULT {json}`` lines that workers printed, in output order."""
    items = [finished] if isinstance(finished, Finished) else list(finished)
    return [found for item in items for found in parse_results(item.stdout)]


def parse_results(text: str) -> list[dict[str, Any]]:
    """The results that ``tests.support.worker.report`` printed in ``text``, in order.

    A long result comes as ``RESULT-PART`` lines, joined here; it counts where its last
    part is.
    """
    found: list[dict[str, Any]] = []
    parts: dict[str, dict[int, str]] = {}
    for line in text.splitlines():
        if line.startswith(RESULT_PREFIX):
            found.append(json.loads(line[len(RESULT_PREFIX) :]))
        elif line.startswith(PART_PREFIX):
            ident, index, count, chunk = line[len(PART_PREFIX) :].split(" ", 3)
            chunks = parts.setdefault(ident, {})
            chunks[int(index)] = chunk
            if len(chunks) == int(count):
                found.append(json.loads("".join(chunks[i] for i in range(int(count)))))
    return found
