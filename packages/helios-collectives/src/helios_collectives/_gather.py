"""gather_into_tensor and gather_uneven: all ranks' tensors, concatenated along dim 0."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
import torch.distributed as dist

from helios_collectives._checks import check_tensor
from helios_collectives._errors import CollectiveArgumentError
from helios_collectives._group import require_group
from helios_collectives._torch_api import all_gather_flat
from helios_collectives._validation import Description, describe_tensors, run_with_problem
from helios_collectives._validation_switch import validation_enabled

__all__ = ["UnevenGather", "gather_into_tensor", "gather_uneven"]


def _check_size(size: object) -> tuple[int, ...]:
    if type(size) is tuple:
        for dim in size:
            if type(dim) is not int or dim < 0:
                break
        else:
            return size  # the common call, checked in one pass
    if isinstance(size, int) and not isinstance(size, bool):
        size = (size,)
    if not isinstance(size, (tuple, list, torch.Size)):
        message = (
            f"size must be a tuple of ints or a torch.Size, got {type(size).__name__}: {size!r}"
        )
        raise TypeError(message)
    dims = cast("Sequence[object]", size)
    for index, dim in enumerate(dims):
        if isinstance(dim, bool) or not isinstance(dim, int):
            message = (
                f"size must hold ints, got size[{index}]={dim!r} of type "
                f"{type(dim).__name__} in {size!r}"
            )
            raise TypeError(message)
        if dim < 0:
            message = (
                f"size must hold non-negative ints, got size[{index}]={dim} in {size!r}; "
                "give every dimension explicitly (no -1)"
            )
            raise CollectiveArgumentError(message)
    return tuple(cast("Sequence[int]", dims))


def _size_problem(tensor: torch.Tensor, shape: tuple[int, ...], world: int) -> str:
    wanted = world * tensor.numel()
    got = math.prod(shape)
    concatenated = (world * tensor.shape[0], *tensor.shape[1:]) if tensor.dim() else (world,)
    stacked = (world, *tensor.shape)
    return (
        f"size {shape} has {got} elements, but gathering a tensor of shape "
        f"{tuple(tensor.shape)} from {world} rank{'' if world == 1 else 's'} gives {wanted}; "
        f"pass size={concatenated} (concatenated) or {stacked} (stacked)"
    )


def gather_into_tensor(
    tensor: torch.Tensor,
    size: Sequence[int] | torch.Size,
    *,
    group: dist.ProcessGroup | None = None,
    validate: bool | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Gather the tensors across all processes and merge them into a single tensor.

    Every rank's tensor, in rank order, concatenated along dim 0 and laid out with
    shape ``size``: ``(world_size * n, ...)`` for a plain concatenation, or
    ``(world_size, n, ...)`` for a stack (any shape with the right element count
    works; the elements are in row-major order). The result is a new tensor on the
    input's device. Non-contiguous inputs are gathered through a contiguous copy.
    Every rank must pass a tensor of the same shape and dtype; see
    :func:`gather_uneven` when dim 0 differs.

    Args:
        tensor: This rank's tensor.
        size: Shape of the result; its element count must be
            ``world_size * tensor.numel()``.
        group: Process group to gather over; None selects the default group.
        validate: Check first that every rank makes the same call (one all-gather of
            128 bytes per rank). None (the default) reads
            ``HELIOS_VALIDATE_COLLECTIVES``, on when unset; False skips the check.
        out: A preallocated result to gather into (a loop that gathers the same shape
            again and again allocates nothing): contiguous, of shape ``size``, with the
            input's dtype and device. Checked before anything is sent.

    Returns:
        ``out`` when given, else a new tensor of shape ``size`` with the input's dtype
        and device.

    Raises:
        ProcessGroupNotInitializedError: No process group is initialized (a
            ``RuntimeError``).
        CollectiveArgumentError: ``size`` holds a negative number (a ``ValueError``,
            raised before any communication), or has the wrong element count, or ``out``
            differs from the result in shape, dtype or device or is not contiguous (raised
            before any communication when the check is off, else on every rank after it).
        CollectiveMismatchError: The ranks' calls differ (a
            ``ValueError``, raised on every rank).
        TypeError: ``tensor`` is not a tensor or ``size`` is not a tuple of ints.

    Example::

        import torch
        from helios_collectives import gather_into_tensor
        from helios_pg import local_device, process_group

        with process_group() as info:
            mine = torch.full((2, 3), float(info.rank), device=local_device())
            rows = gather_into_tensor(mine, (info.world_size * 2, 3))  # rank 0's rows first
            stacked = gather_into_tensor(mine, (info.world_size, 2, 3))  # stacked[r]: rank r's
    """
    tensor = check_tensor(tensor, "tensor")
    shape = _check_size(size)
    pg = require_group("gather_into_tensor", group)
    world = pg.size()
    problem = None
    if math.prod(shape) != world * tensor.numel():
        problem = _size_problem(tensor, shape, world)
    elif out is not None:
        problem = _out_problem(out, tensor, shape)
    if validation_enabled(validate) and world > 1:
        fields = (*describe_tensors([tensor], is_list=False), ("size", str(shape)))
        run_with_problem(Description("gather_into_tensor", fields), problem, pg)
    elif problem is not None:
        raise CollectiveArgumentError(problem)
    # new_empty: the input's dtype and device, without building a torch.device each call.
    output = tensor.new_empty(shape) if out is None else out
    all_gather_flat(output, tensor if tensor.is_contiguous() else tensor.contiguous(), pg)
    return output


def _out_problem(out: object, tensor: torch.Tensor, shape: tuple[int, ...]) -> str | None:
    """What makes ``out`` unfit to hold the result, or None."""
    if not isinstance(out, torch.Tensor):
        return f"out must be a torch.Tensor or None, got {type(out).__name__}: {out!r}"
    differences = []
    if tuple(out.shape) != shape:
        differences.append(f"shape {tuple(out.shape)} instead of {shape}")
    if out.dtype != tensor.dtype:
        differences.append(f"dtype {out.dtype} instead of {tensor.dtype}")
    if out.device != tensor.device:
        differences.append(f"device {out.device} instead of {tensor.device}")
    if not out.is_contiguous():
        differences.append(f"is not contiguous (stride {tuple(out.stride())})")
    if not differences:
        return None
    return (
        f"out must match the result of gathering a {tensor.dtype} tensor on {tensor.device} "
        f"into size {shape}, but it has {'; '.join(differences)}; pass out=torch.empty("
        f"{shape}, dtype={tensor.dtype}, device='{tensor.device}'), or out=None"
    )


@dataclass(frozen=True, slots=True)
class UnevenGather:
    """The result of :func:`gather_uneven`.

    Attributes:
        tensor: Every rank's tensor, concatenated along dim 0 in rank order.
        sizes: Dim 0 of each rank's tensor, in group-rank order.
    """

    tensor: torch.Tensor
    sizes: tuple[int, ...]

    def split(self) -> tuple[torch.Tensor, ...]:
        """Split :attr:`tensor` back into each rank's part.

        Returns:
            One view of :attr:`tensor` per rank, in group-rank order.
        """
        return tuple(torch.split(self.tensor, list(self.sizes)))


def gather_uneven(tensor: torch.Tensor, *, group: dist.ProcessGroup | None = None) -> UnevenGather:
    """Gather tensors whose dim 0 differs by rank, concatenated along dim 0.

    The ranks first exchange a short description of their call (dim 0 and the rest
    of the shape, dtype, device type and call number) in one collective, so ranks that
    disagree on anything but dim 0 get a ``CollectiveMismatchError`` on every rank,
    naming the ranks and how they differ, instead of an abort or garbage. Each rank
    then pads its tensor to the largest dim 0 and one ``all_gather`` moves the data;
    the padding is dropped from the result. (Two collectives per call; validation
    mode adds nothing, as the description is always exchanged.)

    Args:
        tensor: This rank's tensor, with at least one dimension. Non-contiguous
            tensors are fine.
        group: Process group to gather over; None selects the default group.

    Returns:
        The concatenation (a new tensor on the input's device) and each rank's dim 0.

    Raises:
        ProcessGroupNotInitializedError: No process group is initialized (a
            ``RuntimeError``).
        CollectiveArgumentError: ``tensor`` is 0-d (a ``ValueError``, raised on every
            rank when all ranks pass one).
        CollectiveMismatchError: The ranks' tensors differ in anything but dim 0, or
            the ranks are not all in this call (a ``ValueError``, raised on every
            rank).
        TypeError: ``tensor`` is not a tensor.

    Example::

        import torch
        from helios_collectives import gather_uneven
        from helios_pg import local_device, process_group

        with process_group() as info:
            mine = torch.ones(info.rank + 1, 4, device=local_device())  # rank r: r + 1 rows
            result = gather_uneven(mine)  # result.sizes == (1, 2, ..., world_size)
            per_rank = result.split()  # each rank's rows again, in rank order
    """
    tensor = check_tensor(tensor, "tensor")
    pg = require_group("gather_uneven", group)
    problem = None
    if tensor.dim() == 0:
        problem = (
            "gather_uneven needs a tensor with at least one dimension, got a 0-d tensor; "
            "pass tensor.reshape(1)"
        )
    fields = describe_tensors([tensor], is_list=False, free_first_dim=True)
    rows = tensor.shape[0] if tensor.dim() else 0
    sizes = tuple(run_with_problem(Description("gather_uneven", fields, rows=rows), problem, pg))
    rest = tuple(tensor.shape[1:])
    largest = max(sizes)
    if largest == 0:
        empty = torch.empty((0, *rest), dtype=tensor.dtype, device=tensor.device)
        return UnevenGather(empty, sizes)
    if tensor.shape[0] == largest:
        local = tensor.contiguous()
    else:
        # Padded to the largest; the padding is zeroed (no stale memory is sent) and
        # dropped on arrival.
        local = tensor.new_empty((largest, *rest))
        local[: tensor.shape[0]] = tensor
        local[tensor.shape[0] :].zero_()
    gathered = tensor.new_empty((pg.size() * largest, *rest))
    all_gather_flat(gathered, local, pg)
    if all(size == largest for size in sizes):
        return UnevenGather(gathered, sizes)
    parts = [gathered[i * largest : i * largest + size] for i, size in enumerate(sizes)]
    return UnevenGather(torch.cat(parts), sizes)
