"""torch's errors, turned into helios-pg's in one place: by type, most specific first.

Every call into torch that can fail while a group forms (the rendezvous store, the
host-name exchange, ``init_process_group``) runs inside :func:`map_torch_errors`, given
init's :class:`~helios_pg._setup._call.InitCall` and the :class:`Step` it is at. It picks the
helios class from :data:`FROM_TORCH` and chains torch's error with ``from``;
:func:`explain_failure` words the message from what the call knows, by type as well.
torch's text is read only where torch has no type for the difference (below).
"""

from __future__ import annotations

import enum
import os
import re
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import torch.distributed as dist

from helios_env import LauncherEnvError
from helios_env.integration import expected_hosts, ranks_on
from helios_pg._errors import (
    BackendUnavailableError,
    DeviceBindingError,
    JoinTimeoutError,
    ProcessGroupInitError,
    RendezvousConfigError,
)
from helios_pg._setup._call import InitCall
from helios_pg._setup._store import Meeting

__all__ = ["FROM_TORCH", "Step", "explain_failure", "map_torch_errors"]


class Step(enum.Enum):
    """The step of init that failed, for the wording of its error."""

    STORE = enum.auto()
    """Reaching the rendezvous store and counting in: helios waits ``InitCall.wait``."""
    EXCHANGE = enum.auto()
    """Exchanging the ranks' host names: helios waits ``InitCall.wait``."""
    GROUP = enum.auto()
    """torch's ``init_process_group``: torch waits init's ``timeout``, or its default."""


FROM_TORCH: tuple[tuple[type[BaseException], type[Exception]], ...] = (
    # helios's own count at the store fell short: the message says how many came
    (JoinTimeoutError, ProcessGroupInitError),
    # rank 0 unreachable, or (torch 2.5 and later) its port taken
    (dist.DistNetworkError, ProcessGroupInitError),
    # the store timed out; its text says how many ranks joined
    (dist.DistStoreError, ProcessGroupInitError),
    (dist.DistError, ProcessGroupInitError),
    (TimeoutError, ProcessGroupInitError),
    # torch refused an argument, such as an init_method without a port
    (ValueError, RendezvousConfigError),
    # anything else torch could not do: no handler for a URL scheme, a busy port
    # before torch 2.5, gloo failing to connect its ranks
    (RuntimeError, ProcessGroupInitError),
)
"""torch's error class and the helios-pg class it becomes, most specific first."""

_OURS = (
    BackendUnavailableError,
    DeviceBindingError,
    LauncherEnvError,
    ProcessGroupInitError,
    RendezvousConfigError,
)
_PORT_IN_USE = re.compile(r"EADDRINUSE|address already in use", re.IGNORECASE)
_CLIENTS_JOINED = re.compile(r"(\d+)/(\d+) clients joined")


@contextmanager
def map_torch_errors(call: InitCall, step: Step) -> Iterator[None]:
    """Turn torch's errors raised in the block into helios-pg's, chained ``from`` them.

    Args:
        call: What init knows: the message is worded from it.
        step: The step the block runs.

    Yields:
        Nothing; the block runs as it is.

    Raises:
        ProcessGroupInitError: For torch's ``RuntimeError`` (its ``DistError`` family
            included) and a ``TimeoutError``; see :data:`FROM_TORCH`.
        RendezvousConfigError: For torch's ``ValueError``.
    """
    try:
        yield
    except Exception as exc:
        if isinstance(exc, _OURS) and not isinstance(exc, JoinTimeoutError):
            raise  # already says what went wrong
        for source, target in FROM_TORCH:
            if isinstance(exc, source):
                cause = exc.cause if isinstance(exc, JoinTimeoutError) else exc
                raise target(explain_failure(exc, call, step)) from cause
        raise


def _busy_port(head: str, meeting: Meeting | None, store: str, text: str) -> str:
    if meeting is None or meeting.port_source == "MASTER_PORT":
        port = f"MASTER_PORT={meeting.port if meeting else os.environ.get('MASTER_PORT')}"
    else:
        port = f"port {meeting.port} ({meeting.port_source})"
    return (
        f"{head}: {port} is already in use on {socket.gethostname()}, so rank 0 cannot "
        f"serve {store}; set MASTER_PORT to a free port (or torchrun --master-port ...) "
        f"and retry. torch said: {text}"
    )


def _missing(head: str, store: str, arrived: Mapping[int, str], world_size: int, text: str) -> str:
    """Name the ranks that never reached the store, where they were to run, and who came."""
    missing = [rank for rank in range(world_size) if rank not in arrived]
    hosts = [arrived.get(rank, "") for rank in range(world_size)]
    absent = ranks_on(missing, expected_hosts(world_size) or [], where="expected on ")
    came = ranks_on(sorted(rank for rank in arrived if rank < world_size), hosts)
    they = "it" if len(missing) == 1 else "they"
    return (
        f"{head}: {absent} never joined {store}; {came} did: {they} never started, failed "
        "before init, or were given another MASTER_ADDR/MASTER_PORT or WORLD_SIZE. torch "
        f"said: {text}"
    )


def explain_failure(exc: BaseException, call: InitCall, step: Step) -> str:
    """Turn torch's error at a step of init into one that says what happened and what to do.

    Args:
        exc: What torch raised, or the ``JoinTimeoutError`` of helios's own count.
        call: What init knows: backend, ranks, timeouts, where the ranks meet.
        step: The step that failed.

    Returns:
        The message for the mapped error; torch's text is kept at its end.
    """
    rank, world_size = call.rank, call.world_size
    if step is Step.EXCHANGE:
        return (
            f"rank {rank} of {world_size} joined the group, but the ranks' host names were "
            f"not all exchanged within {call.wait.total_seconds():g} s ({exc}); a rank "
            "died or hangs right after the rendezvous"
        )
    joined: int | None = None
    arrived: Mapping[int, str] | None = None
    if isinstance(exc, JoinTimeoutError):
        joined, arrived, exc = exc.joined, exc.arrived, exc.cause
    text = str(exc)
    meeting, init_method = call.meeting, call.init_method
    if meeting is not None:
        store = f"the rendezvous store at {meeting.where}"
    elif init_method is not None:
        store = f"the rendezvous of init_method={init_method!r}"
    else:
        store = "the store given to init"
    # helios's own wait at the store; torch's, in the group, named only when it was given
    timeout = call.wait if step is Step.STORE else call.timeout
    within = f" within {timeout.total_seconds():g} s" if timeout is not None else ""
    head = f"could not create the {call.backend} process group (rank {rank} of {world_size})"
    # By type, most specific first. torch has a type neither for the count of ranks that
    # joined (only DistStoreError's text says it) nor for a busy port (a DistNetworkError
    # from torch 2.5, a plain RuntimeError before): those are read from the text, within
    # their type, and the text of a plain RuntimeError is the last fallback.
    counted = _CLIENTS_JOINED.search(text) if isinstance(exc, dist.DistStoreError) else None
    if counted is not None:
        joined, world_size = int(counted.group(1)), int(counted.group(2))
    # Each rank's entry follows its count: a rank counted but not listed (it died
    # between the two, or runs a helios that lists nothing) keeps the count's words.
    if arrived and len(arrived) < world_size and (joined is None or len(arrived) >= joined):
        return _missing(head, f"{store}{within}", arrived, world_size, text)
    if joined is not None and joined < world_size:
        return (
            f"{head}: only {joined} of {world_size} ranks joined {store}{within}; the "
            "others never started, failed before init, or were given another "
            f"MASTER_ADDR/MASTER_PORT or WORLD_SIZE. torch said: {text}"
        )
    if isinstance(exc, dist.DistNetworkError):
        if _PORT_IN_USE.search(text):
            return _busy_port(head, meeting, store, text)
        return (
            f"{head}: rank 0, which hosts {store}, could not be reached{within}; it never "
            f"started, died, or MASTER_ADDR/MASTER_PORT differ between ranks. torch said: "
            f"{text}"
        )
    if isinstance(exc, ValueError):
        if init_method is None:
            return f"{head}: torch refused the arguments ({text}); fix rank, world_size or store"
        return (
            f"{head}: torch refused init_method={init_method!r} ({text}); fix it, or omit it "
            "to meet at MASTER_ADDR:MASTER_PORT"
        )
    if not isinstance(exc, dist.DistError) and _PORT_IN_USE.search(text):
        return _busy_port(head, meeting, store, text)  # torch before 2.5: no type
    return f"{head} through {store}: {text}"
