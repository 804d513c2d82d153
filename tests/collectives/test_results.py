"""Results of the collectives on three gloo ranks, each rank checking its own result
against the same computation done locally (property cases drawn by hypothesis).

The tests run on ranks of helios-pg's pytest plugin: the ``cases`` fixture is drawn
once in the pytest process and sent to every rank.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.distributed as dist

from helios_collectives._validation import PAYLOAD_LIMIT
from helios_env import DistributedInfo
from tests.collectives.cases import Case, describe, dtype_of, expected, make_input
from tests.collectives.conftest import GROUP_TIMEOUT
from tests.collectives.on_ranks import all_ranks, wrong_results
from tests.collectives.strategies import (
    draw_cases,
    explicit_cases,
    gather_cases,
    reduce_cases,
    reduce_list_cases,
    uneven_cases,
)

WORLD = 3
on_ranks = pytest.mark.ranks(WORLD, timeout=60, group_timeout=GROUP_TIMEOUT)

Cases = dict[str, list[Case]]


@pytest.fixture(scope="module")
def cases() -> Cases:
    """Every kind's explicit cases, then its drawn ones, the same on every run."""
    drawn = {
        "gather": draw_cases(gather_cases(WORLD), 50),
        "reduce": draw_cases(reduce_cases(), 70),
        "reduce_list": draw_cases(reduce_list_cases(), 50),
        "uneven": draw_cases(uneven_cases(WORLD), 50),
    }
    by_kind: Cases = {kind: [] for kind in drawn}
    for case in explicit_cases(WORLD):
        by_kind[case["kind"]].append(case)
    return {kind: by_kind[kind] + drawn[kind] for kind in drawn}


def _payload(case: Case) -> int:
    """Bytes that one rank's call reduces."""
    shapes = case["shapes"] if case["kind"] == "reduce_list" else [case["shape"]]
    elements: int = sum(math.prod(shape) for shape in shapes)
    return elements * dtype_of(case["dtype"]).itemsize


def _rides_in_the_check(case: Case) -> bool:
    return case["validate"] and _payload(case) <= PAYLOAD_LIMIT


def _mixes_0d_and_nd(case: Case) -> bool:
    ndims = {len(shape) for shape in case["shapes"]}
    return 0 in ndims and len(ndims) > 1


# What the ranks tests below must exercise: (kind, what, which cases show it). Each run
# checks every case of its kind, so each of these is checked where a case shows it.
BEHAVIOURS: dict[str, tuple[str, Callable[[Case], bool]]] = {
    "gather into the stacked shape": ("gather", lambda c: c["layout"] == "stacked"),
    "gather non-contiguous views": ("gather", lambda c: c["view"] != "contiguous"),
    "gather with the check on": ("gather", lambda c: c["validate"]),
    "reduce with AVG (a sum divided by the world size)": ("reduce", lambda c: c["op"] == "AVG"),
    "reduce non-contiguous views": ("reduce", lambda c: c["view"] != "contiguous"),
    "reduce riding in the check": ("reduce", _rides_in_the_check),
    "reduce after the check": ("reduce", lambda c: c["validate"] and not _rides_in_the_check(c)),
    "reduce with the check off": ("reduce", lambda c: not c["validate"]),
    "reduce with a bitwise op": ("reduce", lambda c: c["op"].startswith("B")),
    "reduce a list mixing 0-d and n-d tensors": ("reduce_list", _mixes_0d_and_nd),
    "reduce a list riding in the check": ("reduce_list", _rides_in_the_check),
    "gather_uneven with empty ranks": ("uneven", lambda c: 0 in c["firsts"]),
    "gather_uneven of non-contiguous views": ("uneven", lambda c: c["view"] != "contiguous"),
}


@pytest.mark.parametrize("behaviour", sorted(BEHAVIOURS))
def test_the_cases_exercise(cases: Cases, behaviour: str) -> None:
    kind, shows = BEHAVIOURS[behaviour]
    assert any(shows(case) for case in cases[kind]), f"no {kind} case shows: {behaviour}"


@on_ranks
def test_gather_into_tensor_matches_a_local_concatenation(cases: Cases) -> None:
    # Stacked and concatenated layouts, views, the check on and off; each input is
    # also left unchanged.
    assert wrong_results(cases["gather"]) == []


@on_ranks
def test_all_reduce_tensors_matches_a_local_reduction(cases: Cases) -> None:
    # Every op (AVG as the sum divided by the world size), views, the check on and off;
    # each result is also the input tensor itself, and nothing outside a view is written.
    assert wrong_results(cases["reduce"]) == []


@on_ranks
def test_raw_gloo_all_reduce_of_a_view_is_wrong_which_is_what_the_copy_fixes(
    dist_info: DistributedInfo,
) -> None:
    # The control for the view cases above: the same view through the raw torch call.
    # If this starts failing, torch fixed gloo and those cases lost their teeth.
    case: Case = {"kind": "reduce", "shape": [4, 3], "dtype": "float32", "view": "column"}
    case["seed"] = 7
    inputs = make_input(case["shape"], case["dtype"], case["view"], case["seed"], dist_info.rank)
    before = inputs.base.clone()
    dist.all_reduce(inputs.view)
    want = expected({**case, "op": "SUM"}, WORLD)
    wrong = describe(inputs.view) != describe(want) or not torch.equal(
        inputs.base[inputs.outside], before[inputs.outside]
    )
    assert any(all_ranks(wrong)), "raw dist.all_reduce got a non-contiguous view right"


@on_ranks
def test_all_reduce_tensors_of_a_list_reduces_the_flat_concatenation(cases: Cases) -> None:
    # Lists mixing 0-d and n-d tensors, the check on and off; each list is left unchanged.
    assert wrong_results(cases["reduce_list"]) == []


@on_ranks
def test_gather_uneven_matches_a_local_concatenation(cases: Cases) -> None:
    # Empty ranks and views included; each result also reports every rank's first
    # dimension, and leaves the input as it was.
    assert wrong_results(cases["uneven"]) == []
