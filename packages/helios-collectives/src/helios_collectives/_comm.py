"""The raw torch gather: the current API where this torch has it."""

from __future__ import annotations

from types import ModuleType

import torch
import torch.distributed as dist

__all__ = ["all_gather_flat", "gather_function_name"]


def gather_function_name(module: ModuleType) -> str:
    """Name the flat all-gather to call in ``module`` (``torch.distributed``).

    torch deprecates ``all_gather_into_tensor`` in favour of ``all_gather_single``
    where the latter exists; older torch has only ``all_gather_into_tensor``, not
    deprecated there.

    Args:
        module: ``torch.distributed``, or a stand-in for it.

    Returns:
        ``"all_gather_single"`` when ``module`` has it, else ``"all_gather_into_tensor"``.
    """
    return "all_gather_single" if hasattr(module, "all_gather_single") else "all_gather_into_tensor"


_GATHER = gather_function_name(dist)


def all_gather_flat(output: torch.Tensor, local: torch.Tensor, group: dist.ProcessGroup) -> None:
    """Gather every rank's ``local`` into ``output``, in group-rank order.

    Both are passed flat, which suits every backend: gloo accepts only the
    concatenated form.

    Args:
        output: Contiguous tensor of ``group.size() * local.numel()`` elements.
        local: Contiguous tensor, the same element count on every rank.
        group: The process group.
    """
    # Looked up on each call, so that a wrapper installed on torch.distributed is seen.
    getattr(dist, _GATHER)(
        output if output.dim() == 1 else output.view(-1),
        local if local.dim() == 1 else local.view(-1),
        group=group,
    )
