"""Validation mode and gather_uneven's metadata exchange on three gloo ranks: ranks that
disagree get the same ValueError on every rank, naming the ranks and how they differ.

The tests run on ranks of helios-pg's pytest plugin; each rank checks what it raised.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch.distributed import ReduceOp

from helios_collectives import (
    VALIDATE_ENV_VAR,
    CollectiveArgumentError,
    CollectiveMismatchError,
    all_reduce_tensors,
    gather_into_tensor,
    safe_barrier,
)
from helios_collectives._torch_api import gather_function_name
from helios_collectives._validation import PAYLOAD_LIMIT
from helios_env import DistributedInfo
from tests.collectives.conftest import GROUP_TIMEOUT
from tests.collectives.on_ranks import SCENARIOS, all_ranks

WORLD = 3
LAST = WORLD - 1
SLOT = 32 + PAYLOAD_LIMIT  # bytes per rank in a check's all-gather
pytestmark = pytest.mark.ranks(WORLD, timeout=60, group_timeout=GROUP_TIMEOUT)


def assert_the_group_still_works() -> None:
    """The next validated call, in step on every rank, passes with the right result."""
    result = all_reduce_tensors(torch.ones(2), validate=True)
    assert result.tolist() == [float(WORLD)] * 2


def mismatch(scenario: str, info: DistributedInfo) -> CollectiveMismatchError:
    with pytest.raises(CollectiveMismatchError) as raised:
        SCENARIOS[scenario](info.rank, info.world_size)
    return raised.value


@pytest.mark.parametrize(
    ("scenario", "disagreeing", "field"),
    [
        ("reduce_dtype_mismatch", [1], "dtype"),
        ("reduce_shape_mismatch_env", [LAST], "shape"),
        ("reduce_op_mismatch", [1], "reduce op"),
        ("reduce_list_composition_mismatch", [0], "shape"),
        ("reduce_empty_list_on_one_rank", [1], "argument problem"),
        ("gather_numel_mismatch", [1], "shape"),
        ("operation_mismatch", [0], "operation"),
        ("sequence_mismatch", [0], "call number"),
        ("uneven_dtype_mismatch", [1], "dtype"),
        ("uneven_rest_mismatch", [LAST], "shape"),
    ],
)
def test_ranks_that_disagree_get_a_value_error_on_every_rank(
    dist_info: DistributedInfo, scenario: str, disagreeing: list[int], field: str
) -> None:
    error = mismatch(scenario, dist_info)
    assert isinstance(error, ValueError)
    assert list(error.disagreeing_ranks) == disagreeing, error
    assert field in error.differences, error
    assert f"{field}: " in str(error)
    assert_the_group_still_works()


@pytest.mark.parametrize(
    ("scenario", "disagreeing", "shown", "fix"),
    [
        (
            "last_batch_by_default",
            [LAST],
            "shape: (3,) on ranks 0, 1; (2,) on rank 2",
            "the tensor's shape differs on rank 2 (a smaller last batch?): pad it",
        ),
        (
            "dtype_by_default",
            [1],
            "dtype: torch.float32 on ranks 0, 2; torch.float64 on rank 1",
            "convert to one dtype on every rank first",
        ),
        (
            "op_by_default",
            [1],
            "reduce op: ReduceOp.SUM on ranks 0, 2; ReduceOp.MAX on rank 1",
            "pass the same op on every rank",
        ),
        (
            "gather_rows_by_default",
            [0],
            "shape: (4, 3) on rank 0; (2, 3) on ranks 1, 2",
            "only dim 0 differs (a smaller last batch?): gather with gather_uneven",
        ),
        (
            "sequence_mismatch",
            [0],
            "call number: #",
            "rank 0 made more or fewer helios collective calls on this group",
        ),
    ],
)
def test_a_mismatch_says_what_differs_and_one_fix_on_every_rank(
    dist_info: DistributedInfo, scenario: str, disagreeing: list[int], shown: str, fix: str
) -> None:
    message = str(mismatch(scenario, dist_info))
    assert len(set(all_ranks(message))) == 1, all_ranks(message)
    assert shown in message
    assert f"fix: {fix}" in message
    # Advice written for one rank's tensor would mislead the others: not shown.
    assert "argument problem" not in message
    assert f"({'rank' if len(disagreeing) == 1 else 'ranks'} {disagreeing[0]}" in message
    assert_the_group_still_works()


def test_the_mismatch_message_is_the_same_on_every_rank(dist_info: DistributedInfo) -> None:
    message = str(mismatch("reduce_dtype_mismatch", dist_info))
    assert len(set(all_ranks(message))) == 1, all_ranks(message)
    assert "rank 1 differ" in message
    assert "torch.int64 on rank 1" in message
    assert "torch.float32 on ranks 0, 2" in message


def test_the_mismatch_message_of_gather_uneven_shows_the_free_first_dimension(
    dist_info: DistributedInfo,
) -> None:
    message = str(mismatch("uneven_rest_mismatch", dist_info))
    assert "(*, 2) on ranks 0, 1; (*, 3) on rank 2" in message


@pytest.mark.parametrize(
    "scenario",
    ["reduce_empty_list_everywhere", "gather_bad_size_everywhere", "uneven_zero_dim_everywhere"],
)
def test_the_same_bad_arguments_everywhere_raise_the_argument_error_on_every_rank(
    dist_info: DistributedInfo, scenario: str
) -> None:
    with pytest.raises(CollectiveArgumentError) as raised:
        SCENARIOS[scenario](dist_info.rank, dist_info.world_size)
    assert isinstance(raised.value, ValueError)
    assert_the_group_still_works()


def test_a_rank_in_another_collective_is_named_and_no_rank_waits_for_it(
    dist_info: DistributedInfo,
) -> None:
    import torch.distributed as dist

    if dist_info.rank == LAST:
        # A collective of the same size as a fingerprint's slot, but not one.
        out = torch.empty(SLOT * WORLD, dtype=torch.uint8)
        dist.all_gather_into_tensor(out, torch.zeros(SLOT, dtype=torch.uint8))
    else:
        with pytest.raises(CollectiveMismatchError) as raised:
            all_reduce_tensors(torch.ones(2), validate=True)
        assert list(raised.value.disagreeing_ranks) == [LAST], raised.value
        assert "not a helios_collectives call" in str(raised.value)
    # No rank started a second exchange: the next collective is in step everywhere.
    total = torch.ones(1)
    dist.all_reduce(total)
    assert total.item() == WORLD


Counts = dict[str, int]


@contextlib.contextmanager
def _counted(**environment: str) -> Iterator[Counts]:
    """Count the calls of torch's collectives that helios's collectives make, with
    ``environment`` set; both undone on the way out.

    Undone here, in the rank, not by pytest's monkeypatch: a ranks test's fixtures are
    made in the pytest process, and a rank reused by the next test would keep what a
    pickled monkeypatch changed.
    """
    import torch.distributed as dist

    counts: Counts = {}
    names = (gather_function_name(dist), "all_reduce", "barrier")
    reals = {name: getattr(dist, name) for name in names}
    saved = {name: os.environ.get(name) for name in environment}
    for name, real in reals.items():

        def counting(*args: object, _real: Any = real, _name: str = name, **kw: object) -> Any:
            counts[_name] = counts.get(_name, 0) + 1
            return _real(*args, **kw)

        setattr(dist, name, counting)
    os.environ.update(environment)
    try:
        yield counts
    finally:
        for name, real in reals.items():
            setattr(dist, name, real)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _gathers(counts: Counts) -> int:
    return sum(n for name, n in counts.items() if name.startswith("all_gather"))


CALLS: dict[str, tuple[Callable[[], object], int, int]] = {
    # What each call makes: (the call, all-gathers, all-reduces).
    # 96 bytes ride in the check: one collective in all.
    "24 float32": (lambda: all_reduce_tensors(torch.ones(24)), 1, 0),
    "a list": (lambda: all_reduce_tensors([torch.ones(2), torch.tensor(1.0)]), 1, 0),
    "MAX of int64": (
        lambda: all_reduce_tensors(torch.ones(2, dtype=torch.int64), op=ReduceOp.MAX),
        1,
        0,
    ),
    # 100 bytes do not: the check, then the all-reduce.
    "25 float32": (lambda: all_reduce_tensors(torch.ones(25)), 1, 1),
    "unchecked": (lambda: all_reduce_tensors(torch.ones(2), validate=False), 0, 1),
    "gather": (lambda: gather_into_tensor(torch.ones(2), (2 * WORLD,)), 2, 0),
    "unchecked gather": (
        lambda: gather_into_tensor(torch.ones(2), (2 * WORLD,), validate=False),
        1,
        0,
    ),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_call_is_checked_by_default_in_one_small_gather(name: str) -> None:
    call, gathers, all_reduces = CALLS[name]
    with _counted() as counts:
        call()
    assert (_gathers(counts), counts.get("all_reduce", 0)) == (gathers, all_reduces), counts


def test_a_small_all_reduce_in_the_check_is_the_sum_in_place(dist_info: DistributedInfo) -> None:
    mine = torch.arange(4.0).reshape(2, 2) + dist_info.rank
    view = mine.t()  # not contiguous: reduced through a copy, written back
    result = all_reduce_tensors(view)
    assert result is view
    want = torch.stack([torch.arange(4.0).reshape(2, 2).t() + r for r in range(WORLD)]).sum(0)
    assert torch.equal(mine.t(), want)


def test_the_environment_variable_turns_the_check_off() -> None:
    with _counted(**{VALIDATE_ENV_VAR: "0"}) as counts:
        all_reduce_tensors(torch.ones(2))
        gather_into_tensor(torch.ones(2), (2 * WORLD,))
    assert (_gathers(counts), counts.get("all_reduce", 0)) == (1, 1), counts


def test_the_checked_barrier_on_gloo_is_the_check_alone() -> None:
    with _counted() as counts:
        safe_barrier()
        assert (_gathers(counts), counts.get("barrier", 0)) == (1, 0), counts
        safe_barrier(validate=False)
    assert counts.get("barrier", 0) == 1, counts


def test_a_complex_all_reduce_in_the_check_reads_its_rows_in_place() -> None:
    # complex128 needs 16-byte alignment: the payload starts 32 bytes into each slot.
    result = all_reduce_tensors(torch.full((3,), 1 + 2j, dtype=torch.complex128))
    assert result.tolist() == [WORLD * (1 + 2j)] * 3
