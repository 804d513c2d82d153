"""broadcast_object, gather_objects and all_reduce_dict: on three gloo ranks and alone.

The multi-rank tests run on ranks of helios-pg's pytest plugin; the objects cross the
4 KiB frame that one collective carries, on some ranks and not others.
"""

from __future__ import annotations

import pickle

import pytest
import torch
import torch.distributed as dist

from helios_collectives import (
    CollectiveArgumentError,
    CollectiveMismatchError,
    ProcessGroupNotInitializedError,
    all_reduce_dict,
    all_reduce_tensors,
    broadcast_object,
    gather_objects,
)
from helios_collectives._objects import INLINE
from helios_env import DistributedInfo
from helios_pg._reports._peer import is_peer_failure
from tests.collectives.conftest import GROUP_TIMEOUT

WORLD = 3
on_ranks = pytest.mark.ranks(WORLD, timeout=60, group_timeout=GROUP_TIMEOUT)


def pickled_to(length: int) -> bytes:
    """A bytes object whose pickle is exactly ``length`` bytes long."""
    overhead = len(pickle.dumps(b"", protocol=pickle.HIGHEST_PROTOCOL))
    for size in range(max(0, length - overhead - 16), length):
        value = b"x" * size
        if len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)) == length:
            return value
    raise AssertionError(length)


# Around the frame's edge: the payload fits, fills it, and passes it by one byte.
EDGES = [pickled_to(INLINE - 9), pickled_to(INLINE - 8), pickled_to(INLINE - 7)]


@on_ranks
def test_broadcast_object_sends_small_and_large_objects_from_any_rank(
    dist_info: DistributedInfo,
) -> None:
    rank = dist_info.rank
    config = {"lr": 0.1, "layers": [64, 64]}
    assert broadcast_object(config if rank == 1 else None, src=1) == config
    vocabulary = [f"word{i}" for i in range(3000)]  # far past one frame
    assert broadcast_object(vocabulary if rank == 0 else None) == vocabulary
    for value in EDGES:
        assert broadcast_object(value if rank == 2 else b"", src=2) == value
    # The sender gets its own object back, not a copy.
    mine = object()
    assert (broadcast_object(mine, src=0) is mine) == (rank == 0)


@on_ranks
def test_gather_objects_returns_every_rank_s_object_in_rank_order(
    dist_info: DistributedInfo,
) -> None:
    rank = dist_info.rank
    assert gather_objects(rank) == [0, 1, 2]
    # Rank 0's fits one frame, rank 1's and rank 2's need the second collective.
    texts = ["a" * (3000 * r) for r in range(WORLD)]
    assert gather_objects(texts[rank]) == texts
    assert gather_objects(EDGES[rank]) == EDGES


@on_ranks
def test_an_object_that_cannot_be_pickled_fails_every_rank_naming_its_rank(
    dist_info: DistributedInfo,
) -> None:
    rank = dist_info.rank
    unpicklable = lambda: None  # noqa: E731 - a lambda is what pickle refuses
    with pytest.raises(CollectiveArgumentError, match="rank 2's object cannot be pickled") as e:
        gather_objects(unpicklable if rank == 2 else rank)
    # The failure report names rank 2 on every rank: the others are its victims.
    assert is_peer_failure(e.value) is (rank != 2)
    with pytest.raises(CollectiveArgumentError, match="rank 1's object cannot be pickled") as e:
        broadcast_object(unpicklable if rank == 1 else None, src=1)
    assert is_peer_failure(e.value) is (rank != 1)
    # Nobody was left waiting: the group goes on.
    assert gather_objects(rank) == [0, 1, 2]


@on_ranks
def test_all_reduce_dict_reduces_every_value_in_one_dict(dist_info: DistributedInfo) -> None:
    rank = dist_info.rank
    loss = torch.tensor(float(rank))
    metrics: dict[str, torch.Tensor | float] = {
        "loss": loss,
        "counts": torch.tensor([rank, 1]),
        "n": 2,
    }
    summed = all_reduce_dict(metrics)
    assert list(summed) == ["loss", "counts", "n"]
    assert summed["loss"].item() == 3.0
    assert summed["counts"].tolist() == [3.0, 3.0]
    assert summed["n"].shape == ()
    assert summed["n"].item() == 6.0
    assert {value.dtype for value in summed.values()} == {torch.float32}
    # The caller's tensors are left as they were.
    assert loss.item() == float(rank)
    means = all_reduce_dict({"acc": torch.full((2, 2), float(rank))}, op=dist.ReduceOp.AVG)
    assert torch.equal(means["acc"], torch.ones(2, 2))
    assert all_reduce_dict({}) == {}


@on_ranks
def test_all_reduce_dict_names_the_keys_and_ranks_that_differ(
    dist_info: DistributedInfo,
) -> None:
    rank = dist_info.rank
    metrics: dict[str, torch.Tensor | float] = {"loss": 1.0}
    if rank == 1:
        metrics["extra"] = torch.zeros(3)
    with pytest.raises(CollectiveMismatchError) as raised:
        all_reduce_dict(metrics)
    error = raised.value
    assert error.disagreeing_ranks == (1,)
    assert is_peer_failure(error) is (rank != 1)
    want = {"missing": (0, 2), "shape (3,) torch.float32": (1,)}
    assert error.differences == {"key 'extra'": want}
    assert "key 'extra': missing on ranks 0, 2; shape (3,) torch.float32 on rank 1" in str(error)
    with pytest.raises(
        CollectiveMismatchError, match=r"key 'w': shape \(2,\) torch.float32 on rank 0"
    ):
        all_reduce_dict({"w": torch.zeros(2 if rank == 0 else 3)})
    # A scalar's shape reads as (), and a dtype difference names its key.
    loss = torch.tensor(1.0, dtype=torch.float64 if rank == 2 else torch.float32)
    with pytest.raises(CollectiveMismatchError) as raised:
        all_reduce_dict({"loss": loss, "acc": 0.5})
    assert (
        "key 'loss': shape () torch.float32 on ranks 0, 1; shape () torch.float64 on rank 2"
        in str(raised.value)
    )
    assert "key 'acc'" not in str(raised.value)
    # Nobody was left waiting: the group goes on.
    assert all_reduce_dict({"w": 1})["w"].item() == 3


@on_ranks
def test_all_reduce_dict_with_a_bad_value_on_one_rank_fails_every_rank(
    dist_info: DistributedInfo,
) -> None:
    rank = dist_info.rank
    metrics: dict[str, object] = {"acc": None if rank == 1 else 0.5}
    expected = TypeError if rank == 1 else CollectiveArgumentError
    match = r"metrics\['acc'\]" if rank == 1 else r"rank 1: TypeError: .*metrics\['acc'\]"
    with pytest.raises(expected, match=match) as raised:
        all_reduce_dict(metrics)  # type: ignore[arg-type]
    assert is_peer_failure(raised.value) is (rank != 1)
    # Nobody was left waiting: the group goes on.
    assert all_reduce_dict({"acc": 1})["acc"].item() == 3


def test_the_object_helpers_need_a_group() -> None:
    with pytest.raises(ProcessGroupNotInitializedError, match="broadcast_object"):
        broadcast_object(1)
    with pytest.raises(ProcessGroupNotInitializedError, match="gather_objects"):
        gather_objects(1)
    with pytest.raises(ProcessGroupNotInitializedError, match="all_reduce_dict"):
        all_reduce_dict({"a": 1.0})


def test_broadcast_object_names_a_src_outside_the_group(world_of_one: None) -> None:
    with pytest.raises(CollectiveArgumentError, match=r"src=3 is not a global rank .* \[0\]"):
        broadcast_object("x", src=3)


def test_at_world_size_one_each_helper_returns_its_input(world_of_one: None) -> None:
    assert broadcast_object({"a": [1, 2]}) == {"a": [1, 2]}
    assert gather_objects("x" * 10_000) == ["x" * 10_000]
    assert all_reduce_dict({"a": 2, "b": torch.tensor([1.5])})["b"].tolist() == [1.5]


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({1: 1.0}, "all_reduce_dict needs str keys, got 1 of type int"),
        ({"a": "high"}, r"metrics\['a'\] must be a torch.Tensor or a number, got str"),
        ({"a": True}, r"metrics\['a'\] must be a torch.Tensor or a number, got bool"),
    ],
)
def test_all_reduce_dict_rejects_bad_keys_and_values(
    world_of_one: None, metrics: dict[object, object], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        all_reduce_dict(metrics)  # type: ignore[arg-type]


@on_ranks
def test_a_src_that_differs_between_ranks_is_named_on_every_rank(
    dist_info: DistributedInfo,
) -> None:
    src = 1 if dist_info.rank == 2 else 0
    with pytest.raises(CollectiveMismatchError) as raised:
        broadcast_object("config" if dist_info.rank == src else None, src=src)
    error = raised.value
    assert error.disagreeing_ranks == (2,)
    assert "source rank: 0 on ranks 0, 1; 1 on rank 2" in str(error)
    assert "fix: pass the same src on every rank" in str(error)
    # Nobody was left waiting: the group goes on.
    assert broadcast_object("next" if dist_info.rank == 0 else None) == "next"


@on_ranks
def test_gather_objects_names_a_rank_in_another_collective(dist_info: DistributedInfo) -> None:
    call = (
        (lambda: all_reduce_tensors(torch.ones(2)))
        if dist_info.rank == 0
        else (lambda: gather_objects(dist_info.rank))
    )
    with pytest.raises(CollectiveMismatchError) as raised:
        call()
    assert raised.value.disagreeing_ranks == (0,)
    assert "operation: all_reduce_tensors on rank 0; gather_objects on ranks 1, 2" in str(
        raised.value
    )
    assert gather_objects(dist_info.rank) == [0, 1, 2]
