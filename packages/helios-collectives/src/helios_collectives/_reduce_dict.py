"""all_reduce_dict: a whole dict of metrics reduced in one all-reduce, keys checked first."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import torch
import torch.distributed as dist

from helios_collectives._advice import ranks_text
from helios_collectives._errors import CollectiveArgumentError, CollectiveMismatchError
from helios_collectives._group import control_device, global_ranks, require_group
from helios_collectives._objects import gather_objects
from helios_collectives._reduce import all_reduce_tensors
from helios_collectives._torch_api import all_gather_flat

__all__ = ["all_reduce_dict"]

Layout = tuple[tuple[str, tuple[int, ...], str], ...]
"""Each key, in sorted order, with its value's shape and dtype."""


def _as_tensor(key: object, value: object) -> torch.Tensor:
    if not isinstance(key, str):
        message = f"all_reduce_dict needs str keys, got {key!r} of type {type(key).__name__}"
        raise TypeError(message)
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.tensor(value)
    message = (
        f"all_reduce_dict: metrics[{key!r}] must be a torch.Tensor or a number, got "
        f"{type(value).__name__}: {value!r}"
    )
    raise TypeError(message)


def _digest(layout: Layout) -> int:
    text = repr(layout).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little", signed=True)


def _value_text(shape: tuple[int, ...], dtype: str) -> str:
    """A value as the messages show it: ``()`` for a scalar, ``(2, 3)``, and its dtype."""
    dims = ", ".join(str(d) for d in shape)
    return f"shape ({dims}{',' if len(shape) == 1 else ''}) {dtype}"


def _mismatch(layouts: list[Layout], ranks: list[int]) -> CollectiveMismatchError:
    """The error every rank raises: what differs between the ranks' dicts, and whose."""
    differences: dict[str, dict[str, tuple[int, ...]]] = {}
    values = [{key: _value_text(shape, dtype) for key, shape, dtype in lay} for lay in layouts]
    for key in sorted({key for entry in values for key in entry}):
        by_value: dict[str, list[int]] = {}
        for rank, entry in zip(ranks, values, strict=True):
            by_value.setdefault(entry.get(key, "missing"), []).append(rank)
        if len(by_value) > 1:
            differences[f"key {key!r}"] = {value: tuple(who) for value, who in by_value.items()}
    # The most common dict is the reference; ties go to the lowest rank's.
    common = max(layouts, key=lambda entry: (layouts.count(entry), -layouts.index(entry)))
    disagreeing = tuple(r for r, entry in zip(ranks, layouts, strict=True) if entry != common)
    listed = "\n".join(
        f"  {field}: " + "; ".join(f"{value} on {ranks_text(who)}" for value, who in seen.items())
        for field, seen in differences.items()
    )
    message = (
        f"all_reduce_dict: the ranks' dicts differ ({ranks_text(disagreeing)} "
        f"{'differs' if len(disagreeing) == 1 else 'differ'}), so nothing was reduced:\n"
        f"{listed}\nfix: every rank must pass the same keys, with values of the same "
        "shapes and dtypes (a metric logged on some ranks only? add it on every rank, "
        "or leave it out of the dict)"
    )
    return CollectiveMismatchError(
        message,
        operation="all_reduce_dict",
        disagreeing_ranks=disagreeing,
        differences=differences,
    )


def all_reduce_dict(
    metrics: Mapping[str, torch.Tensor | float],
    *,
    op: dist.ReduceOp | dist.ReduceOp.RedOpType | None = None,
    group: dist.ProcessGroup | None = None,
) -> dict[str, torch.Tensor]:
    """Reduce every value of a dict of metrics across ranks, in one all-reduce.

    The values (tensors of any shape, or numbers) are converted to their common dtype,
    flattened into one buffer on the group's device and reduced with one
    :func:`all_reduce_tensors` call; ``op=ReduceOp.AVG`` works on every backend. First,
    one small exchange checks that every rank has the same keys, shapes and common
    dtype: ranks that differ raise the same error, naming the keys and ranks, instead of
    reducing mismatched buffers or waiting forever. The dict and its tensors are left
    unchanged.

    Args:
        metrics: Names to values, such as ``{"loss": loss, "correct": 17}``.
        op: The reduction, such as ``ReduceOp.AVG``; ``ReduceOp.SUM`` when None.
        group: The process group; the default group when None.

    Returns:
        A new dict with the same keys, in the same order: each value reduced, with its
        shape (a number becomes a 0-d tensor), in the common dtype, on the group's
        device (the CPU for gloo, this rank's GPU for nccl).

    Raises:
        ProcessGroupNotInitializedError: No process group is initialized (a
            ``RuntimeError``).
        CollectiveMismatchError: The ranks' dicts differ in keys, shapes or common
            dtype (a ``ValueError``, raised on every rank, before the reduction).
        CollectiveArgumentError: ``op=ReduceOp.AVG`` of integer values, or another
            rank's metrics are invalid, named with why (a ``ValueError``).
        TypeError: A key is not a ``str``, or a value neither a tensor nor a number
            (raised on that rank after the exchange, so that no rank waits for it).

    Example::

        import torch
        from torch.distributed import ReduceOp
        from helios_collectives import all_reduce_dict
        from helios_pg import process_group

        with process_group():
            means = all_reduce_dict({"loss": torch.tensor(0.25), "acc": 0.5}, op=ReduceOp.AVG)
    """
    pg = require_group("all_reduce_dict", group)
    problem: Exception | None = None
    try:
        values = {key: _as_tensor(key, value) for key, value in metrics.items()}
    except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
        # Told to the others in the exchange below, so that none waits for this rank.
        values, problem = {}, exc
    dtype = torch.float32
    if values:
        dtype = next(iter(values.values())).dtype
        for value in values.values():
            dtype = torch.promote_types(dtype, value.dtype)
    layout: Layout = tuple(
        sorted((key, tuple(value.shape), str(value.dtype)) for key, value in values.items())
    )
    device = control_device(pg)
    mine = torch.tensor([_digest(layout), problem is not None], device=device)
    exchanged = torch.empty(2 * pg.size(), dtype=torch.int64, device=device)
    all_gather_flat(exchanged, mine, pg)
    digests, bad = exchanged[0::2].tolist(), exchanged[1::2].tolist()
    if len(set(digests)) > 1 or any(bad):
        why = None if problem is None else f"{type(problem).__name__}: {problem}"
        seen = gather_objects((layout, why), group=pg)
        if problem is not None:
            raise problem
        ranks = global_ranks(pg)
        failed = [f"rank {r}: {w}" for r, (_, w) in zip(ranks, seen, strict=True) if w]
        if failed:
            message = (
                f"all_reduce_dict: other ranks' metrics are invalid ({'; '.join(failed)}); "
                "every rank must pass str keys and tensor or number values"
            )
            error = CollectiveArgumentError(message)
            error.helios_peer_failure = True  # the failure report names those ranks
            raise error
        raise _mismatch([lay for lay, _ in seen], ranks)
    if not values:
        return {}
    order = [key for key, _, _ in layout]
    flat = all_reduce_tensors(
        [values[key].to(device=device, dtype=dtype) for key in order], op=op, group=pg
    )
    parts = torch.split(flat, [values[key].numel() for key in order])
    reduced = {key: part.view(values[key].shape) for key, part in zip(order, parts, strict=True)}
    return {key: reduced[key] for key in values}
