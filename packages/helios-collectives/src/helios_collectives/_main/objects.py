"""Exchange small picklable objects between ranks without numpy.

torch's ``all_gather_object`` converts through numpy, which is not a dependency of
helios; this moves the pickled bytes with :func:`gather_uneven` instead.
"""

from __future__ import annotations

import pickle
from typing import TypeVar

import torch

from helios_collectives._gather import gather_uneven

__all__ = ["exchange_objects"]

T = TypeVar("T")


def exchange_objects(value: T, device: torch.device) -> list[T]:
    """Gather one picklable object from every rank, on every rank.

    Only for objects this program created itself: the bytes are unpickled.

    Args:
        value: This rank's object.
        device: The device the bytes travel on (the group's device for nccl).

    Returns:
        Every rank's object, in rank order.
    """
    payload = torch.tensor(list(pickle.dumps(value)), dtype=torch.uint8, device=device)
    parts = gather_uneven(payload).split()
    return [pickle.loads(bytes(part.cpu().tolist())) for part in parts]  # noqa: S301
