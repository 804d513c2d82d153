"""Test cases for the collectives: inputs and the same computation done in one process.

A case is a JSON-ready dict. The parent generates cases (hypothesis, derandomized),
passes them to one multi-process run, and compares what each rank reports with
:func:`expected`, which rebuilds every rank's input here and computes the result
with plain torch in this one process. Workers build their input with
:func:`make_input`, so parent and workers see the same tensors.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "FLOAT_DTYPES",
    "GATHER_DTYPES",
    "REDUCE_DTYPES",
    "Case",
    "Inputs",
    "describe",
    "digest",
    "dtype_of",
    "expected",
    "make_input",
    "make_list",
]

Case = dict[str, Any]

FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
# gloo has no int16; bool has no meaningful SUM/PRODUCT to compare.
REDUCE_DTYPES = (*FLOAT_DTYPES, "int8", "uint8", "int32", "int64")
GATHER_DTYPES = (*REDUCE_DTYPES, "bool")


def dtype_of(name: str) -> torch.dtype:
    """The torch dtype called ``name`` (``"float32"``)."""
    dtype = getattr(torch, name)
    assert isinstance(dtype, torch.dtype), name
    return dtype


@dataclass(frozen=True)
class Inputs:
    """One rank's input: ``view`` is what the collective gets, ``base`` owns its memory.

    ``outside`` marks the elements of ``base`` that are not in ``view``.
    """

    base: torch.Tensor
    view: torch.Tensor
    outside: torch.Tensor


def _values(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    # Small integers: sums, products (3 ranks) and means are exact or rounded alike.
    low = 0 if dtype == torch.uint8 else -3
    return torch.randint(low, 4, shape, generator=generator).to(dtype)


def _viewed(base: torch.Tensor, view: str) -> torch.Tensor:
    if view == "strided":
        return base[::2]
    if view == "transposed":
        return base.transpose(0, 1)
    if view == "column":
        return base[..., 0]
    return base


def _base_shape(shape: tuple[int, ...], view: str) -> tuple[int, ...]:
    if view == "strided":
        return (shape[0] * 2, *shape[1:])
    if view == "transposed":
        return (shape[1], shape[0], *shape[2:])
    if view == "column":
        return (*shape, 2)
    return shape


def make_input(
    shape: list[int],
    dtype: str,
    view: str,
    seed: int,
    rank: int,
    device: torch.device | str = "cpu",
) -> Inputs:
    """Build rank ``rank``'s input of ``shape`` as the ``view`` kind of view.

    Args:
        shape: Shape of the view.
        dtype: Dtype name.
        view: ``"contiguous"``, ``"strided"`` (every other row), ``"transposed"``
            (ndim >= 2) or ``"column"`` (the first of two trailing columns).
        seed: The case's seed.
        rank: The rank.
        device: Where the base tensor lives (the values are drawn on the CPU).
    """
    target = tuple(shape)
    base_shape = _base_shape(target, view)
    base = _values(base_shape, dtype_of(dtype), seed * 1009 + rank).to(device)
    tensor = _viewed(base, view)
    assert tuple(tensor.shape) == target, (tensor.shape, target, view)
    mask = torch.ones(base_shape, dtype=torch.bool, device=device)
    _viewed(mask, view).fill_(False)
    return Inputs(base, tensor, mask)


def make_list(
    shapes: list[list[int]], dtype: str, seed: int, rank: int, device: torch.device | str = "cpu"
) -> list[torch.Tensor]:
    """Build rank ``rank``'s list of tensors for an all_reduce_tensors list case."""
    return [
        make_input(shape, dtype, "contiguous", seed * 31 + i, rank, device).view
        for i, shape in enumerate(shapes)
    ]


def _reduce(stacked: torch.Tensor, op: str, world: int) -> torch.Tensor:
    dtype = stacked.dtype
    if op == "SUM":
        return stacked.sum(0, dtype=dtype)
    if op == "AVG":
        return stacked.sum(0, dtype=dtype).div_(world)
    if op == "PRODUCT":
        return stacked.prod(0, dtype=dtype)
    if op == "MAX":
        return stacked.amax(0)
    if op == "MIN":
        return stacked.amin(0)
    bitwise = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}
    result = stacked[0].clone()
    for row in stacked[1:]:
        result = bitwise[op](result, row)
    return result


def expected(case: Case, world: int) -> torch.Tensor:
    """Compute ``case``'s result in this one process from every rank's input.

    Args:
        case: A ``gather``, ``reduce``, ``reduce_list`` or ``uneven`` case.
        world: The number of ranks.

    Returns:
        What every rank should get.
    """
    kind = case["kind"]
    ranks = range(world)
    if kind == "gather":
        views = [
            make_input(case["shape"], case["dtype"], case["view"], case["seed"], r).view
            for r in ranks
        ]
        return torch.cat([v.reshape(-1) for v in views]).reshape(case["size"])
    if kind == "reduce":
        views = [
            make_input(case["shape"], case["dtype"], case["view"], case["seed"], r).view
            for r in ranks
        ]
        return _reduce(torch.stack(views), case["op"], world)
    if kind == "reduce_list":
        flats = [
            torch.cat(
                [t.reshape(-1) for t in make_list(case["shapes"], case["dtype"], case["seed"], r)]
            )
            for r in ranks
        ]
        return _reduce(torch.stack(flats), case["op"], world)
    if kind == "uneven":
        views = [
            make_input(
                [case["firsts"][r], *case["rest"]], case["dtype"], case["view"], case["seed"], r
            ).view
            for r in ranks
        ]
        return torch.cat(views)
    raise AssertionError(kind)


def describe(tensor: torch.Tensor) -> list[Any]:
    """Everything a result is compared on: values, shape, dtype and device type."""
    return [
        tensor.detach().cpu().tolist(),
        list(tensor.shape),
        str(tensor.dtype).removeprefix("torch."),
        tensor.device.type,
    ]


def digest(tensor: torch.Tensor) -> str:
    """A short digest of :func:`describe`, which keeps ``RESULT`` lines small.

    ``run_processes`` drains one process's pipes at a time, so a rank whose output
    outgrows the pipe buffer (64 KiB) blocks until the ranks before it exit.
    """
    text = json.dumps(describe(tensor))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
