"""Validation mode and gather_uneven's metadata exchange on three gloo ranks: ranks that
disagree get the same ValueError on every rank, naming the ranks and how they differ.

The tests run on ranks of helios-pg's pytest plugin; each rank checks what it raised.
"""

from __future__ import annotations

import pytest
import torch

from helios_collectives import (
    CollectiveArgumentError,
    CollectiveMismatchError,
    all_reduce_tensors,
)
from helios_env import DistributedInfo
from tests.collectives.conftest import GROUP_TIMEOUT
from tests.collectives.on_ranks import SCENARIOS, all_ranks

WORLD = 3
LAST = WORLD - 1
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
        # A collective of the same size as a fingerprint, but not one.
        out = torch.empty(3 * WORLD, dtype=torch.int64)
        dist.all_gather_into_tensor(out, torch.zeros(3, dtype=torch.int64))
    else:
        with pytest.raises(CollectiveMismatchError) as raised:
            all_reduce_tensors(torch.ones(2), validate=True)
        assert list(raised.value.disagreeing_ranks) == [LAST], raised.value
        assert "not a helios_collectives call" in str(raised.value)
    # No rank started a second exchange: the next collective is in step everywhere.
    total = torch.ones(1)
    dist.all_reduce(total)
    assert total.item() == WORLD
