"""A small all-reduce checked and made in one collective.

Its data rides in the slot of the check's all-gather (:func:`_validation.exchange`), and
every rank reduces the gathered rows itself, in rank order: the same rows and the same
arithmetic give the same result on every rank. Whether a call goes this way follows from
what the check compares (dtype, device type, shape, reduce op) and from the group, so
ranks that agree always take the same way.
"""

from __future__ import annotations

import functools

import torch

from helios_collectives._validation import PAYLOAD_LIMIT

__all__ = ["fits", "reduce_rows"]

_BITWISE = {
    "ReduceOp.BAND": torch.bitwise_and,
    "ReduceOp.BOR": torch.bitwise_or,
    "ReduceOp.BXOR": torch.bitwise_xor,
}
_ORDERED = ("ReduceOp.MIN", "ReduceOp.MAX")
_ARITHMETIC = ("ReduceOp.SUM", "ReduceOp.AVG", "ReduceOp.PRODUCT")


def fits(work: torch.Tensor, op: str, control: torch.device) -> bool:
    """Whether ``work`` can be reduced in the check's slot.

    Args:
        work: The contiguous tensor to reduce.
        op: The reduce op's name, such as ``"ReduceOp.SUM"``.
        control: The device of the group's control messages.

    Returns:
        True for at most :data:`PAYLOAD_LIMIT` bytes on the control device's type,
        with an op this module computes for the tensor's dtype.
    """
    dtype = work.dtype
    if work.device.type != control.type or dtype == torch.bool:
        return False
    if work.numel() * work.element_size() > PAYLOAD_LIMIT:
        return False
    if op in _ARITHMETIC:
        return True
    if op in _ORDERED:
        return not dtype.is_complex
    return op in _BITWISE and not (dtype.is_floating_point or dtype.is_complex)


def reduce_rows(rows: torch.Tensor, work: torch.Tensor, op: str) -> None:
    """Reduce every rank's bytes, read as ``work``'s dtype, with ``op``, into ``work``.

    Args:
        rows: One row of bytes per rank, in group-rank order, each row's start aligned
            for the dtype (it is read in place).
        work: This rank's contiguous tensor, overwritten with the result (its dtype and
            element count are every rank's).
        op: The reduce op's name, one that :func:`fits` accepted.
    """
    values = rows.view(work.dtype)
    if values.device != work.device:
        values = values.to(work.device)
    out = work.view(-1)
    if op in _BITWISE:
        combine = _BITWISE[op]
        out.copy_(functools.reduce(combine, values.unbind(0)))
    elif op == "ReduceOp.MIN":
        torch.amin(values, 0, out=out)
    elif op == "ReduceOp.MAX":
        torch.amax(values, 0, out=out)
    elif op == "ReduceOp.PRODUCT":
        torch.prod(values, 0, dtype=work.dtype, out=out)
    else:
        torch.sum(values, 0, dtype=work.dtype, out=out)
        if op == "ReduceOp.AVG":
            out.div_(rows.shape[0])
