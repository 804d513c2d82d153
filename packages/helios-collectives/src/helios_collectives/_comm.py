"""The raw torch calls, looked up at call time so the current API is always used."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

__all__ = ["all_gather_flat"]

_GatherFn = Callable[..., object]


def _gather_function() -> _GatherFn:
    # torch deprecates all_gather_into_tensor in favour of all_gather_single where the
    # latter exists; older torch has only all_gather_into_tensor, not deprecated there.
    current: _GatherFn | None = getattr(dist, "all_gather_single", None)
    if current is not None:
        return current
    older: _GatherFn = dist.all_gather_into_tensor
    return older


def all_gather_flat(output: torch.Tensor, local: torch.Tensor, group: dist.ProcessGroup) -> None:
    """Gather every rank's 1-D ``local`` into the 1-D ``output``, in group-rank order.

    Flat buffers suit every backend: gloo accepts only the concatenated form.

    Args:
        output: Contiguous 1-D tensor of ``group.size() * local.numel()`` elements.
        local: Contiguous 1-D tensor, the same element count on every rank.
        group: The process group.
    """
    _gather_function()(output, local, group=group)
