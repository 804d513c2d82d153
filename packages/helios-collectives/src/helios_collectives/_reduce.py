"""all_reduce_tensors: one all-reduce for a tensor or a list of tensors."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from helios_collectives._checks import check_tensor, overlap_problem, positions
from helios_collectives._errors import CollectiveArgumentError
from helios_collectives._group import backend_of, require_group
from helios_collectives._small import fits, reduce_rows
from helios_collectives._validation import (
    Description,
    describe_tensors,
    exchange,
    run_with_problem,
    slot_device,
)
from helios_collectives._validation_switch import validation_enabled

__all__ = ["all_reduce_tensors"]

_AVAILABLE = dist.is_available()
_SUM = dist.ReduceOp.SUM
_AVG = dist.ReduceOp.AVG


def _as_tensors(tensor: object) -> tuple[list[torch.Tensor], bool]:
    if isinstance(tensor, torch.Tensor):
        return [tensor], False
    if not isinstance(tensor, (list, tuple)):
        message = (
            f"tensor must be a torch.Tensor or a list of them, got {type(tensor).__name__}: "
            f"{tensor!r}"
        )
        raise TypeError(message)
    return [check_tensor(t, f"tensor[{i}]") for i, t in enumerate(tensor)], True


def _refuse_async(async_op: bool) -> None:
    if async_op:
        message = (
            f"all_reduce_tensors returns the reduced tensor, so it cannot run with "
            f"async_op={async_op!r}; call torch.distributed.all_reduce(..., async_op=True) "
            "yourself, or drop async_op"
        )
        raise CollectiveArgumentError(message)


def _listing(values: Sequence[object]) -> str:
    return ", ".join(
        f"{value} at index {', '.join(str(i) for i in indices)}"
        for value, indices in positions(values).items()
    )


def _problem(
    tensors: Sequence[torch.Tensor],
    is_list: bool,
    op: dist.ReduceOp | dist.ReduceOp.RedOpType | None,
) -> str | None:
    if is_list:
        if not tensors:
            return "all_reduce_tensors got an empty list; pass at least one tensor"
        dtypes = [t.dtype for t in tensors]
        if len(set(dtypes)) > 1:
            return (
                f"all_reduce_tensors needs one dtype, but the list mixes {_listing(dtypes)}; "
                "convert them first, e.g. [t.to(torch.float32) for t in tensors]"
            )
        devices = [t.device for t in tensors]
        if len(set(devices)) > 1:
            return (
                f"all_reduce_tensors needs one device, but the list mixes {_listing(devices)}; "
                "move them first, e.g. [t.to(device) for t in tensors]"
            )
    dtype = tensors[0].dtype
    if op is not None and op == _AVG and not (dtype.is_floating_point or dtype.is_complex):
        return (
            f"op=ReduceOp.AVG of {dtype} tensors would have to round the mean; reduce a "
            "floating-point copy (t.to(torch.float32)) or use ReduceOp.SUM and divide as "
            "you need"
        )
    if not is_list:
        return overlap_problem(tensors[0], "tensor")
    return None


def _op_text(op: dist.ReduceOp | dist.ReduceOp.RedOpType | None) -> str:
    if op is None:
        return "ReduceOp.SUM"
    for name, member in dist.ReduceOp.RedOpType.__members__.items():
        if op == member:
            return f"ReduceOp.{name}"
    return repr(op)


def all_reduce_tensors(
    tensor: torch.Tensor | Sequence[torch.Tensor],
    *,
    op: dist.ReduceOp | dist.ReduceOp.RedOpType | None = None,
    group: dist.ProcessGroup | None = None,
    async_op: bool = False,
    validate: bool | None = None,
) -> torch.Tensor:
    """Reduce tensors across all processes so all have the same value.

    Every rank first checks that all ranks make the same call (dtype, device type,
    shape, reduce op, and the call's number on the group), and every rank raises the
    same :class:`CollectiveMismatchError` when they do not, before any data moves.
    Small calls (up to 96 bytes: a loss, a few metrics) ride inside that check, so
    they cost one collective; larger ones add one all-gather of 128 bytes per rank to
    their one ``torch.distributed.all_reduce``. With one rank nothing is checked, and
    ``validate=False`` skips the check.

    The rule: the result is reduced where torch would reduce it, and returned. A single
    tensor is reduced in place, as ``torch.distributed.all_reduce`` does (clone it
    first to keep the local value). A list cannot be reduced in place as one buffer:
    its tensors (0-d, n-d, or both) are flattened and concatenated, in order, into one
    new 1-D tensor, which is reduced once and returned, and the list's tensors are
    left unchanged. Split the result with ``torch.split`` and the element counts to
    get them back.

    A non-contiguous view is reduced through a contiguous copy that is then copied
    back into the view, so the result is right on every rank and nothing outside the
    view is written (gloo reduces the underlying memory of a view as if it were
    contiguous).

    ``op=ReduceOp.AVG`` works on every backend: where the backend is not nccl with
    CUDA tensors it runs as ``SUM`` followed by a division by the group size. It needs
    floating-point or complex tensors: the mean of integers is a ``ValueError``,
    because rounding it silently would give different answers on different backends.

    Args:
        tensor: The tensor, or list of tensors, to reduce. The list must not be
            empty, and its tensors must share one dtype and one device.
        op: The reduction, such as ``ReduceOp.AVG``; ``ReduceOp.SUM`` when None.
        group: The process group; the default group when None.
        async_op: Only False: the reduced tensor is returned, not a handle.
        validate: Check first that every rank makes the same call. None (the default)
            reads ``HELIOS_VALIDATE_COLLECTIVES``, on when unset; False skips the
            check, for a hot loop that cannot afford it.

    Returns:
        The reduced tensor: ``tensor`` itself for a single tensor, else a new 1-D
        tensor of all the list's elements.

    Raises:
        ProcessGroupNotInitializedError: No process group is initialized (a
            ``RuntimeError``).
        CollectiveArgumentError: The list is empty or mixes dtypes or devices,
            ``op=ReduceOp.AVG`` is asked of integers, or the tensor's elements overlap
            in memory (a ``ValueError``, raised before any communication, or on every
            rank after the check); or ``async_op=True`` (raised
            before anything is sent, in every mode).
        CollectiveMismatchError: The ranks' calls differ (a
            ``ValueError``, raised on every rank).
        TypeError: ``tensor`` is not a tensor or list of tensors, or ``group`` is not
            a process group.

    Example::

        import torch
        from helios_collectives import all_reduce_tensors
        from helios_pg import local_device, process_group

        with process_group():
            loss = torch.tensor(0.25, device=local_device())
            counts = torch.tensor([3.0, 5.0], device=local_device())
            totals = all_reduce_tensors([loss, counts])  # one collective: [loss, *counts]
    """
    world = dist.group.WORLD if _AVAILABLE else None  # None before init
    if (
        op is None
        and group is None
        and not async_op
        and type(tensor) is torch.Tensor
        and world is not None
        and tensor.is_contiguous()
        and (validate is False or world.size() == 1)
    ):
        # The common unchecked call: one contiguous tensor, default group and op, and
        # the check off or nothing to compare (one rank). Nothing can be wrong with it
        # that torch would not report itself.
        if validate is not False:
            validation_enabled(validate)  # a bad setting is an error on one rank too
        dist.all_reduce(tensor)
        return tensor
    _refuse_async(async_op)
    tensors, is_list = _as_tensors(tensor)
    pg = require_group("all_reduce_tensors", group)
    problem = _problem(tensors, is_list, op)
    checked = validation_enabled(validate) and pg.size() > 1
    if problem is not None:
        if checked:
            run_with_problem(_describe(tensors, is_list, op), problem, pg)  # raises
        raise CollectiveArgumentError(problem)
    if is_list:
        work = torch.cat([t.reshape(-1) for t in tensors])
    else:
        work = tensors[0] if tensors[0].is_contiguous() else tensors[0].contiguous()
    if checked and _check(_describe(tensors, is_list, op), work, _op_text(op), pg):
        # The data rode in the check: the all-reduce is made.
        return _result(work, tensors, is_list)
    emulate_avg = (
        op is not None
        and op == _AVG
        and not (work.device.type == "cuda" and "nccl" in backend_of(pg))
    )
    dist.all_reduce(work, op=_SUM if emulate_avg or op is None else op, group=pg)
    if emulate_avg:
        work.div_(pg.size())
    return _result(work, tensors, is_list)


def _describe(
    tensors: Sequence[torch.Tensor],
    is_list: bool,
    op: dist.ReduceOp | dist.ReduceOp.RedOpType | None,
) -> Description:
    fields = (*describe_tensors(tensors, is_list=is_list), ("reduce op", _op_text(op)))
    return Description("all_reduce_tensors", fields)


def _check(description: Description, work: torch.Tensor, op: str, pg: dist.ProcessGroup) -> bool:
    """Check that every rank makes this call; a small ``work`` is reduced in the check.

    Returns:
        True when ``work`` rode in the check and holds the result; False when the
        caller still has to make the all-reduce.
    """
    if not fits(work, op, slot_device(pg)):
        exchange(description, pg)
        return False
    payloads = exchange(description, pg, payload=work).payloads
    assert payloads is not None  # a payload was given
    reduce_rows(payloads, work, op)
    return True


def _result(work: torch.Tensor, tensors: Sequence[torch.Tensor], is_list: bool) -> torch.Tensor:
    if is_list:
        return work
    if work is not tensors[0]:
        tensors[0].copy_(work)
    return tensors[0]
