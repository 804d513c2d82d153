"""Picklable objects between ranks: broadcast one, gather one from every rank.

Each rank's pickled bytes travel in a frame of :data:`INLINE` bytes: an 8-byte header
(the length, or minus the length of an error text) and the first bytes of the payload.
An object that fits in its frame costs one collective; a larger one a second, whose
size every rank already knows from the headers. A rank that cannot pickle its object
still sends its frame, carrying why, so every rank raises the same error instead of
waiting for a peer that will never send. No numpy: bytes go through ``torch.frombuffer``.
"""

from __future__ import annotations

import ctypes
import pickle
from typing import TypeVar

import torch
import torch.distributed as dist

from helios_collectives._errors import CollectiveArgumentError
from helios_collectives._group import control_device, global_ranks, require_group
from helios_collectives._torch_api import all_gather_flat
from helios_collectives._validation import Description, exchange
from helios_collectives._validation_switch import validation_enabled

__all__ = ["INLINE", "broadcast_object", "gather_objects"]

T = TypeVar("T")

INLINE = 4096
"""Bytes of a rank's frame, header included: objects that fit travel in one collective."""
_HEADER = 8


def _pickled(obj: object) -> tuple[bytes, bool]:
    """The object's pickle, or the text of why it has none; whether it is a pickle."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), True
    except Exception as exc:  # whatever stops the pickle is told to every rank
        try:
            why = f"{type(exc).__name__}: {exc}"
        except Exception:  # an exception whose str() raises still has a type
            why = type(exc).__name__
        return why.encode(errors="replace")[:1024], False


def _frame(data: bytes, ok: bool, device: torch.device) -> torch.Tensor:
    length = len(data) if ok else -len(data)
    head = length.to_bytes(_HEADER, "little", signed=True) + data[: INLINE - _HEADER]
    frame = torch.zeros(INLINE, dtype=torch.uint8)
    frame[: len(head)] = torch.frombuffer(bytearray(head), dtype=torch.uint8)
    return frame.to(device)


def _bytes(tensor: torch.Tensor) -> bytes:
    """A uint8 tensor's bytes, copied once (``tolist`` would build a list of ints)."""
    host = tensor.cpu().contiguous()
    return ctypes.string_at(host.data_ptr(), host.numel())


def _tensor(data: bytes, device: torch.device) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)


def _length(frame: bytes) -> int:
    return int.from_bytes(frame[:_HEADER], "little", signed=True)


def _failure(operation: str, rank: int, frame: bytes) -> CollectiveArgumentError:
    why = frame[_HEADER : _HEADER - _length(frame)].decode(errors="replace")
    message = (
        f"{operation}: rank {rank}'s object cannot be pickled ({why}); send only objects "
        "that pickle.dumps accepts (no open files, locks, lambdas or CUDA streams)"
    )
    error = CollectiveArgumentError(message)
    error.helios_peer_failure = rank != dist.get_rank()
    return error


def _unpickle(data: bytes) -> object:
    # Only objects this job's own ranks pickled, as with torch's object collectives.
    return pickle.loads(data)  # noqa: S301


def broadcast_object(
    obj: T | None,
    src: int = 0,
    *,
    group: dist.ProcessGroup | None = None,
    validate: bool | None = None,
) -> T:
    """Send rank ``src``'s object to every rank of the group, and return it on each.

    The object is pickled on ``src`` and unpickled on every other rank, which gets an
    equal copy; ``src`` gets ``obj`` itself. What the other ranks pass is ignored: pass
    the same expression on every rank, such as ``config if rank == 0 else None``, and a
    type checker gives the result ``config``'s type, not ``Optional``. An object of up
    to 4 KiB pickled costs one collective, a larger one two. Unpickling runs code of the
    sender's choosing: use it only between the ranks of your own job, as with torch's
    object collectives.

    Every rank first checks that all ranks make this call with the same ``src`` (one
    all-gather of 128 bytes per rank), so a ``src`` that differs between ranks is a
    :class:`CollectiveMismatchError` on every rank, not a wait until the group's timeout.

    Args:
        obj: The object, on ``src``; ``None`` (or anything) on the other ranks.
        src: The global rank that sends.
        group: The process group; the default group when None.
        validate: Check first that every rank makes the same call. None (the default)
            reads ``HELIOS_VALIDATE_COLLECTIVES``, on when unset; False skips the check.

    Returns:
        ``src``'s object.

    Raises:
        ProcessGroupNotInitializedError: No process group is initialized (a
            ``RuntimeError``).
        CollectiveArgumentError: ``src`` is not a rank of the group (a ``ValueError``,
            before any communication), or ``src``'s object cannot be pickled (raised on
            every rank).
        CollectiveMismatchError: The ranks pass different ``src`` values, or some are
            in another helios collective (a ``ValueError``, raised on every rank).
        TypeError: ``group`` is not a process group.

    Example::

        from helios_collectives import broadcast_object
        from helios_pg import process_group

        with process_group():
            config = broadcast_object({"lr": 0.1, "vocab": ["a", "b"]})
    """
    pg = require_group("broadcast_object", group)
    members = global_ranks(pg)
    if src not in members:
        message = (
            f"broadcast_object: src={src!r} is not a global rank of the group, whose "
            f"ranks are {members}; pass one of them"
        )
        raise CollectiveArgumentError(message)
    if validation_enabled(validate) and pg.size() > 1:
        exchange(Description("broadcast_object", (("source rank", str(src)),)), pg)
    device = control_device(pg)
    sending = dist.get_rank() == src
    data, ok = _pickled(obj) if sending else (b"", True)
    frame = _frame(data, ok, device)
    dist.broadcast(frame, src, group=pg)
    head = _bytes(frame)
    length = _length(head)
    if length < 0:
        raise _failure("broadcast_object", src, head)
    if sending:
        rest_length = length - (INLINE - _HEADER)
        if rest_length > 0:
            dist.broadcast(_tensor(data[INLINE - _HEADER :], device), src, group=pg)
        return obj  # type: ignore[return-value]  # src sends an object, not None
    payload = head[_HEADER : _HEADER + length]
    if length > INLINE - _HEADER:
        rest = torch.empty(length - (INLINE - _HEADER), dtype=torch.uint8, device=device)
        dist.broadcast(rest, src, group=pg)
        payload += _bytes(rest)
    value: T = _unpickle(payload)  # type: ignore[assignment]
    return value


def gather_objects(
    obj: T, *, group: dist.ProcessGroup | None = None, validate: bool | None = None
) -> list[T]:
    """Gather one picklable object from every rank of the group, on every rank.

    Objects of up to 4 KiB pickled cost one collective, larger ones a second one, of
    the largest remainder. Every rank unpickles what the others sent (its own object
    included, so each rank holds equal copies): use it only between the ranks of your
    own job, as with torch's object collectives.

    Every rank first checks that all ranks make this call (one all-gather of 128 bytes
    per rank): a rank in another helios collective is a :class:`CollectiveMismatchError`
    on every rank.

    Args:
        obj: This rank's object.
        group: The process group; the default group when None.
        validate: Check first that every rank makes the same call. None (the default)
            reads ``HELIOS_VALIDATE_COLLECTIVES``, on when unset; False skips the check.

    Returns:
        Every rank's object, in group-rank order.

    Raises:
        ProcessGroupNotInitializedError: No process group is initialized (a
            ``RuntimeError``).
        CollectiveArgumentError: A rank's object cannot be pickled (a ``ValueError``
            naming that rank, raised on every rank).
        CollectiveMismatchError: Some ranks are in another helios collective (a
            ``ValueError``, raised on every rank).
        TypeError: ``group`` is not a process group.

    Example::

        from helios_collectives import gather_objects
        from helios_env import get_global_rank
        from helios_pg import process_group

        with process_group():
            seen = gather_objects({"rank": get_global_rank(), "files": 3})
    """
    pg = require_group("gather_objects", group)
    world = pg.size()
    if validation_enabled(validate) and world > 1:
        exchange(Description("gather_objects"), pg)
    device = control_device(pg)
    data, ok = _pickled(obj)
    frames = torch.empty(world * INLINE, dtype=torch.uint8, device=device)
    all_gather_flat(frames, _frame(data, ok, device), pg)
    gathered = _bytes(frames)
    heads = [gathered[i * INLINE : (i + 1) * INLINE] for i in range(world)]
    lengths = [_length(head) for head in heads]
    for rank, head, length in zip(global_ranks(pg), heads, lengths, strict=True):
        if length < 0:
            raise _failure("gather_objects", rank, head)
    payloads = [head[_HEADER : _HEADER + n] for head, n in zip(heads, lengths, strict=True)]
    inline = INLINE - _HEADER
    longest = max(lengths) - inline
    if longest > 0:
        # Every rank knows every length: one gather of the remainders, padded alike.
        rests = torch.empty(world * longest, dtype=torch.uint8, device=device)
        all_gather_flat(rests, _tensor(data[inline:].ljust(longest, b"\0"), device), pg)
        tails = _bytes(rests)
        payloads = [
            payload + tails[i * longest : i * longest + max(0, lengths[i] - inline)]
            for i, payload in enumerate(payloads)
        ]
    values: list[T] = [_unpickle(payload) for payload in payloads]  # type: ignore[misc]
    return values
