"""init's agreement check: every rank runs the same software, before the first collective.

Each rank's fingerprint (:mod:`helios_env.integration`, completed here with torch's
CUDA and NCCL versions, the backend and the device type) travels as a short digest in
the exchange of host names that init makes to learn the node layout
(:mod:`helios_pg._setup._nodes`): where every digest is the same, the check costs nothing
more. Where they differ, the first rank of each distinct digest writes its whole
fingerprint and every rank reads those few, so every rank reaches the same verdict:

- a difference in what the ranks run (:data:`helios_env.integration.MUST_AGREE`) is
  a ``ProcessGroupInitError`` on every rank, raised once every rank has read the
  fingerprints (rank 0 hosts the store they are read from);
- a difference in settings is one :class:`~helios_pg._errors.AgreementWarning`, from
  rank 0.

``init(check_agreement=False)`` or ``HELIOS_AGREEMENT_CHECK=0`` turns it off, with the
digest; init then makes no exchange it would not make anyway.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
import warnings
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from helios_env.integration import (
    Fingerprint,
    differences,
    disagreement_message,
    fingerprint,
    settings_message,
    switch,
)
from helios_pg._errors import AgreementWarning, ProcessGroupInitError
from helios_pg._store_poll import wait_for_keys

__all__ = ["VARIABLE", "enabled", "own_fingerprint", "settle", "torch_build", "user_stacklevel"]

VARIABLE = "HELIOS_AGREEMENT_CHECK"
"""``0`` (or ``false``, ``no``, ``off``) turns the check off on this rank."""
_READ_GRACE = 10.0
_UNREADABLE = Fingerprint((("helios-pg", "unknown (its fingerprint could not be read)"),))


def enabled(argument: bool) -> bool:
    """Whether init checks that the ranks agree: ``check_agreement`` and the variable.

    Args:
        argument: init's ``check_agreement``.

    Returns:
        False when either turns the check off.

    Raises:
        ValueError: ``HELIOS_AGREEMENT_CHECK`` is neither on nor off.
    """
    return argument and switch(VARIABLE, os.environ.get(VARIABLE), default=True)


@functools.cache
def torch_build() -> dict[str, str]:
    """The CUDA and NCCL versions of this torch build, ``"none"`` where it has none."""
    cuda = torch.version.cuda or "none"
    nccl = "none"
    if dist.is_nccl_available():
        with contextlib.suppress(AttributeError, RuntimeError):
            found: Any = torch.cuda.nccl.version()  # type: ignore[no-untyped-call, unused-ignore]
            nccl = ".".join(map(str, found)) if isinstance(found, tuple) else str(found)
    return {"cuda": cuda, "nccl": nccl}


def own_fingerprint(backend: str, device: torch.device | None) -> Fingerprint:
    """This rank's fingerprint, as init compares it.

    Args:
        backend: The backend the group will use.
        device: The rank's device, or None for the CPU.

    Returns:
        The fingerprint: versions, script, backend, device type and settings.
    """
    kind = device.type if device is not None else "cpu"
    return fingerprint(torch_build=torch_build(), backend=backend, device=kind)


def user_stacklevel() -> int:
    """``warnings.warn``'s stacklevel for the first caller outside helios_pg and contextlib."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if not (name.startswith("helios_pg.") or name == "contextlib"):
            break
        frame = frame.f_back
        level += 1
    return level


def _decode(raw: bytes) -> Fingerprint:
    try:
        return Fingerprint.decode(raw.decode(errors="replace"))
    except ValueError:
        return _UNREADABLE


def _all_read(store: Any, key: str, rank: int, world_size: int, deadline: float) -> None:
    """Count this rank as done reading; rank 0, whose store they read, waits for all."""
    store.add(key, 1)
    if rank != 0:
        return
    limit = min(deadline, time.monotonic() + _READ_GRACE)
    while int(store.add(key, 0)) < world_size and time.monotonic() < limit:
        time.sleep(0.005)


def settle(
    store: Any,
    prefix: str,
    rank: int,
    *,
    hosts: Sequence[str],
    digests: Sequence[str],
    mine: Fingerprint,
    wait: timedelta,
) -> None:
    """Compare the ranks' fingerprints, given every rank's digest; raise or warn.

    Args:
        store: The store of the exchange.
        prefix: The exchange's keys.
        rank: This rank.
        hosts: Every rank's host, by rank.
        digests: Every rank's digest, by rank; empty for a rank that does not check.
        mine: This rank's fingerprint.
        wait: How long to wait for the others' fingerprints.

    Raises:
        ProcessGroupInitError: The ranks run different software (versions, script).
        TimeoutError: A fingerprint did not arrive in time.
    """
    if all(digest == mine.digest for digest in digests):
        return
    deadline = time.monotonic() + wait.total_seconds()
    checked = {r: digest for r, digest in enumerate(digests) if digest}
    first: dict[str, int] = {}
    for r, digest in checked.items():
        first.setdefault(digest, r)
    keys = {digest: f"{prefix}/fingerprint/{digest}" for digest in first}
    if first[mine.digest] == rank:
        store.set(keys[mine.digest], mine.encode())
    wait_for_keys(store, list(keys.values()), deadline, "the fingerprints of the ranks that differ")
    described = {digest: _decode(bytes(store.get(key))) for digest, key in keys.items()}
    found = differences({r: described[digest] for r, digest in checked.items()})
    unchecked = [r for r, digest in enumerate(digests) if not digest]
    strict = [difference for difference in found if difference.must_agree]
    if strict:
        _all_read(store, f"{prefix}/read", rank, len(digests), deadline)
        raise ProcessGroupInitError(disagreement_message(strict, hosts))
    if rank == 0 and (found or unchecked):
        message = settings_message(found, hosts, unchecked)
        warnings.warn(message, AgreementWarning, stacklevel=user_stacklevel())
