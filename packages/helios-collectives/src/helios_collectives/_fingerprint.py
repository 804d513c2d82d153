"""Validation mode: exchange a fixed-size fingerprint of each call before running it.

Every rank encodes what it is about to do (operation, call number, dtype, shape...)
into :data:`FINGERPRINT_SLOTS` int64 values; one ``all_gather`` of that small
tensor lets every rank compare all calls and raise the same
:class:`CollectiveMismatchError` when they differ, instead of aborting or returning
garbage in the real collective.

Layout (slot: meaning; -1 where a slot does not apply):

====  ==============  =====================================================
0     MAGIC           0x48454C494F53 ("HELIOS") and the layout version
1     OPERATION       1 gather_into_tensor, 2 all_reduce_tensors,
                      3 gather_uneven, 4 safe_barrier
2     SEQUENCE        this process's call number on this group
3     PROBLEM         0, or the code of this rank's argument problem
4     DTYPE           index in a fixed dtype table (-2 mixed)
5     DEVICE          device type: 0 cpu, 1 cuda, else a digest (-2 mixed)
6     REDUCE_OP       the ``ReduceOp`` code
7     COUNT           -1 for a single tensor, else the length of the list
8     NDIM            dimensions of a single tensor
9     NUMEL           elements in all
10    SHAPE_DIGEST    CRC-32 of every shape (without dim 0 for gather_uneven)
11    OUT_NUMEL       elements of gather_into_tensor's ``size``
12-19 DIMS            the first 8 dims of a single tensor, or the element
                      counts of the first 8 tensors of a list
====  ==============  =====================================================
"""

from __future__ import annotations

import os
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, cast

import torch
import torch.distributed as dist

from helios_collectives._comm import all_gather_flat
from helios_collectives._errors import CollectiveArgumentError, CollectiveMismatchError
from helios_collectives._group import control_device, global_ranks, next_sequence

__all__ = [
    "FINGERPRINT_SLOTS",
    "VALIDATE_ENV_VAR",
    "Call",
    "Issue",
    "Operation",
    "Problem",
    "first_dims",
    "prepare",
    "reduce_op_code",
    "validation_enabled",
]

VALIDATE_ENV_VAR = "HELIOS_VALIDATE_COLLECTIVES"
"""Environment variable that turns validation mode on (``1``) for every call."""

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})

MAGIC = 0x48454C494F53 * 16 + 1  # "HELIOS", layout version 1
MAX_DIMS = 8
FINGERPRINT_SLOTS = 12 + MAX_DIMS


class _Slot(IntEnum):
    MAGIC = 0
    OPERATION = 1
    SEQUENCE = 2
    PROBLEM = 3
    DTYPE = 4
    DEVICE = 5
    REDUCE_OP = 6
    COUNT = 7
    NDIM = 8
    NUMEL = 9
    SHAPE_DIGEST = 10
    OUT_NUMEL = 11
    DIMS = 12


class Operation(IntEnum):
    """The collectives that take part in validation."""

    GATHER_INTO_TENSOR = 1
    ALL_REDUCE_TENSORS = 2
    GATHER_UNEVEN = 3
    SAFE_BARRIER = 4

    @property
    def public_name(self) -> str:
        """The name of the public function."""
        return self.name.lower()


class Problem(IntEnum):
    """Argument problems a rank found in its own call (0: none)."""

    NONE = 0
    SIZE = 1
    EMPTY_LIST = 2
    MIXED_DTYPES = 3
    MIXED_DEVICES = 4
    AVG_OF_INTEGERS = 5
    OVERLAPPING_MEMORY = 6
    ZERO_DIM = 7
    ASYNC_OP = 8


_PROBLEM_TEXT = {
    Problem.NONE: "none",
    Problem.SIZE: "size has the wrong element count",
    Problem.EMPTY_LIST: "empty list",
    Problem.MIXED_DTYPES: "list mixes dtypes",
    Problem.MIXED_DEVICES: "list mixes devices",
    Problem.AVG_OF_INTEGERS: "ReduceOp.AVG of integers",
    Problem.OVERLAPPING_MEMORY: "tensor with overlapping memory",
    Problem.ZERO_DIM: "0-d tensor",
    Problem.ASYNC_OP: "async_op=True",
}

_DTYPES: tuple[torch.dtype, ...] = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.complex64,
    torch.complex128,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
)
_DEVICE_TYPES = ("cpu", "cuda")
_MIXED = -2
_NONE = -1
# What may differ between ranks in gather_uneven: dim 0, and so the element count.
_FIRST_DIM_SLOTS = frozenset({int(_Slot.NUMEL), int(_Slot.DIMS)})


def _digest(text: str) -> int:
    return zlib.crc32(text.encode())


def _dtype_code(dtype: torch.dtype) -> int:
    if dtype in _DTYPES:
        return _DTYPES.index(dtype)
    return 100 + _digest(str(dtype))


def _dtype_text(code: int) -> str:
    if code == _MIXED:
        return "mixed dtypes"
    if code == _NONE:
        return "none"
    if 0 <= code < len(_DTYPES):
        return str(_DTYPES[code])
    return f"dtype #{code:x}"


def _device_code(device_type: str) -> int:
    if device_type in _DEVICE_TYPES:
        return _DEVICE_TYPES.index(device_type)
    return 100 + _digest(device_type)


def _device_text(code: int) -> str:
    if code == _MIXED:
        return "mixed devices"
    if code == _NONE:
        return "none"
    if 0 <= code < len(_DEVICE_TYPES):
        return _DEVICE_TYPES[code]
    return f"device type #{code:x}"


def reduce_op_code(op: Any) -> int:
    """Encode a ``ReduceOp`` (or its ``RedOpType``) as a small integer.

    Args:
        op: The reduction, as passed to ``torch.distributed.all_reduce``.

    Returns:
        The ``RedOpType`` value, or a digest of ``repr(op)`` for anything else.
    """
    for member in dist.ReduceOp.RedOpType.__members__.values():
        if op == member:
            return int(member.value)
    return 100 + _digest(repr(op))


def _reduce_op_text(code: int) -> str:
    if code == _NONE:
        return "none"
    for name, member in dist.ReduceOp.RedOpType.__members__.items():
        if int(member.value) == code:
            return f"ReduceOp.{name}"
    return f"reduce op #{code:x}"


@dataclass(frozen=True, slots=True)
class Call:
    """What one rank is about to do, as the fingerprint encodes it.

    Attributes:
        operation: The collective.
        tensors: The input tensors (one unless ``is_list``).
        is_list: Whether the caller passed a list.
        problem: This rank's argument problem, if any.
        reduce_op: The reduction for all_reduce_tensors, else None.
        out_numel: The element count of gather_into_tensor's ``size``, else -1.
        free_first_dim: Whether dim 0 may differ between ranks (gather_uneven).
    """

    operation: Operation
    tensors: Sequence[torch.Tensor] = ()
    is_list: bool = False
    problem: Problem = Problem.NONE
    reduce_op: Any = None
    out_numel: int = -1
    free_first_dim: bool = False

    def encode(self, sequence: int) -> list[int]:
        """Lay this call out as :data:`FINGERPRINT_SLOTS` integers.

        Args:
            sequence: This process's call number on the group.

        Returns:
            The fingerprint.
        """
        row = [_NONE] * FINGERPRINT_SLOTS
        row[_Slot.MAGIC] = MAGIC
        row[_Slot.OPERATION] = int(self.operation)
        row[_Slot.SEQUENCE] = sequence
        row[_Slot.PROBLEM] = int(self.problem)
        row[_Slot.OUT_NUMEL] = self.out_numel
        if self.reduce_op is not None:
            row[_Slot.REDUCE_OP] = reduce_op_code(self.reduce_op)
        if not self.tensors and not self.is_list:
            return row
        dtypes = {t.dtype for t in self.tensors}
        devices = {t.device.type for t in self.tensors}
        if len(dtypes) == 1:
            row[_Slot.DTYPE] = _dtype_code(dtypes.pop())
        elif dtypes:
            row[_Slot.DTYPE] = _MIXED
        if len(devices) == 1:
            row[_Slot.DEVICE] = _device_code(devices.pop())
        elif devices:
            row[_Slot.DEVICE] = _MIXED
        row[_Slot.NUMEL] = sum(t.numel() for t in self.tensors)
        if self.is_list:
            row[_Slot.COUNT] = len(self.tensors)
            shapes = [tuple(t.shape) for t in self.tensors]
            row[_Slot.SHAPE_DIGEST] = _digest(repr(shapes))
            for i, t in enumerate(self.tensors[:MAX_DIMS]):
                row[_Slot.DIMS + i] = t.numel()
            return row
        shape = tuple(self.tensors[0].shape)
        row[_Slot.NDIM] = len(shape)
        digested = shape[1:] if self.free_first_dim else shape
        row[_Slot.SHAPE_DIGEST] = _digest(repr(digested))
        for i, size in enumerate(shape[:MAX_DIMS]):
            row[_Slot.DIMS + i] = size
        return row

    def compared(self, row: Sequence[int]) -> tuple[int, ...]:
        """Keep the slots that must agree between ranks.

        Args:
            row: A fingerprint.

        Returns:
            The fingerprint with the slots this operation lets differ set to -1.
        """
        free = _FIRST_DIM_SLOTS if self.free_first_dim else frozenset()
        return tuple(_NONE if i in free else v for i, v in enumerate(row))


def _describe_shape(row: Sequence[int]) -> str:
    count = row[_Slot.COUNT]
    numel = row[_Slot.NUMEL]
    digest = f"{row[_Slot.SHAPE_DIGEST]:08x}"
    if count >= 0:
        numels = [row[_Slot.DIMS + i] for i in range(min(count, MAX_DIMS))]
        more = ", ..." if count > MAX_DIMS else ""
        listed = ", ".join(str(n) for n in numels) + more
        return f"{count} tensors of {listed} elements ({numel} in all; shapes digest {digest})"
    ndim = row[_Slot.NDIM]
    if ndim < 0:
        return "no tensor"
    dims = [str(row[_Slot.DIMS + i]) for i in range(min(ndim, MAX_DIMS))]
    if row[_Slot.NUMEL] == _NONE and dims:  # gather_uneven: dim 0 is free
        dims[0] = "*"
    if ndim > MAX_DIMS:
        return f"({', '.join(dims)}, ...) {ndim}-d (shape digest {digest})"
    inner = ", ".join(dims) + ("," if ndim == 1 else "")
    return f"({inner})"


def _count_text(numel: int) -> str:
    return "none" if numel < 0 else f"{numel} elements"


def _describe_operation(row: Sequence[int]) -> str:
    if row[_Slot.MAGIC] != MAGIC:
        return "not a helios_collectives call (another collective ran there)"
    try:
        return Operation(row[_Slot.OPERATION]).public_name
    except ValueError:
        return f"operation #{row[_Slot.OPERATION]}"


# Each field: the name in messages, and how to describe one rank's value.
_FIELDS: tuple[tuple[str, Callable[[Sequence[int]], str]], ...] = (
    ("operation", _describe_operation),
    ("call number", lambda row: f"#{row[_Slot.SEQUENCE]}"),
    ("argument problem", lambda row: _PROBLEM_TEXT.get(Problem(row[_Slot.PROBLEM]), "?")),
    ("dtype", lambda row: _dtype_text(row[_Slot.DTYPE])),
    ("device type", lambda row: _device_text(row[_Slot.DEVICE])),
    ("reduce op", lambda row: _reduce_op_text(row[_Slot.REDUCE_OP])),
    ("shape", _describe_shape),
    ("size", lambda row: _count_text(row[_Slot.OUT_NUMEL])),
)


def _ranks_text(ranks: Sequence[int]) -> str:
    label = "rank" if len(ranks) == 1 else "ranks"
    return f"{label} {', '.join(str(r) for r in ranks)}"


def _safe_describe(describe: Callable[[Sequence[int]], str], row: Sequence[int]) -> str:
    try:
        return str(describe(row))
    except (ValueError, IndexError):
        return "unreadable"


def check_rows(call: Call, rows: Sequence[Sequence[int]], ranks: Sequence[int]) -> None:
    """Compare every rank's fingerprint and raise when they differ.

    Args:
        call: This rank's call.
        rows: Every rank's fingerprint, in group-rank order.
        ranks: The global rank of each row.

    Raises:
        CollectiveMismatchError: The fingerprints differ; the same error on every rank.
    """
    keys = [call.compared(row) for row in rows]
    if all(key == keys[0] for key in keys):
        return
    counts = Counter(keys)
    best = max(counts.values())
    reference = next(key for key in keys if counts[key] == best)
    disagreeing = tuple(rank for rank, key in zip(ranks, keys, strict=True) if key != reference)
    compared_rows = [list(key) for key in keys]
    differences: dict[str, dict[str, tuple[int, ...]]] = {}
    for name, describe in _FIELDS:
        seen: dict[str, list[int]] = {}
        for rank, row in zip(ranks, compared_rows, strict=True):
            seen.setdefault(_safe_describe(describe, row), []).append(rank)
        if len(seen) > 1:
            differences[name] = {text: tuple(rs) for text, rs in seen.items()}
    lines = [
        f"  {name}: " + "; ".join(f"{text} on {_ranks_text(rs)}" for text, rs in values.items())
        for name, values in differences.items()
    ]
    agreeing = [rank for rank, key in zip(ranks, keys, strict=True) if key == reference]
    message = (
        f"{call.operation.public_name}: ranks disagree on the collective "
        f"({_ranks_text(disagreeing)} {'differs' if len(disagreeing) == 1 else 'differ'} "
        f"from {_ranks_text(agreeing)}), so nothing "
        "was run:\n"
        + "\n".join(lines)
        + "\nevery rank must make the same sequence of collective calls with the same "
        "dtype, device type and shape (only dim 0 may differ in gather_uneven)"
    )
    raise CollectiveMismatchError(
        message,
        operation=call.operation.public_name,
        disagreeing_ranks=disagreeing,
        differences=differences,
    )


def exchange(call: Call, group: dist.ProcessGroup, sequence: int) -> list[list[int]]:
    """Share this call's fingerprint with every rank and check that all agree.

    One ``all_gather`` of :data:`FINGERPRINT_SLOTS` int64 values per rank.

    Args:
        call: This rank's call.
        group: The group the collective runs on.
        sequence: This process's call number on ``group``.

    Returns:
        Every rank's fingerprint, in group-rank order.

    Raises:
        CollectiveMismatchError: The calls differ; raised on every rank.
    """
    device = control_device(group)
    local = torch.tensor(call.encode(sequence), dtype=torch.int64, device=device)
    gathered = torch.empty(group.size() * FINGERPRINT_SLOTS, dtype=torch.int64, device=device)
    all_gather_flat(gathered, local, group)
    rows: list[list[int]] = gathered.view(group.size(), FINGERPRINT_SLOTS).tolist()
    check_rows(call, rows, global_ranks(group))
    return rows


def first_dims(rows: Sequence[Sequence[int]]) -> list[int]:
    """Read dim 0 of each rank's tensor from exchanged fingerprints.

    Args:
        rows: Every rank's fingerprint.

    Returns:
        Dim 0 of each rank's tensor, in group-rank order.
    """
    return [row[_Slot.DIMS] for row in rows]


def validation_enabled(validate: bool | None) -> bool:
    """Decide whether this call runs in validation mode.

    Args:
        validate: The caller's choice; None reads ``HELIOS_VALIDATE_COLLECTIVES``.

    Returns:
        True when the fingerprint exchange should run.

    Raises:
        TypeError: ``validate`` is neither a bool nor None.
        ValueError: ``HELIOS_VALIDATE_COLLECTIVES`` is set to something unreadable.
    """
    if validate is not None:
        if not isinstance(cast(object, validate), bool):
            message = f"validate must be True, False or None, got {validate!r}"
            raise TypeError(message)
        return validate
    raw = os.environ.get(VALIDATE_ENV_VAR)
    if raw is None:
        return False
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    message = (
        f"{VALIDATE_ENV_VAR} must be 1 or 0 (or true/false, yes/no, on/off), got {raw!r}; "
        f"set {VALIDATE_ENV_VAR}=1 to validate every collective or unset it"
    )
    raise ValueError(message)


@dataclass(frozen=True, slots=True)
class Issue:
    """An argument problem this rank found in its own call.

    Attributes:
        problem: Its code, which goes into the fingerprint.
        message: The message, with the offending value and the way out.
    """

    problem: Problem
    message: str

    def error(self) -> CollectiveArgumentError:
        """Build the error to raise.

        Returns:
            A ``CollectiveArgumentError`` with :attr:`message`.
        """
        return CollectiveArgumentError(self.message)


def prepare(
    call: Call,
    issue: Issue | None,
    group: dist.ProcessGroup,
    *,
    validate: bool,
    always_exchange: bool = False,
) -> list[list[int]] | None:
    """Count the call, exchange fingerprints when asked, and raise argument problems.

    Without an exchange, an argument problem is raised at once, before any
    communication. With one, it travels in the fingerprint and is raised after the
    exchange, so every rank raises: a mismatch when the ranks differ, else the same
    ``CollectiveArgumentError`` everywhere.

    Args:
        call: This rank's call.
        issue: This rank's argument problem, or None.
        group: The group the collective runs on.
        validate: Whether validation mode is on.
        always_exchange: Whether the operation needs the fingerprints anyway
            (gather_uneven reads every rank's dim 0 from them).

    Returns:
        Every rank's fingerprint when they were exchanged, else None.

    Raises:
        CollectiveArgumentError: ``issue`` is not None.
        CollectiveMismatchError: The exchanged fingerprints differ.
    """
    exchanging = validate or always_exchange
    if issue is not None and not exchanging:
        raise issue.error()
    sequence = next_sequence("collective", group)
    rows = exchange(call, group, sequence) if exchanging else None
    if issue is not None:
        raise issue.error()
    return rows
