"""The check: every rank describes its call, and the ranks compare before data moves.

Each rank writes what it is about to do as named fields (``operation``, ``call``,
``dtype``, ``shape``...) in ASCII. A digest of that text travels first, in a slot of
fixed size that can also carry a small call's data; only when the digests differ do the
ranks gather the whole texts (:data:`_WIDTH` bytes each), so that every rank reads every
call and raises the same :class:`CollectiveMismatchError`, instead of aborting or
returning garbage in the real collective. The text is the message: nothing is encoded
that has to be decoded back.

Calls are numbered per group, and only calls that are checked count (whether a call is
checked is decided in ``_validation_switch``).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import struct
import weakref
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
import torch.distributed as dist

from helios_collectives._advice import advice, ranks_text
from helios_collectives._checks import positions
from helios_collectives._errors import CollectiveArgumentError, CollectiveMismatchError
from helios_collectives._group import control_device, global_ranks
from helios_collectives._torch_api import all_gather_flat

__all__ = [
    "PAYLOAD_LIMIT",
    "Agreed",
    "Description",
    "describe_tensors",
    "exchange",
    "run_with_problem",
    "slot_device",
]

_WIDTH = 512  # bytes per rank: 9 fields of at most 48 characters and their names fit
_VALUE_LIMIT = 48
_MAGIC = "helios-collectives/2"
_UNIT, _RECORD = "\x1f", "\x1e"  # ASCII separators; values never contain them
_FREE = frozenset({"rows"})  # fields that may differ between ranks
_NOT_OURS = "not a helios_collectives call (another collective ran there)"
_OTHER_CALL = "a helios_collectives call"
_MASK = (1 << 64) - 1
# The first word of every fingerprint: "helios" and the protocol's version, 4.
_FINGERPRINT = 0x68656C696F730004

_CALLS: weakref.WeakKeyDictionary[dist.ProcessGroup, int] = weakref.WeakKeyDictionary()


def _shorten(value: str) -> str:
    plain = value.isascii() and _UNIT not in value and _RECORD not in value
    if plain and len(value) <= _VALUE_LIMIT:
        return value  # the common case, as it is
    text = value.encode("ascii", "backslashreplace").decode("ascii")
    text = text.replace(_UNIT, " ").replace(_RECORD, " ")
    if len(text) <= _VALUE_LIMIT:
        return text
    # Long values (many shapes, a long message) keep their start and a digest of the
    # whole, so two different values never read the same.
    return f"{text[: _VALUE_LIMIT - 12]}...#{zlib.crc32(text.encode()):08x}"


def _grouped(values: Sequence[object]) -> str:
    where = positions(values)
    if len(where) == 1:
        return next(iter(where))
    return "mixed: " + "; ".join(f"{v} at {', '.join(map(str, i))}" for v, i in where.items())


def describe_tensors(
    tensors: Sequence[torch.Tensor], *, is_list: bool, free_first_dim: bool = False
) -> tuple[tuple[str, str], ...]:
    """Describe the tensors of a call: dtype, device type and shape.

    Args:
        tensors: The call's tensors (one unless ``is_list``).
        is_list: Whether the caller passed a list.
        free_first_dim: Whether dim 0 may differ between ranks (shown as ``*``).

    Returns:
        ``(name, value)`` fields.
    """
    if not tensors:
        return (("shape", "empty list"),)
    if not is_list:
        (tensor,) = tensors
        dims = [str(d) for d in tensor.shape]
        if free_first_dim and dims:
            dims[0] = "*"
        shape = f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"
        return (("dtype", str(tensor.dtype)), ("device type", tensor.device.type), ("shape", shape))
    dtype = _grouped([t.dtype for t in tensors])
    device = _grouped([t.device.type for t in tensors])
    shapes = ", ".join(str(tuple(t.shape)) for t in tensors)
    return (
        ("dtype", dtype),
        ("device type", device),
        ("shape", f"{len(tensors)} tensors: {shapes}"),
    )


@dataclass(frozen=True, slots=True)
class Description:
    """What one rank is about to do.

    Attributes:
        operation: The public function, such as ``"all_reduce_tensors"``.
        fields: ``(name, value)`` pairs that must agree between ranks.
        rows: Dim 0 of this rank's tensor for ``gather_uneven`` (free to differ).
    """

    operation: str
    fields: tuple[tuple[str, str], ...] = ()
    rows: int | None = None

    def encode(self, number: int, problem: str | None) -> bytes:
        """Lay this call out as :data:`_WIDTH` bytes of text.

        Args:
            number: This process's call number on the group.
            problem: This rank's argument problem, or None.

        Returns:
            The description, padded with zero bytes.
        """
        text = self._text(number, problem)
        if self.rows is not None:
            text += f"{_RECORD}rows{_UNIT}{self.rows}"
        raw = text.encode("ascii")
        assert len(raw) <= _WIDTH, text
        return raw.ljust(_WIDTH, b"\0")

    def digest(self, number: int, problem: str | None) -> int:
        """A 64-bit digest of what must agree between ranks (every field but ``rows``).

        Args:
            number: This process's call number on the group.
            problem: This rank's argument problem, or None.

        Returns:
            The digest, as a signed 64-bit integer.
        """
        raw = _digested_text(self, problem) + b"%d" % number
        return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little", signed=True)

    def _fields(self, number: int, problem: str | None) -> list[tuple[str, str]]:
        return [
            ("operation", self.operation),
            ("call number", f"#{number}"),
            ("argument problem", "none" if problem is None else problem),
            *self.fields,
        ]

    def _text(self, number: int, problem: str | None) -> str:
        fields = self._fields(number, problem)
        return _RECORD.join([_MAGIC, *(f"{name}{_UNIT}{_shorten(v)}" for name, v in fields)])


@functools.lru_cache(maxsize=256)
def _digested_text(description: Description, problem: str | None) -> bytes:
    """What a digest covers but the call number, which is appended to it.

    A loop that makes the same call again and again builds its text once.
    """
    return description._text(0, problem).encode("ascii")


def _decode(raw: bytes) -> dict[str, str] | None:
    try:
        magic, *records = raw.rstrip(b"\0").decode("ascii").split(_RECORD)
        if magic != _MAGIC:
            return None
        return dict(cast("tuple[str, str]", tuple(r.split(_UNIT, 1))) for r in records)
    except (UnicodeDecodeError, ValueError):
        return None


def _compared(fields: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    if fields is None:
        return (("operation", _NOT_OURS),)
    return tuple((name, value) for name, value in fields.items() if name not in _FREE)


def check_agreement(
    operation: str, calls: Sequence[dict[str, str] | None], ranks: Sequence[int]
) -> None:
    """Compare every rank's decoded description and raise when they differ.

    Args:
        operation: This rank's operation, for the error.
        calls: Every rank's fields in group-rank order (None: not a description).
        ranks: The global rank of each entry.

    Raises:
        CollectiveMismatchError: The calls differ; the same error on every rank.
    """
    keys = [_compared(fields) for fields in calls]
    if all(key == keys[0] for key in keys):
        return
    counts = Counter(keys)
    best = max(counts.values())
    reference = next(key for key in keys if counts[key] == best)
    disagreeing = tuple(r for r, key in zip(ranks, keys, strict=True) if key != reference)
    agreeing = [r for r, key in zip(ranks, keys, strict=True) if key == reference]
    names: dict[str, None] = {}
    for key in keys:
        names.update(dict.fromkeys(name for name, _ in key))
    differences: dict[str, dict[str, tuple[int, ...]]] = {}
    for name in names:
        seen: dict[str, list[int]] = {}
        for rank, key in zip(ranks, keys, strict=True):
            seen.setdefault(dict(key).get(name, "none"), []).append(rank)
        if len(seen) > 1:
            differences[name] = {value: tuple(rs) for value, rs in seen.items()}
    shown = dict(differences)
    if operation == "gather_into_tensor" and "shape" in shown:
        # A size or an out that fits one rank's shape and not another's follows from the
        # shapes: advice written for one rank's tensor would mislead the others.
        shown.pop("argument problem", None)
    lines = [
        f"  {name}: " + "; ".join(f"{value} on {ranks_text(rs)}" for value, rs in seen.items())
        for name, seen in shown.items()
    ]
    verb = "differs" if len(disagreeing) == 1 else "differ"
    fixes = advice(operation, shown, disagreeing) or [
        "every rank must make the same sequence of collective calls with the same dtype, "
        "device type and shape (only dim 0 may differ in gather_uneven)"
    ]
    message = (
        f"{operation}: ranks disagree on the collective ({ranks_text(disagreeing)} {verb} "
        f"from {ranks_text(agreeing)}), so nothing was run:\n"
        + "\n".join(lines)
        + "\n"
        + "\n".join(f"fix: {fix}" for fix in fixes)
    )
    raise CollectiveMismatchError(
        message, operation=operation, disagreeing_ranks=disagreeing, differences=differences
    )


PAYLOAD_LIMIT = 96
"""Bytes of a call's data that ride in its fingerprint's slot (24 float32 values): a small
all-reduce is checked and made in one collective (:mod:`helios_collectives._small`)."""
# Marker, digest, rows: int64 in the machine's order, padded to 32 bytes so that the
# payload after them can be read in place as any dtype (complex128 included).
_HEAD = struct.Struct("=3q8x")
_SLOT = _HEAD.size + PAYLOAD_LIMIT  # bytes per rank in the first all-gather of a check


@dataclass(frozen=True, slots=True)
class Agreed:
    """What the ranks agreed on.

    Attributes:
        rows: Every rank's ``rows``, in group-rank order (-1 for a call without them).
        payloads: Every rank's payload, one row of bytes per rank in group-rank order,
            on the control device; None when no payload rode along.
    """

    rows: list[int]
    payloads: torch.Tensor | None = None


@dataclass(slots=True)
class _Slots:
    """A group's buffers for the check's all-gather, reused by every call."""

    device: torch.device
    local: torch.Tensor
    gathered: torch.Tensor


_SLOTS: weakref.WeakKeyDictionary[dist.ProcessGroup, _Slots] = weakref.WeakKeyDictionary()


def _slots(group: dist.ProcessGroup) -> _Slots:
    found = _SLOTS.get(group)
    if found is None:
        device = control_device(group)
        local = torch.zeros(_SLOT, dtype=torch.uint8, device=device)
        gathered = torch.zeros(group.size() * _SLOT, dtype=torch.uint8, device=device)
        found = _SLOTS[group] = _Slots(device, local, gathered)
    return found


def slot_device(group: dist.ProcessGroup) -> torch.device:
    """Where the check's all-gather on ``group`` runs (the group's control device).

    Args:
        group: A live process group.

    Returns:
        The device, remembered per group.
    """
    return _slots(group).device


def exchange(
    description: Description,
    group: dist.ProcessGroup,
    problem: str | None = None,
    payload: torch.Tensor | None = None,
) -> Agreed:
    """Share this call's description with every rank and check that all agree.

    One all-gather of a fixed slot, :data:`_SLOT` bytes per rank: a fingerprint (a
    marker, a digest of the description, and ``rows``) and, for a small call, the
    call's data (``payload``). Only when the ranks disagree, a second all-gather of the
    whole descriptions (:data:`_WIDTH` bytes per rank), so that every rank can say how
    they differ. Every rank sees the same fingerprints, so all take the second step or
    none does; where a rank's fingerprint is not one (another collective ran there),
    none does, and that rank is named. The slot has the same size for every call, so
    ranks whose calls differ in size still meet in the same all-gather.

    Args:
        description: This rank's call.
        group: The group the collective runs on.
        problem: This rank's argument problem, which travels with the description.
        payload: A contiguous tensor of at most :data:`PAYLOAD_LIMIT` bytes, whose
            bytes every rank receives; its size must follow from the description, so
            that ranks that agree send the same size.

    Returns:
        Every rank's ``rows`` and, with ``payload``, every rank's payload: a view of
        the group's reused buffer, valid until its next check.

    Raises:
        CollectiveMismatchError: The calls differ; raised on every rank.
    """
    number = _CALLS.get(group, 0) + 1
    _CALLS[group] = number
    slots = _slots(group)
    digest = description.digest(number, problem)
    rows = -1 if description.rows is None else description.rows
    head = _HEAD.pack(_FINGERPRINT, digest, rows)
    nbytes = 0 if payload is None else payload.numel() * payload.element_size()
    _fill(slots, head, payload, nbytes)
    # Zeros: a slot that another collective left unwritten reads as "not ours" on every
    # rank, never as a stale fingerprint that would send only some ranks to step two.
    slots.gathered.zero_()
    all_gather_flat(slots.gathered, slots.local, group)
    size = group.size()
    everyone = _host_bytes(slots.gathered)
    # The marker and digest: the first 16 bytes of each slot, the same on every rank
    # that makes this call (rows, after them, may differ).
    mine = head[:16]
    if all(everyone[i : i + 16] == mine for i in range(0, size * _SLOT, _SLOT)):
        rows_of = [_HEAD.unpack_from(everyone, i)[2] for i in range(0, size * _SLOT, _SLOT)]
        if payload is None:
            return Agreed(rows_of)
        table = slots.gathered.view(size, _SLOT)
        return Agreed(rows_of, table[:, _HEAD.size : _HEAD.size + nbytes])
    words = [_HEAD.unpack_from(everyone, i) for i in range(0, size * _SLOT, _SLOT)]
    ours = [marker == _FINGERPRINT for marker, _, _ in words]
    calls: list[dict[str, str] | None]
    if all(ours):
        calls = _exchange_descriptions(description.encode(number, problem), group, slots.device)
    else:
        # Those ranks take no second step: say what every rank knows without it, the
        # same on every rank (each helios call by its fingerprint).
        calls = [
            {"operation": _OTHER_CALL, "fingerprint": f"{other & _MASK:016x}"} if mine else None
            for mine, (_, other, _) in zip(ours, words, strict=True)
        ]
    check_agreement(description.operation, calls, global_ranks(group))
    # Unreachable: fingerprints differ only where the descriptions do.
    message = f"{description.operation}: the ranks' fingerprints differ, but not their calls"
    raise CollectiveMismatchError(
        message, operation=description.operation, disagreeing_ranks=(), differences={}
    )


def _fill(slots: _Slots, head: bytes, payload: torch.Tensor | None, nbytes: int) -> None:
    """Write this rank's slot: the fingerprint, then the payload's bytes."""
    local = slots.local
    if local.device.type == "cpu":
        ctypes.memmove(local.data_ptr(), head, len(head))
        if payload is not None and payload.device.type == "cpu":
            ctypes.memmove(local.data_ptr() + len(head), payload.data_ptr(), nbytes)
            return
    else:
        local[: len(head)] = torch.frombuffer(bytearray(head), dtype=torch.uint8).to(local.device)
    if payload is not None:
        local[len(head) : len(head) + nbytes] = payload.reshape(-1).view(torch.uint8)


def _host_bytes(tensor: torch.Tensor) -> bytes:
    """A contiguous uint8 tensor's bytes, in one copy (through the host from a device)."""
    host = tensor if tensor.device.type == "cpu" else tensor.cpu()
    return ctypes.string_at(host.data_ptr(), host.numel())


def _exchange_descriptions(
    raw: bytes, group: dist.ProcessGroup, device: torch.device
) -> list[dict[str, str] | None]:
    """Every rank's whole description, decoded (None where it is not one)."""
    local = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    gathered = torch.empty(group.size() * _WIDTH, dtype=torch.uint8, device=device)
    all_gather_flat(gathered, local.to(device), group)
    host = gathered.cpu()  # contiguous: its bytes are read in one copy
    everyone = ctypes.string_at(host.data_ptr(), host.numel())
    return [_decode(everyone[i : i + _WIDTH]) for i in range(0, len(everyone), _WIDTH)]


def run_with_problem(
    description: Description, problem: str | None, group: dist.ProcessGroup
) -> list[int]:
    """Exchange descriptions, then raise this rank's argument problem if it has one.

    When every rank has the same problem, every rank raises it; when only some do,
    the descriptions differ and every rank raises the mismatch instead.

    Args:
        description: This rank's call.
        problem: This rank's argument problem (the full message), or None.
        group: The group the collective runs on.

    Returns:
        Every rank's ``rows``, in group-rank order (see :func:`exchange`).

    Raises:
        CollectiveMismatchError: The calls differ.
        CollectiveArgumentError: Every rank has the same argument problem.
    """
    agreed = exchange(description, group, problem)
    if problem is not None:
        raise CollectiveArgumentError(problem)
    return agreed.rows
