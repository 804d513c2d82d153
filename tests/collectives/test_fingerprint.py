"""The fingerprint comparison of validation mode, on hand-built rows (no processes).

The multi-process tests show that ranks raise together; these pin down what the
message says for shapes and lists the three-rank run does not produce.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
import torch.distributed as dist

from helios_collectives import FINGERPRINT_SLOTS, CollectiveMismatchError
from helios_collectives._fingerprint import Call, Operation, check_rows


def _reduce(tensors: Sequence[torch.Tensor], *, is_list: bool = False) -> Call:
    return Call(Operation.ALL_REDUCE_TENSORS, tensors, is_list=is_list, reduce_op=dist.ReduceOp.SUM)


def _mismatch(calls: Sequence[Call], sequence: int = 1) -> CollectiveMismatchError:
    rows = [call.encode(sequence) for call in calls]
    with pytest.raises(CollectiveMismatchError) as info:
        check_rows(calls[0], rows, list(range(len(rows))))
    return info.value


def test_a_fingerprint_has_a_fixed_size() -> None:
    small = _reduce([torch.ones(())]).encode(1)
    large = _reduce([torch.ones(1)] * 50, is_list=True).encode(1)
    assert len(small) == len(large) == FINGERPRINT_SLOTS


def test_identical_calls_pass() -> None:
    call = _reduce([torch.ones(2, 3)])
    check_rows(call, [call.encode(4)] * 3, [0, 1, 2])


def test_two_ranks_that_differ_blame_the_higher_rank() -> None:
    error = _mismatch([_reduce([torch.ones(2)]), _reduce([torch.ones(3)])])
    assert error.disagreeing_ranks == (1,)
    assert error.differences["shape"] == {"(2,)": (0,), "(3,)": (1,)}


def test_the_majority_call_is_the_reference() -> None:
    odd = _reduce([torch.ones(2)])
    usual = _reduce([torch.ones(2, dtype=torch.float64)])
    error = _mismatch([odd, usual, usual])
    assert error.disagreeing_ranks == (0,)
    assert "rank 0 differs from ranks 1, 2" in str(error)


def test_shapes_beyond_eight_dimensions_are_told_apart() -> None:
    nine = [1] * 9
    error = _mismatch([_reduce([torch.ones(*nine)]), _reduce([torch.ones(*nine, 1)])])
    texts = list(error.differences["shape"])
    assert texts[0].startswith("(1, 1, 1, 1, 1, 1, 1, 1, ...) 9-d")
    assert texts[1].startswith("(1, 1, 1, 1, 1, 1, 1, 1, ...) 10-d")


def test_long_lists_are_summarized() -> None:
    many = [torch.ones(1)] * 10
    error = _mismatch([_reduce(many, is_list=True), _reduce([*many, torch.ones(1)], is_list=True)])
    assert "10 tensors of 1, 1, 1, 1, 1, 1, 1, 1, ... elements (10 in all" in str(error)
    assert "11 tensors" in str(error)


def test_gather_uneven_lets_dim_0_differ() -> None:
    calls = [
        Call(Operation.GATHER_UNEVEN, [torch.ones(n, 3)], free_first_dim=True) for n in (0, 1, 7)
    ]
    check_rows(calls[0], [c.encode(2) for c in calls], [0, 1, 2])


def test_a_row_that_is_not_a_fingerprint_is_named() -> None:
    call = _reduce([torch.ones(2)])
    rows = [call.encode(1), [0] * FINGERPRINT_SLOTS]
    with pytest.raises(CollectiveMismatchError, match="not a helios_collectives call"):
        check_rows(call, rows, [0, 1])


def test_unlisted_dtypes_still_differ() -> None:
    error = _mismatch(
        [_reduce([torch.ones(2, dtype=torch.float8_e4m3fn)]), _reduce([torch.ones(2)])]
    )
    assert "dtype" in error.differences
