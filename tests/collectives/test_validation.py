"""Validation mode and gather_uneven's metadata exchange on three gloo ranks: ranks that
disagree get the same ValueError on every rank, naming the ranks and how they differ.
"""

from __future__ import annotations

import pytest

from tests.collectives.conftest import Run

LAST = 2  # the last rank of the three-rank run


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
    property_run: Run, scenario: str, disagreeing: list[int], field: str
) -> None:
    outcomes = property_run.scenario(scenario)
    for rank, outcome in enumerate(outcomes):
        assert outcome["error"] == "CollectiveMismatchError", (rank, outcome)
        assert outcome["is_value_error"], outcome
        assert outcome["disagreeing_ranks"] == disagreeing, outcome
        assert field in outcome["fields"], outcome
        assert f"{field}: " in outcome["message"], outcome["message"]


def test_the_mismatch_message_is_the_same_on_every_rank_apart_from_the_operation(
    property_run: Run,
) -> None:
    messages = {o["message"] for o in property_run.scenario("reduce_dtype_mismatch")}
    assert len(messages) == 1, messages
    (message,) = messages
    assert "rank 1 differ" in message
    assert "torch.int64 on rank 1" in message
    assert "torch.float32 on ranks 0, 2" in message


def test_the_mismatch_message_of_gather_uneven_shows_the_free_first_dimension(
    property_run: Run,
) -> None:
    (message, *_) = [o["message"] for o in property_run.scenario("uneven_rest_mismatch")]
    assert "(*, 2) on ranks 0, 1; (*, 3) on rank 2" in message


@pytest.mark.parametrize(
    "scenario",
    ["reduce_empty_list_everywhere", "gather_bad_size_everywhere", "uneven_zero_dim_everywhere"],
)
def test_the_same_bad_arguments_everywhere_raise_the_argument_error_on_every_rank(
    property_run: Run, scenario: str
) -> None:
    outcomes = property_run.scenario(scenario)
    assert [o["error"] for o in outcomes] == ["CollectiveArgumentError"] * property_run.world
    assert all(o["is_value_error"] for o in outcomes)


def test_the_group_still_works_after_a_mismatch(property_run: Run) -> None:
    # Every scenario after the mismatches ran in step: the first barrier passed.
    assert all(o["ok"] for o in property_run.scenario("barrier_all")), property_run.log()
