"""What differs between the torch releases helios-collectives supports, by feature detection.

- The flat all-gather: ``all_gather_single`` where torch has it (and deprecates
  ``all_gather_into_tensor``), else ``all_gather_into_tensor``.
- ``torch.distributed.barrier`` takes ``timeout`` only from torch 2.12 on.
"""

from __future__ import annotations

import inspect
from types import ModuleType

import torch
import torch.distributed as dist

__all__ = ["BARRIER_TAKES_TIMEOUT", "all_gather_flat", "gather_function_name"]

BARRIER_TAKES_TIMEOUT = "timeout" in inspect.signature(dist.barrier).parameters
"""Whether ``torch.distributed.barrier`` accepts ``timeout`` (torch 2.12 and later)."""


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
