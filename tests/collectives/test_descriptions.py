"""Validation mode's call descriptions, compared on hand-built inputs (no processes).

The multi-process tests show that ranks raise together; these pin down what the
message says for shapes and lists that the three-rank run does not produce.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from helios_collectives import CollectiveMismatchError
from helios_collectives._validation import (
    Description,
    _decode,
    check_agreement,
    describe_tensors,
)

WIDTH = 512


def reduce(tensors: Sequence[torch.Tensor], *, is_list: bool = False) -> Description:
    fields = (*describe_tensors(tensors, is_list=is_list), ("reduce op", "ReduceOp.SUM"))
    return Description("all_reduce_tensors", fields)


def decoded(
    description: Description, number: int = 1, problem: str | None = None
) -> dict[str, str]:
    fields = _decode(description.encode(number, problem))
    assert fields is not None
    return fields


def mismatch(descriptions: Sequence[Description]) -> CollectiveMismatchError:
    calls = [decoded(d) for d in descriptions]
    with pytest.raises(CollectiveMismatchError) as info:
        check_agreement("all_reduce_tensors", calls, list(range(len(calls))))
    return info.value


def test_a_description_has_a_fixed_size() -> None:
    small = reduce([torch.ones(())]).encode(1, None)
    large = reduce([torch.ones(1)] * 500, is_list=True).encode(123456, "x" * 1000)
    assert len(small) == len(large) == WIDTH


def test_a_description_reads_back_as_its_fields() -> None:
    fields = decoded(reduce([torch.ones(2, 3)]), number=7)
    assert fields == {
        "operation": "all_reduce_tensors",
        "call number": "#7",
        "argument problem": "none",
        "dtype": "torch.float32",
        "device type": "cpu",
        "shape": "(2, 3)",
        "reduce op": "ReduceOp.SUM",
    }


def test_identical_calls_pass() -> None:
    call = decoded(reduce([torch.ones(2, 3)]))
    check_agreement("all_reduce_tensors", [call, call, call], [0, 1, 2])


def test_two_ranks_that_differ_blame_the_higher_rank() -> None:
    error = mismatch([reduce([torch.ones(2)]), reduce([torch.ones(3)])])
    assert error.disagreeing_ranks == (1,)
    assert error.differences == {"shape": {"(2,)": (0,), "(3,)": (1,)}}


def test_the_majority_call_is_the_reference() -> None:
    odd = reduce([torch.ones(2)])
    usual = reduce([torch.ones(2, dtype=torch.float64)])
    error = mismatch([odd, usual, usual])
    assert error.disagreeing_ranks == (0,)
    assert "rank 0 differs from ranks 1, 2" in str(error)
    assert "dtype: torch.float32 on rank 0; torch.float64 on ranks 1, 2" in str(error)


def test_long_values_are_shortened_but_still_told_apart() -> None:
    many = [torch.ones(1)] * 40
    error = mismatch([reduce(many, is_list=True), reduce([*many, torch.ones(1)], is_list=True)])
    first, second = error.differences["shape"]
    assert first.startswith("40 tensors: (1,), (1,)")
    assert second.startswith("41 tensors: (1,), (1,)")
    assert first != second
    assert max(len(first), len(second)) <= 48


def test_a_list_that_mixes_dtypes_says_where() -> None:
    fields = decoded(reduce([torch.ones(1), torch.ones(1, dtype=torch.int64)], is_list=True))
    assert fields["dtype"] == "mixed: torch.float32 at 0; torch.int64 at 1"


def test_gather_uneven_lets_dim_0_differ() -> None:
    calls = [
        decoded(
            Description(
                "gather_uneven",
                describe_tensors([torch.ones(n, 3)], is_list=False, free_first_dim=True),
                rows=n,
            )
        )
        for n in (0, 1, 7)
    ]
    check_agreement("gather_uneven", calls, [0, 1, 2])
    assert [call["rows"] for call in calls] == ["0", "1", "7"]
    assert calls[0]["shape"] == "(*, 3)"


def test_bytes_that_are_not_a_description_are_named() -> None:
    assert _decode(bytes(WIDTH)) is None
    assert _decode(b"\xff" * WIDTH) is None
    with pytest.raises(CollectiveMismatchError, match="not a helios_collectives call"):
        check_agreement("all_reduce_tensors", [decoded(reduce([torch.ones(2)])), None], [0, 1])


def test_an_argument_problem_travels_with_the_description() -> None:
    fields = decoded(reduce([torch.ones(2)]), problem="all_reduce_tensors got an empty list")
    assert fields["argument problem"] == "all_reduce_tensors got an empty list"


def test_non_ascii_text_is_escaped_not_lost() -> None:
    fields = decoded(reduce([torch.ones(2)]), problem="größe")
    assert fields["argument problem"] == "gr\\xf6\\xdfe"


def test_the_digest_covers_every_field_but_rows() -> None:
    def uneven(rows: int, columns: int = 3, number: int = 1) -> int:
        fields = describe_tensors([torch.ones(rows, columns)], is_list=False, free_first_dim=True)
        return Description("gather_uneven", fields, rows=rows).digest(number, None)

    assert uneven(1) == uneven(7)
    assert uneven(1) != uneven(1, columns=4)
    assert uneven(1) != uneven(1, number=2)
    assert reduce([torch.ones(2)]).digest(1, None) != reduce([torch.ones(2)]).digest(1, "bad")
