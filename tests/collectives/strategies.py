"""Hypothesis strategies for collective cases, and a derandomized way to draw them.

Cases are drawn in the parent, once, with a fixed seed, and run in one multi-process
launch: starting ranks costs seconds, running a case costs milliseconds.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.collectives.cases import FLOAT_DTYPES, GATHER_DTYPES, REDUCE_DTYPES, Case

__all__ = [
    "draw_cases",
    "explicit_cases",
    "gather_cases",
    "reduce_cases",
    "reduce_list_cases",
    "uneven_cases",
]

_seeds = st.integers(min_value=0, max_value=2**20)
_dims = st.integers(min_value=0, max_value=4)


def _views(ndim: int) -> list[str]:
    views = ["contiguous", "column"]
    if ndim >= 1:
        views.append("strided")
    if ndim >= 2:
        views.append("transposed")
    return views


@st.composite
def gather_cases(draw: st.DrawFn, world: int) -> Case:
    """gather_into_tensor of one shape on every rank, concatenated or stacked."""
    shape = draw(st.lists(_dims, max_size=3))
    layout = draw(st.sampled_from(["concatenated", "stacked"]))
    concatenated = layout == "concatenated" and shape
    size = [world * shape[0], *shape[1:]] if concatenated else [world, *shape]
    return {
        "kind": "gather",
        "shape": shape,
        "size": size,
        "layout": layout,
        "dtype": draw(st.sampled_from(GATHER_DTYPES)),
        "view": draw(st.sampled_from(_views(len(shape)))),
        "seed": draw(_seeds),
        "validate": draw(st.booleans()),
    }


def _ops(dtype: str) -> list[str]:
    ops = ["SUM", "MAX", "MIN", "PRODUCT"]
    return [*ops, "AVG"] if dtype in FLOAT_DTYPES else [*ops, "BAND", "BOR", "BXOR"]


@st.composite
def reduce_cases(draw: st.DrawFn) -> Case:
    """all_reduce_tensors of a single tensor, possibly a non-contiguous view."""
    shape = draw(st.lists(_dims, max_size=3))
    dtype = draw(st.sampled_from(REDUCE_DTYPES))
    return {
        "kind": "reduce",
        "shape": shape,
        "dtype": dtype,
        "op": draw(st.sampled_from(_ops(dtype))),
        "view": draw(st.sampled_from(_views(len(shape)))),
        "seed": draw(_seeds),
        "validate": draw(st.booleans()),
    }


@st.composite
def reduce_list_cases(draw: st.DrawFn) -> Case:
    """all_reduce_tensors of a list mixing 0-d and n-d tensors."""
    shapes = draw(st.lists(st.lists(_dims, max_size=2), min_size=1, max_size=5))
    dtype = draw(st.sampled_from(REDUCE_DTYPES))
    return {
        "kind": "reduce_list",
        "shapes": shapes,
        "dtype": dtype,
        "op": draw(st.sampled_from(_ops(dtype))),
        "seed": draw(_seeds),
        "validate": draw(st.booleans()),
    }


@st.composite
def uneven_cases(draw: st.DrawFn, world: int) -> Case:
    """gather_uneven with a dim 0 of its own on each rank (zero included)."""
    rest = draw(st.lists(st.integers(min_value=0, max_value=3), max_size=2))
    return {
        "kind": "uneven",
        "rest": rest,
        "firsts": draw(st.lists(_dims, min_size=world, max_size=world)),
        "dtype": draw(st.sampled_from(GATHER_DTYPES)),
        "view": draw(st.sampled_from(_views(1 + len(rest)))),
        "seed": draw(_seeds),
    }


def draw_cases(strategy: st.SearchStrategy[Any], count: int) -> list[Case]:
    """Draw ``count`` cases from ``strategy``, the same ones on every run.

    Args:
        strategy: A strategy of cases.
        count: How many to draw.

    Returns:
        The cases, in the order hypothesis generated them.
    """
    drawn: list[Case] = []

    @settings(
        derandomize=True,
        database=None,
        max_examples=count,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(case: Case) -> None:
        drawn.append(case)

    collect()
    return drawn


def explicit_cases(world: int) -> list[Case]:
    """Cases every run must hold, whatever hypothesis draws."""
    uneven = {"kind": "uneven", "rest": [2], "dtype": "float32", "view": "strided", "seed": 3}
    return [
        {
            "kind": "reduce",
            "shape": [4, 3],
            "dtype": "float32",
            "op": "SUM",
            "view": "column",
            "seed": 1,
            "validate": False,
        },
        {
            "kind": "reduce",
            "shape": [3, 4],
            "dtype": "float64",
            "op": "AVG",
            "view": "transposed",
            "seed": 2,
            "validate": False,
        },
        {
            "kind": "reduce",
            "shape": [5],
            "dtype": "int64",
            "op": "SUM",
            "view": "strided",
            "seed": 3,
            "validate": True,
        },
        {
            # 4 x 4 x 8 bytes: too large to ride in the check's slot.
            "kind": "reduce",
            "shape": [4, 4],
            "dtype": "float64",
            "op": "MAX",
            "view": "transposed",
            "seed": 7,
            "validate": True,
        },
        {
            "kind": "reduce_list",
            "shapes": [[], [2, 3], [], [4]],
            "dtype": "float32",
            "op": "AVG",
            "seed": 4,
            "validate": False,
        },
        {
            "kind": "gather",
            "shape": [3, 2],
            "size": [world, 3, 2],
            "layout": "stacked",
            "dtype": "float32",
            "view": "transposed",
            "seed": 5,
            "validate": False,
        },
        {
            "kind": "gather",
            "shape": [3, 2],
            "size": [world * 3, 2],
            "layout": "concatenated",
            "dtype": "int64",
            "view": "column",
            "seed": 6,
            "validate": False,
        },
        {**uneven, "firsts": [(r * 2) % 5 for r in range(world)]},
        {**uneven, "firsts": [0] * world, "view": "contiguous"},
    ]
