"""DistributedInfo: the seed's frozen value type."""

from __future__ import annotations

import dataclasses

import pytest

from helios_env import DistributedInfo


def test_fields_keep_the_seed_order_and_defaults() -> None:
    fields = [(field.name, field.default) for field in dataclasses.fields(DistributedInfo)]

    # The seed's four fields first, with its defaults; helios's own only after them.
    assert fields == [
        ("local_rank", 0),
        ("rank", 0),
        ("local_world_size", 1),
        ("world_size", 1),
        ("node_rank", None),
        ("num_nodes", None),
        ("attempt", 0),
    ]


def test_positional_arguments_follow_the_seed_order() -> None:
    info = DistributedInfo(1, 3, 2, 4)

    assert (info.local_rank, info.rank, info.local_world_size, info.world_size) == (1, 3, 2, 4)


def test_default_describes_a_single_process() -> None:
    assert DistributedInfo() == DistributedInfo(
        local_rank=0, rank=0, local_world_size=1, world_size=1
    )


def test_is_frozen() -> None:
    info = DistributedInfo()

    with pytest.raises(dataclasses.FrozenInstanceError):
        info.rank = 1  # type: ignore[misc]


def test_equal_values_are_equal_and_hash_alike() -> None:
    assert DistributedInfo(1, 3, 2, 4) == DistributedInfo(1, 3, 2, 4)
    assert hash(DistributedInfo(1, 3, 2, 4)) == hash(DistributedInfo(1, 3, 2, 4))
    assert DistributedInfo(1, 3, 2, 4) != DistributedInfo(0, 3, 2, 4)


@pytest.mark.parametrize(
    ("info", "main", "local_main"),
    [
        (DistributedInfo(0, 0, 2, 4), True, True),
        (DistributedInfo(0, 2, 2, 4), False, True),
        (DistributedInfo(1, 3, 2, 4), False, False),
    ],
)
def test_main_process_properties_follow_the_ranks(
    info: DistributedInfo, main: bool, local_main: bool
) -> None:
    assert info.is_main_process is main
    assert info.is_local_main_process is local_main


def test_is_distributed_only_with_more_than_one_process() -> None:
    assert DistributedInfo().is_distributed is False
    assert DistributedInfo(0, 1, 1, 2).is_distributed is True


@pytest.mark.parametrize(
    ("info", "node_rank", "num_nodes"),
    [
        (DistributedInfo(), 0, 1),
        (DistributedInfo(1, 1, 2, 2), 0, 1),
        (DistributedInfo(1, 3, 2, 4, node_rank=1, num_nodes=2), 1, 2),
        # srun -n4 on two nodes places 3 and 1: rank 3 is alone on the second node.
        (DistributedInfo(0, 3, 1, 4, node_rank=1, num_nodes=2), 1, 2),
    ],
)
def test_node_fields_are_given_or_one_node(
    info: DistributedInfo, node_rank: int, num_nodes: int
) -> None:
    assert info.node_rank == node_rank
    assert info.num_nodes == num_nodes


@pytest.mark.parametrize("info", [DistributedInfo(1, 1, 2, 4), DistributedInfo(0, 4, 2, 5)])
def test_the_node_is_never_guessed_from_the_ranks(info: DistributedInfo) -> None:
    # rank // local_world_size is wrong for 3+1 placements and for round-robin ones.
    assert (info.node_rank, info.num_nodes) == (None, None)
