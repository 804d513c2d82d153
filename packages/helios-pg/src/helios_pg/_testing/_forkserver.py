"""The ranks' forkserver: one per pytest session, started as soon as it is known to be needed.

Its process imports torch and helios_pg (and what :mod:`helios_pg._testing._preload`
adds) before it forks any rank, so a rank starts in milliseconds instead of importing
torch. Once collection has found a ``ranks`` test, :func:`start_early` spawns it, and it
imports in its own process while the plain tests run; the first ranks test waits only
for what is left. How long it took, and how much of it that test waited, are kept for
the terminal summary.
"""

from __future__ import annotations

import contextlib
import importlib.util
import multiprocessing
import os
import time
from dataclasses import dataclass
from multiprocessing import forkserver
from multiprocessing.context import ForkServerContext

import pytest

from helios_pg._testing._preload import BASE, PRELOAD_VARIABLE, ready, torch_stack

__all__ = ["ServerStart", "forkserver_context", "server_start", "start_early"]

_context: ForkServerContext | None = None


@dataclass(frozen=True)
class ServerStart:
    """How the session's forkserver started: what it imported, and how long it took."""

    seconds: float
    """From its start to its first fork."""
    waited: float
    """How much of that the first ranks test waited."""
    preloaded: tuple[str, ...]


_started: ServerStart | None = None
_spawned: tuple[ForkServerContext, float, tuple[str, ...]] | None = None


def _preload_names(config: pytest.Config) -> list[str]:
    """What the forkserver imports beyond :data:`BASE`, checked in the pytest process."""
    names = torch_stack() if config.getini("ranks_preload_torch") else []
    for name in config.getini("ranks_preload"):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError) as exc:
            found, reason = False, f"{type(exc).__name__}: {exc}"
        else:
            reason = "no such module"
        if not found:
            message = (
                f"ranks_preload names {name!r}, which cannot be imported here ({reason}); "
                "install it or remove it from the ranks_preload ini option"
            )
            pytest.fail(message, pytrace=False)
        names.append(name)
    return names


def _spawn(config: pytest.Config) -> None:
    """Spawn the session's forkserver, which imports its modules in its own process."""
    global _spawned  # noqa: PLW0603 - one forkserver for the whole session
    names = _preload_names(config)  # a missing ranks_preload module fails the test here
    context = multiprocessing.get_context("forkserver")
    assert isinstance(context, ForkServerContext)
    context.set_forkserver_preload([*BASE, "helios_pg._testing._preload"])
    start = time.monotonic()
    # The server reads the names from its environment; nothing else inherits it.
    os.environ[PRELOAD_VARIABLE] = ",".join(names)
    try:
        forkserver.ensure_running()
    finally:
        del os.environ[PRELOAD_VARIABLE]
    _spawned = (context, start, (*BASE, *names))


def start_early(config: pytest.Config) -> None:
    """Spawn the session's forkserver now, without waiting for its imports.

    Its process imports torch while collection ends and the plain tests run. What stops
    it (a missing ``ranks_preload`` module, a socket it cannot open) is left to the first
    ranks test, which starts it again and fails with the reason.
    """
    if _spawned is not None or _context is not None:
        return
    with contextlib.suppress(Exception, pytest.fail.Exception):
        _spawn(config)


def forkserver_context(config: pytest.Config) -> ForkServerContext:
    """The session's forkserver, started if it was not, once it has imported its modules."""
    global _context, _started  # noqa: PLW0603 - one forkserver for the whole session
    if _context is None:
        if _spawned is None:
            _spawn(config)
        assert _spawned is not None
        context, start, preloaded = _spawned
        asked = time.monotonic()
        # The first fork waits for the server, which imports everything before it forks.
        probe = context.Process(target=ready, daemon=True)
        probe.start()
        probe.join()
        done = time.monotonic()
        _started = ServerStart(done - start, done - asked, preloaded)
        _context = context
    return _context


def server_start() -> ServerStart | None:
    """How this session's forkserver started, or None when no ranks test started it."""
    return _started
