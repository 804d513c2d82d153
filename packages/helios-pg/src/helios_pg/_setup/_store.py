"""The rendezvous store, reached here so a failed init can say who joined, and whose.

torch's ``env://`` path connects to the store at ``MASTER_ADDR:MASTER_PORT`` and wraps
it in ``PrefixStore("default_pg", ...)``; this does the same at the address and port
that ``helios_env`` reports (set, or derived under srun and mpirun), with two more
steps before the group forms:

- every rank writes or compares its job's identity (the SLURM job and step, the MPI
  job, torchrun's run id) under one key: a process of another job that reaches the
  same address and port stops with an error naming both jobs, instead of joining or
  corrupting the first job's store;
- each rank counts itself in, with its host, and waits until every rank has, so when
  one never comes, every rank that reached the store names the ranks that did not and
  where they were to run, instead of gloo's "wait timeout ... keys:
  /default_pg/0//cpu//0/0".
"""

from __future__ import annotations

import _thread
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from torch._C._distributed_c10d import PrefixStore, TCPStore

from helios_env.integration import endpoint
from helios_pg._errors import JoinTimeoutError, ProcessGroupInitError, RendezvousConfigError
from helios_pg._store_poll import poll

__all__ = [
    "JOB_KEY",
    "WHO",
    "EnvStore",
    "LateStore",
    "Meeting",
    "check_own_address",
    "open_store",
    "side_channel",
]

JOB_KEY = "helios_pg/job"
WHO = "/who"
"""After the count's key: ``RANK@HOST;`` of each rank that reached the rendezvous."""
_HOST_GRACE = timedelta(seconds=2)


@dataclass(frozen=True)
class Meeting:
    """Where the ranks meet and who they are, each part with where it came from."""

    addr: str
    port: int
    addr_source: str
    port_source: str
    job: str

    @property
    def where(self) -> str:
        """``host:port`` of the store."""
        return endpoint(self.addr, self.port)


@dataclass(frozen=True)
class EnvStore:
    """The store every rank reached, and the key under which ranks count in."""

    store: Any
    joined_key: str
    world_size: int
    reached: float = 0.0
    """When this rank counted itself in, in wall-clock seconds."""

    def joined(self) -> int | None:
        """How many ranks reached the rendezvous, or None when the store is gone."""
        try:
            return int(self.store.add(self.joined_key, 0))
        except (RuntimeError, ValueError):
            return None

    def arrived(self) -> dict[int, str] | None:
        """Each rank that reached the rendezvous, with its host; None when the store is gone."""
        try:
            said = bytes(self.store.get(self.joined_key + WHO)).decode(errors="replace")
        except (RuntimeError, ValueError):
            return None
        found: dict[int, str] = {}
        for entry in said.split(";"):
            rank, _, host = entry.partition("@")
            if rank.isdigit():
                found[int(rank)] = host
        return found


def check_own_address(meeting: Meeting) -> None:
    """Make sure rank 0 is the host that the other ranks will look for.

    Args:
        meeting: The derived rendezvous.

    Raises:
        RendezvousConfigError: The address does not resolve, or names another host.
    """
    try:
        found = socket.getaddrinfo(meeting.addr, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        message = (
            f"the rendezvous address {meeting.addr!r} ({meeting.addr_source}) does not "
            f"resolve on rank 0's host {socket.gethostname()!r} ({exc}); set MASTER_ADDR "
            f"to an address of rank 0's host"
        )
        raise RendezvousConfigError(message) from None
    for family, kind, proto, _, sockaddr in found:
        with socket.socket(family, kind, proto) as probe:
            try:
                probe.bind((sockaddr[0], 0))
            except OSError:
                continue
            return  # an address this host can bind: rank 0 runs where the others look
    message = (
        f"rank 0 runs on {socket.gethostname()!r}, but the rendezvous address is "
        f"{meeting.addr!r} ({meeting.addr_source}), another host: the other ranks would "
        f"wait there until they time out. Set MASTER_ADDR to rank 0's host, or start the "
        f"job so that rank 0 runs on the first node"
    )
    raise RendezvousConfigError(message)


def _poll(done: Callable[[], bool], timeout: timedelta) -> None:
    """Wait until ``done()``, polling the store; raise ``TimeoutError`` at ``timeout``."""
    if not poll(done, timeout.total_seconds()):
        message = f"the rendezvous did not complete within {timeout.total_seconds():g} s"
        raise TimeoutError(message)


def _uses_agent_store(meeting: Meeting) -> bool:
    """Whether torchrun's agent, not rank 0, serves the store at the meeting point."""
    return (
        os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        and meeting.addr_source == "MASTER_ADDR"
        and meeting.port_source == "MASTER_PORT"
    )


def open_store(meeting: Meeting, rank: int, world_size: int, timeout: timedelta) -> EnvStore:
    """Reach the rendezvous store, check that it serves this job, and count this rank in.

    Args:
        meeting: Where the ranks meet, and this job's identity.
        rank: This process's global rank.
        world_size: The number of processes.
        timeout: How long to wait for the store.

    Returns:
        The store, to be wrapped in ``PrefixStore("default_pg", ...)`` as torch does.

    Raises:
        RendezvousConfigError: Rank 0 is not on the host the address names.
        ProcessGroupInitError: The store serves another job.
        JoinTimeoutError: Not every rank counted in within the timeout.
        RuntimeError: torch's own, when the port is taken or rank 0 cannot be reached
            (``init`` maps it, see ``helios_pg._setup._torch_errors``).
    """
    # Under torchrun the agent on the first node already serves MASTER_ADDR:MASTER_PORT.
    agent = _uses_agent_store(meeting)
    hosts = rank == 0 and not agent
    if hosts and meeting.addr_source.startswith("derived"):
        check_own_address(meeting)
    identity = f"{meeting.job} ({world_size} ranks)"
    # A port someone else holds fails here, and init's message names host, port and
    # the variable that overrides it. No client is sent to look at who holds it: a
    # TCPStore client waits forever on a listener that is not a TCPStore.
    libuv = os.environ.get("USE_LIBUV")  # torch's switch for its store's event loop
    options = {} if libuv is None else {"use_libuv": libuv == "1"}

    def connect() -> Any:
        return TCPStore(
            meeting.addr,
            meeting.port,
            None,
            hosts,
            timeout=timeout,
            wait_for_workers=False,
            multi_tenant=True,
            **options,
        )

    store: Any = connect() if hosts else _client(connect, meeting, rank, world_size, timeout)
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if agent:
        # torchrun's agent store can outlive a restart (its static rendezvous does):
        # each attempt keeps its keys apart, as torch's own env:// does.
        store = PrefixStore(f"/worker/attempt_{restart}", store)
    if hosts:
        store.set(JOB_KEY, identity)
        serving = identity
    elif agent:  # no rank hosts torchrun's store: the first to arrive writes the job
        serving = bytes(store.compare_set(JOB_KEY, "", identity)).decode(errors="replace")
    else:  # rank 0 writes its job as soon as it serves: a stray never writes first
        if not poll(lambda: bool(store.check([JOB_KEY])), timeout.total_seconds()):
            del store
            message = (
                f"rank {rank} of {identity} reached a store at {meeting.where}, but no "
                f"job's rank 0 said there within {timeout.total_seconds():g} s which job "
                "it serves: another program's store holds that port (a job without "
                "helios, torchrun's agent of another job), or rank 0 of this job failed "
                "after it opened the store. Set MASTER_PORT to a port free on rank 0's "
                "host, and see rank 0's error"
            )
            raise ProcessGroupInitError(message)
        serving = bytes(store.get(JOB_KEY)).decode(errors="replace")
    if serving != identity:
        del store  # the traceback keeps this frame: close the connection now
        message = (
            f"rank {rank} of {identity} reached the rendezvous store at {meeting.where}, "
            f"but it serves {serving}: two jobs meet at the same address and port. Set "
            f"MASTER_PORT to a free port for one of them"
        )
        raise ProcessGroupInitError(message)
    store.set_timeout(timeout)
    # torchrun's agent store serves every init of a restart attempt, and a program may
    # init again after shutdown: each init of the job gets a session number of its own.
    session = -(-int(store.add(f"helios_pg/inits/{restart}", 1)) // world_size)
    key = f"helios_pg/joined/{restart}/{session}"
    store.add(key, 1)
    counted = EnvStore(store, key, world_size, time.time())
    # Who came, and from where: read only when some rank never does (one request each).
    store.append(key + WHO, f"{rank}@{socket.gethostname()};")
    # Every rank waits for all to count in, as torch's env:// rank 0 does. The host
    # waits a little longer, so that the others can still read how many came.
    try:
        _poll(
            lambda: int(store.add(key, 0)) >= world_size,
            timeout + _HOST_GRACE if hosts else timeout,
        )
    except (RuntimeError, ValueError, TimeoutError) as exc:
        joined, arrived = counted.joined(), counted.arrived()
        # The traceback keeps this frame: drop the store now, or rank 0's server (its
        # port and its threads) would live as long as the error does.
        del store, counted
        raise JoinTimeoutError(joined, exc, arrived) from exc
    return counted


_SIDE_TIMEOUT = timedelta(seconds=2)
_OPEN_TIMEOUT = timedelta(seconds=30)
_CONNECT_GRACE = 5.0
"""Seconds past the timeout a store client may take to connect before init gives up."""


def _client(
    connect: Callable[[], Any], meeting: Meeting, rank: int, world_size: int, timeout: timedelta
) -> Any:
    """``connect()`` and one request, given up on past the timeout: no answer, no store.

    torch's client waits for the store's answer without a time limit: to its handshake
    (recent torch, in the constructor) or to its first request (torch 2.4); a program
    that holds the port and accepts connections never gives one.
    """
    made: dict[str, Any] = {}

    def run() -> None:
        try:
            store = connect()
            store.check([JOB_KEY])  # answered by a store, never by another listener
            made["store"] = store
        except BaseException as exc:  # raised again in the caller's thread
            made["error"] = exc

    limit = 2 * timeout.total_seconds() + _CONNECT_GRACE  # torch's own retries end first
    thread = threading.Thread(target=run, name="helios-store-connect", daemon=True)
    thread.start()
    thread.join(limit)
    if "error" in made:
        raise made["error"]
    if "store" in made:
        return made["store"]
    message = (
        f"rank {rank} of {world_size} got no answer from a rendezvous store at "
        f"{meeting.where} ({meeting.port_source}) within {limit:g} s: rank 0, which hosts "
        "it, has not opened it (it never started, or failed before init), or another "
        "program holds that port and accepts connections (rank 0 then fails with "
        "'already in use'). See rank 0's output; set MASTER_PORT to a port free on rank "
        "0's host if it is taken"
    )
    raise ProcessGroupInitError(message) from TimeoutError(f"no answer within {limit:g} s")


def side_channel(
    meeting: Meeting, env_store: EnvStore, wait: float | None = None
) -> tuple[Any, str] | None:
    """A connection of its own to the job's store, with a short timeout, and a key.

    For the failure reporter and the watchdog: what they publish or read at a failure
    must never wait for the group's timeout, nor share a connection with the group.
    The key is unique to this init of the job. With ``wait``, the connection opens in a
    daemon thread, so init never waits for it: when every rank of a large job opens one
    at the same moment, torch's client can take seconds to get its connection.

    Args:
        meeting: Where the store is.
        env_store: The store the group formed on (for the key's session).
        wait: Seconds a request waits for a connection opening in the background
            before it fails; None connects now.

    Returns:
        The store client and the key of the job's first failure; None when ``wait`` is
        None and the store cannot be reached now.
    """

    def connect(within: timedelta = _OPEN_TIMEOUT) -> Any:
        store: Any = TCPStore(
            meeting.addr, meeting.port, None, False, timeout=within, wait_for_workers=False
        )
        store.set_timeout(_SIDE_TIMEOUT)
        if _uses_agent_store(meeting):
            restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            store = PrefixStore(f"/worker/attempt_{restart}", store)
        return store

    key = env_store.joined_key.replace("/joined/", "/failed/", 1)
    if wait is not None:
        return LateStore(connect, wait), key
    try:
        # The store init just met at is up: a connection slow to open is a loaded
        # machine, which the short timeout would leave without a watchdog's store.
        return connect(), key
    except (RuntimeError, ValueError):
        return None


class LateStore:
    """A store client that connects in a thread of its own; each request waits for it.

    The thread is started with ``_thread.start_new_thread``, which returns at once:
    ``threading.Thread.start`` waits until the new thread runs, which on a loaded host
    was most of what the failure reporter added to ``init`` (0.5 of 0.57 ms). Like a
    daemon thread, it never holds up the interpreter's exit.
    """

    def __init__(self, connect: Callable[[], Any], wait: float) -> None:
        self._wait = wait
        self._store: Any = None
        self._opened = threading.Event()
        _thread.start_new_thread(self._open, (connect,))

    def _open(self, connect: Callable[[], Any]) -> None:
        try:
            self._store = connect()
        except BaseException:  # no thread hook sees it here: the store is not open
            self._store = None
        finally:
            self._opened.set()

    @property
    def ready(self) -> bool:
        """Whether the connection is open now (a request would not wait for it)."""
        return self._opened.is_set() and self._store is not None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if not self._opened.wait(self._wait) or self._store is None:
            message = f"the side channel to the job's store is not open (asked for {name})"
            raise RuntimeError(message)
        return getattr(self._store, name)
