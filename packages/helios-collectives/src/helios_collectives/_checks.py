"""Local argument checks shared by the collectives."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import torch

from helios_collectives._errors import CollectiveArgumentError
from helios_pg import integration

__all__ = ["as_timedelta", "check_tensor", "overlap_problem", "positions"]


def as_timedelta(timeout: object) -> timedelta:
    """Return a timeout given in seconds or as a ``timedelta`` as a ``timedelta``.

    Raises:
        TypeError: ``timeout`` is neither a number nor a ``timedelta``.
        CollectiveArgumentError: It is not positive and finite.
    """
    try:
        return integration.as_timedelta(timeout, "timeout")
    except ValueError as exc:
        raise CollectiveArgumentError(str(exc)) from None


def check_tensor(value: object, what: str) -> torch.Tensor:
    """Return ``value`` when it is a tensor.

    Args:
        value: What the caller passed.
        what: How to name it in the message (``"tensor"``, ``"tensor[2]"``).

    Returns:
        ``value``, typed as a tensor.

    Raises:
        TypeError: ``value`` is not a ``torch.Tensor``.
    """
    if not isinstance(value, torch.Tensor):
        message = f"{what} must be a torch.Tensor, got {type(value).__name__}: {value!r}"
        raise TypeError(message)
    return value


def overlap_problem(tensor: torch.Tensor, what: str) -> str | None:
    """Find elements that share memory (an ``expand``-ed view): no collective can write them.

    Args:
        tensor: The tensor to be reduced in place.
        what: How to name it in the message.

    Returns:
        The message naming the problem and the fix, or None.
    """
    if tensor.is_contiguous():
        return None
    for size, stride in zip(tensor.shape, tensor.stride(), strict=True):
        if size > 1 and stride == 0:
            return (
                f"{what} has overlapping memory (shape {tuple(tensor.shape)}, stride "
                f"{tuple(tensor.stride())}, as from expand()), so it cannot be reduced in "
                f"place; pass {what}.clone() or {what}.contiguous()"
            )
    return None


def positions(values: Sequence[object]) -> dict[str, list[int]]:
    """Group the indices of ``values`` by each value's text, in order of appearance.

    Args:
        values: Such as the dtypes of a list of tensors.

    Returns:
        Each distinct ``str(value)`` and the indices where it stands.
    """
    where: dict[str, list[int]] = {}
    for index, value in enumerate(values):
        where.setdefault(str(value), []).append(index)
    return where
