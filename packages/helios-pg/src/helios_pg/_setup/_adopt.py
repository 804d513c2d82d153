"""Adopt a default group someone else made: Ray Train, Lightning, accelerate, DeepSpeed.

The group is kept as it is and the device applied, as the seed says; beyond it, what
``init`` adds to a group of its own is added to this one. The arguments are checked as
for a new group, and against the group (its backend, size and this rank); the timeout is
set where torch can change a live group's; the agreement check runs and the layout is
learned through the group's store (with, under Ray Train, the attempt of the run that
Ray's restarts leave unsaid: :mod:`helios_pg._setup._ray`); the failure reporter and
the hang watchdog are installed. What cannot be done here is said in one :class:`AdoptionWarning`.

A group is adopted once: a later ``init`` on the same group, or on a group ``init``
made itself, only checks the arguments and applies the device.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import warnings
import weakref
from dataclasses import replace
from datetime import timedelta
from functools import partial
from typing import Any

import torch
import torch.distributed as dist

from helios_env import DistributedInfo, EnvironmentReport, Launcher
from helios_pg._backend import check_backend
from helios_pg._errors import AdoptionWarning, RendezvousConfigError
from helios_pg._setup._after_init import after_init
from helios_pg._setup._agreement import enabled as agreement_enabled
from helios_pg._setup._agreement import own_fingerprint
from helios_pg._setup._call import InitCall
from helios_pg._setup._nodes import learn_after_init
from helios_pg._setup._ray import share_attempt

__all__ = ["adopt", "forget", "made", "set_up"]

_SET_UP: list[weakref.ref[Any]] = []
"""The default group ``init`` made or adopted, while it lives (one at most)."""
_OWNED: list[bool] = []
"""Whether ``init`` made that group (else it adopted it)."""
_AT_EXIT: list[int] = []
"""The process that registered the destroy at exit (once a process): a child it forks
inherits the registration, and must not destroy the group its parent still uses."""


def made(*, owned: bool = True) -> None:
    """Note that ``init`` made (or adopted) the default group now alive.

    A group it made is destroyed at the interpreter's exit if the program did not:
    gloo's threads, left running while Python finalizes, abort some processes
    ("terminate called without an active exception").
    """
    world = dist.group.WORLD
    _SET_UP[:] = [weakref.ref(world)] if world is not None else []
    if owned and world is not None and not _AT_EXIT:
        atexit.register(_destroy_at_exit)
        _AT_EXIT.append(os.getpid())
    _OWNED[:] = [owned]


def _destroy_at_exit() -> None:
    # gloo's threads are what abort; an nccl group is left to torch (its destroy may
    # wait on work a dead peer never finishes).
    # A forked child that exits normally (sys.exit in os.fork's child) runs its parent's
    # atexit handlers: its destroy would close the connections the parent still uses.
    if [os.getpid()] != _AT_EXIT:
        return
    if set_up() and _OWNED == [True] and "nccl" not in str(dist.get_backend()).lower():
        from helios_pg._setup._lifecycle import shutdown

        with contextlib.suppress(Exception):
            shutdown()


def set_up() -> bool:
    """Whether ``init`` made or adopted the live default group."""
    world = dist.group.WORLD
    return world is not None and bool(_SET_UP) and _SET_UP[0]() is world


def forget() -> None:
    """The default group ``init`` set up is gone (``shutdown``)."""
    _SET_UP.clear()
    _OWNED.clear()


def _names(backend: str) -> set[str]:
    """The backends a backend string names: ``cpu:gloo,cuda:nccl`` names gloo and nccl."""
    return {part.rpartition(":")[2].strip() for part in backend.lower().split(",")}


def _check_against_group(backend: str | None, world_size: int, rank: int) -> str:
    """Check the arguments against the live group; return its backend."""
    have = str(dist.get_backend())
    if backend is not None:
        wanted = check_backend(backend)
        if not _names(wanted) <= _names(have):
            message = (
                f"backend={backend!r}, but the process group made before init uses "
                f"{have!r}: leave backend out to adopt it, or call shutdown() first to "
                "make a new group"
            )
            raise RendezvousConfigError(message)
    for name, given, actual in (
        ("world_size", world_size, dist.get_world_size()),
        ("rank", rank, dist.get_rank()),
    ):
        if given not in (-1, actual):
            message = (
                f"{name}={given}, but the process group made before init has "
                f"{name} {actual}: leave {name} out to adopt it, or call shutdown() first"
            )
            raise RendezvousConfigError(message)
    return have


def _apply_timeout(timeout: timedelta, backend: str) -> str | None:
    """Set the live group's timeout; say why not where torch cannot."""
    wanted = f"timeout={timeout.total_seconds():g} s"
    public = getattr(dist, "set_timeout", None)
    setter = public or getattr(dist.distributed_c10d, "_set_pg_timeout", None)
    if setter is None:
        return f"{wanted} was not applied: torch {torch.__version__} cannot change a live group's"
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            setter(timeout)
    except (RuntimeError, ValueError, NotImplementedError, AttributeError) as exc:
        return f"{wanted} was not applied: {exc}"
    # torch warns, and leaves the timeout as it was, for a backend that cannot change it
    # (MPI, UCC); _set_pg_timeout's own deprecation is no such warning.
    refused = [str(w.message) for w in said if not issubclass(w.category, FutureWarning)]
    if refused:
        return f"{wanted} was not applied: {'; '.join(refused)}"
    if public is None and "gloo" in _names(backend):
        # Before set_timeout, torch's _set_pg_timeout changes gloo's option but not the
        # timeout its collectives wait (measured on torch 2.4: still the group's own).
        return (
            f"{wanted} was not applied to gloo's collectives: torch {torch.__version__} "
            "cannot change a live gloo group's; give the timeout to what makes the group"
        )
    return None


def _has_store() -> bool:
    """Whether the group has a store that answers (an MPI group's is a placeholder)."""
    getter = getattr(dist.distributed_c10d, "_get_default_store", None)
    if getter is None:
        return False
    try:
        getter().check(["helios_pg/adopted"])
    except Exception:  # torch's placeholder store raises RuntimeError, or worse
        return False
    return True


def _with_ray_attempt(
    report: EnvironmentReport, layout: DistributedInfo | None, wait: timedelta
) -> DistributedInfo | None:
    """The layout to record, with the attempt of this Ray Train worker group."""
    store = dist.distributed_c10d._get_default_store()
    attempt = share_attempt(store, dist.get_rank(), wait)
    if attempt is None or attempt == 0:
        return layout
    return replace(layout if layout is not None else report.info, attempt=attempt)


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside helios-pg and contextlib: the user's."""
    level, frame = 2, sys._getframe(2)  # the caller of the function that warns
    while frame.f_back is not None and (
        str(frame.f_globals.get("__name__", "")).startswith("helios_pg")
        or frame.f_code.co_filename == contextlib.__file__
    ):
        level, frame = level + 1, frame.f_back
    return level


def adopt(
    report: EnvironmentReport,
    *,
    backend: str | None,
    world_size: int,
    rank: int,
    timeout: timedelta | None,
    device: torch.device | None,
    report_failures: bool,
    hang: float | None,
    check_agreement: bool,
    stragglers: float | None = None,
) -> None:
    """Check the arguments against the live default group, and adopt it once.

    Args:
        report: What ``helios_env`` found in the environment.
        backend: init's ``backend``; it must be the group's, when given.
        world_size: init's ``world_size``; it must be the group's, unless -1.
        rank: init's ``rank``; it must be this process's rank, unless -1.
        timeout: init's ``timeout``, checked; set on the group when given.
        device: The device init binds, for the agreement check.
        report_failures: Whether to install the failure reporter.
        hang: The hang timeout in seconds; None starts no watchdog.
        check_agreement: Whether to compare the ranks' software and settings.
        stragglers: The straggler report's period in seconds; None starts none.

    Raises:
        RendezvousConfigError: ``backend``, ``world_size`` or ``rank`` differ from the
            group's (a ``ValueError``).
        BackendUnavailableError: ``backend`` names no backend that runs here.
        ProcessGroupInitError: The ranks run different software.
    """
    have = _check_against_group(backend, world_size, rank)
    if set_up():
        return
    missing = []
    if timeout is not None:
        why = _apply_timeout(timeout, have)
        if why is not None:
            missing.append(why)
    layout = None
    if dist.get_world_size() > 1 and not _has_store():
        missing.append(
            "the group exposes no store: no agreement check, no layout learned, no hang "
            "roll call, and each rank reports only its own failure"
        )
    else:
        checks = agreement_enabled(check_agreement)
        agreement = partial(own_fingerprint, have, device) if checks else None
        call = InitCall.start(
            backend=have, world_size=dist.get_world_size(), rank=dist.get_rank(), timeout=timeout
        )
        layout = learn_after_init(report, call, agreement, owned=False)
        if report.launcher is Launcher.RAY_TRAIN:
            layout = _with_ray_attempt(report, layout, call.wait)
    after_init(
        layout,
        None,
        None,
        report_failures=report_failures,
        hang=hang,
        stragglers=stragglers,
        job=report.job,
    )
    made(owned=False)
    if missing:
        warnings.warn(
            "init adopted the process group made before it, but " + "; ".join(missing),
            AdoptionWarning,
            stacklevel=_caller_level(),
        )
