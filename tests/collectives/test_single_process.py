"""The collectives in this one process: no group, or a world-size-one gloo group.

Argument checks fail before any communication (the torch calls are replaced by
functions that fail the test if reached), the torch calls receive what they should,
and results at world size one are right.
"""

from __future__ import annotations

import pickle
import types
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore, Store

import helios_collectives
from helios_collectives import (
    VALIDATE_ENV_VAR,
    BarrierTimeoutError,
    CollectiveArgumentError,
    CollectiveMismatchError,
    ProcessGroupNotInitializedError,
    UnevenGather,
    ValidationSettingError,
    _barrier,
    all_reduce_tensors,
    barrier,
    gather_into_tensor,
    gather_uneven,
    safe_barrier,
)
from helios_collectives._torch_api import BARRIER_TAKES_TIMEOUT, gather_function_name

GATHER = gather_function_name(dist)  # the gather torch offers: all_gather_single where it can

Calls = list[tuple[tuple[Any, ...], dict[str, Any]]]
Spy = Callable[[str], Calls]


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Spy:
    """Record every call of a torch.distributed function, passing it through."""

    def install(name: str) -> Calls:
        real = getattr(dist, name)
        calls: Calls = []

        def recording(*args: Any, **kwargs: Any) -> Any:
            calls.append((args, kwargs))
            return real(*args, **kwargs)

        monkeypatch.setattr(dist, name, recording)
        return calls

    return install


@pytest.fixture
def no_communication(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any collective starts."""

    def forbidden(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a collective started")

    for name in ("all_reduce", "all_gather_single", "all_gather_into_tensor", "barrier"):
        if hasattr(dist, name):  # all_gather_single exists from torch 2.14 on
            monkeypatch.setattr(dist, name, forbidden)


# ------------------------------------------------------------------ no group

NEEDS_A_GROUP: list[tuple[str, Callable[[], object]]] = [
    ("gather_into_tensor", lambda: gather_into_tensor(torch.ones(2), (2,))),
    ("all_reduce_tensors", lambda: all_reduce_tensors(torch.ones(2))),
    ("all_reduce_tensors", lambda: all_reduce_tensors([torch.ones(2)])),
    ("gather_uneven", lambda: gather_uneven(torch.ones(2))),
]


@pytest.mark.parametrize(("name", "call"), NEEDS_A_GROUP)
def test_collectives_without_a_group_raise_a_runtime_error_naming_init(
    name: str, call: Callable[[], object]
) -> None:
    with pytest.raises(ProcessGroupNotInitializedError, match=r"helios_pg\.init\(\)") as info:
        call()
    assert isinstance(info.value, RuntimeError)
    assert name in str(info.value)


def test_safe_barrier_without_a_group_is_a_noop(no_communication: None) -> None:
    safe_barrier()
    safe_barrier(validate=True)


def test_barrier_without_a_group_is_a_noop() -> None:
    barrier(0.01)


# ------------------------------------------------------------ gather_into_tensor


def test_gather_into_tensor_with_the_wrong_size_raises_before_any_communication(
    world_of_one: None, no_communication: None
) -> None:
    with pytest.raises(CollectiveArgumentError, match=r"size \(4, 3\) has 12 elements") as info:
        gather_into_tensor(torch.ones(2, 3), (4, 3))
    assert isinstance(info.value, ValueError)
    assert "size=(2, 3) (concatenated) or (1, 2, 3) (stacked)" in str(info.value)


@pytest.mark.parametrize("size", [(-1,), (2, -1)])
def test_gather_into_tensor_rejects_negative_sizes_before_any_communication(
    world_of_one: None, no_communication: None, size: tuple[int]
) -> None:
    with pytest.raises(CollectiveArgumentError, match="non-negative") as info:
        gather_into_tensor(torch.ones(2), size)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("size", ["2", (2.0,), None])
def test_gather_into_tensor_rejects_sizes_that_are_not_ints(world_of_one: None, size: Any) -> None:
    with pytest.raises(TypeError, match="size must"):
        gather_into_tensor(torch.ones(2), size)


def test_gather_into_tensor_rejects_a_non_tensor(world_of_one: None) -> None:
    with pytest.raises(TypeError, match=r"tensor must be a torch\.Tensor, got list"):
        gather_into_tensor([1.0, 2.0], (2,))  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [(6,), (1, 2, 3), (2, 3), (3, 2), torch.Size([6])])
def test_gather_into_tensor_at_world_one_returns_a_new_tensor_of_the_given_size(
    world_of_one: None, size: tuple[int, ...]
) -> None:
    tensor = torch.arange(6.0).reshape(2, 3)
    out = gather_into_tensor(tensor, size)
    assert out.shape == torch.Size(size)
    assert torch.equal(out.reshape(-1), tensor.reshape(-1))
    assert out.data_ptr() != tensor.data_ptr()


def test_gather_into_tensor_of_a_view_at_world_one(world_of_one: None) -> None:
    view = torch.arange(12.0).reshape(3, 4)[:, 1]
    assert gather_into_tensor(view, (3,)).tolist() == [1.0, 5.0, 9.0]


def test_gather_into_tensor_runs_one_gather(world_of_one: None, spy: Spy) -> None:
    calls = spy(GATHER)
    gather_into_tensor(torch.ones(3), (3,))
    assert len(calls) == 1


def test_the_gather_falls_back_to_all_gather_into_tensor_on_older_torch() -> None:
    older = types.ModuleType("older_torch_distributed")
    older.all_gather_into_tensor = dist.all_gather_into_tensor  # type: ignore[attr-defined]
    assert gather_function_name(older) == "all_gather_into_tensor"
    newer = types.ModuleType("newer_torch_distributed")
    newer.all_gather_single = dist.all_gather_into_tensor  # type: ignore[attr-defined]
    assert gather_function_name(newer) == "all_gather_single"


# ------------------------------------------------------------ all_reduce_tensors


def test_all_reduce_tensors_rejects_an_empty_list_before_any_communication(
    world_of_one: None, no_communication: None
) -> None:
    with pytest.raises(CollectiveArgumentError, match="empty list"):
        all_reduce_tensors([])


def test_all_reduce_tensors_names_the_dtypes_of_a_mixed_list(
    world_of_one: None, no_communication: None
) -> None:
    tensors = [torch.ones(2), torch.ones(2, dtype=torch.int64), torch.ones(1)]
    with pytest.raises(CollectiveArgumentError) as info:
        all_reduce_tensors(tensors)
    assert "torch.float32 at index 0, 2" in str(info.value)
    assert "torch.int64 at index 1" in str(info.value)


def test_all_reduce_tensors_names_the_devices_of_a_mixed_list(
    world_of_one: None, no_communication: None
) -> None:
    tensors = [torch.ones(2), torch.ones(2, device="meta")]
    with pytest.raises(CollectiveArgumentError, match="cpu at index 0, meta at index 1"):
        all_reduce_tensors(tensors)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_all_reduce_tensors_refuses_the_mean_of_integers_before_any_communication(
    world_of_one: None, no_communication: None, dtype: torch.dtype
) -> None:
    with pytest.raises(CollectiveArgumentError, match=r"ReduceOp\.AVG of torch\."):
        all_reduce_tensors(torch.ones(2, dtype=dtype), op=dist.ReduceOp.AVG)


def test_all_reduce_tensors_refuses_async_op(world_of_one: None, no_communication: None) -> None:
    with pytest.raises(CollectiveArgumentError, match="async_op=True"):
        all_reduce_tensors(torch.ones(2), async_op=True)


def test_all_reduce_tensors_refuses_an_expanded_tensor(
    world_of_one: None, no_communication: None
) -> None:
    with pytest.raises(CollectiveArgumentError, match="overlapping memory"):
        all_reduce_tensors(torch.ones(3).expand(2, 3))


def test_all_reduce_tensors_rejects_unknown_keywords(world_of_one: None) -> None:
    # mypy --strict rejects the misspelt keyword too (tests/typing/consume_collectives.py).
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'opp'"):
        all_reduce_tensors(torch.ones(2), opp=dist.ReduceOp.MAX)  # type: ignore[call-arg]


@pytest.mark.parametrize("value", [3.0, "abc", [torch.ones(1), 2.0]])
def test_all_reduce_tensors_rejects_non_tensors(world_of_one: None, value: Any) -> None:
    with pytest.raises(TypeError, match=r"torch\.Tensor"):
        all_reduce_tensors(value)


def test_all_reduce_tensors_reduces_a_list_in_one_all_reduce(world_of_one: None, spy: Spy) -> None:
    calls = spy("all_reduce")
    gathers = spy(GATHER)
    out = all_reduce_tensors([torch.tensor(1.0), torch.ones(2, 2), torch.tensor(2.0)] * 10)
    assert len(calls) == 1
    assert gathers == []
    assert out.shape == (60,)


def test_all_reduce_tensors_passes_its_keywords_to_torch(world_of_one: None, spy: Spy) -> None:
    calls = spy("all_reduce")
    group = dist.group.WORLD
    all_reduce_tensors(torch.ones(2), op=dist.ReduceOp.MAX, group=group)
    ((_, kwargs),) = calls
    assert kwargs["op"] == dist.ReduceOp.MAX
    assert kwargs["group"] is group


def test_all_reduce_tensors_runs_avg_as_sum_on_gloo(world_of_one: None, spy: Spy) -> None:
    calls = spy("all_reduce")
    out = all_reduce_tensors(torch.tensor([1.0, 3.0]), op=dist.ReduceOp.AVG)
    ((_, kwargs),) = calls
    assert kwargs["op"] == dist.ReduceOp.SUM
    assert out.tolist() == [1.0, 3.0]


def test_all_reduce_tensors_returns_a_single_tensor_itself(world_of_one: None) -> None:
    tensor = torch.ones(3)
    assert all_reduce_tensors(tensor) is tensor


def test_all_reduce_tensors_of_a_view_writes_nothing_outside_it(world_of_one: None) -> None:
    base = torch.arange(12.0).reshape(3, 4)
    before = base.clone()
    view = base[:, 1]
    assert all_reduce_tensors(view, op=dist.ReduceOp.AVG) is view
    assert torch.equal(base, before)


def test_all_reduce_tensors_of_a_list_concatenates_0d_and_nd_tensors(world_of_one: None) -> None:
    out = all_reduce_tensors([torch.tensor(1.0), torch.tensor([[2.0, 3.0]]), torch.tensor(4.0)])
    assert out.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_all_reduce_tensors_of_a_one_tensor_list_returns_a_copy(world_of_one: None) -> None:
    tensor = torch.ones(2, 2)
    out = all_reduce_tensors([tensor])
    assert out.shape == (4,)
    assert out.data_ptr() != tensor.data_ptr()


# ---------------------------------------------------------------- gather_uneven


def test_gather_uneven_at_world_one_returns_the_tensor_and_its_size(world_of_one: None) -> None:
    view = torch.arange(12.0).reshape(4, 3)[::2]
    result = gather_uneven(view)
    assert isinstance(result, UnevenGather)
    assert result.sizes == (2,)
    assert torch.equal(result.tensor, view)
    (part,) = result.split()
    assert torch.equal(part, view)


def test_gather_uneven_of_an_empty_tensor(world_of_one: None) -> None:
    result = gather_uneven(torch.empty(0, 5))
    assert result.sizes == (0,)
    assert result.tensor.shape == (0, 5)


def test_gather_uneven_refuses_a_0d_tensor(world_of_one: None) -> None:
    with pytest.raises(CollectiveArgumentError, match="0-d tensor"):
        gather_uneven(torch.tensor(1.0))


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    "call",
    [
        lambda v: gather_into_tensor(torch.ones(2), (2,), validate=v),
        lambda v: all_reduce_tensors(torch.ones(2), validate=v),
        lambda v: all_reduce_tensors([torch.ones(2), torch.tensor(1.0)], validate=v),
        lambda v: safe_barrier(validate=v),
    ],
)
@pytest.mark.parametrize("validate", [True, None])
def test_one_rank_has_nothing_to_check(
    world_of_one: None, spy: Spy, call: Callable[[bool | None], object], validate: bool | None
) -> None:
    gathers = spy(GATHER)
    call(False)
    plain = len(gathers)
    call(validate)
    assert len(gathers) == 2 * plain  # the call's own gathers, no description


def test_an_unreadable_environment_variable_is_a_validation_setting_error(
    world_of_one: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(VALIDATE_ENV_VAR, "maybe")
    with pytest.raises(
        ValidationSettingError, match=f"{VALIDATE_ENV_VAR} must be 1 or 0.*'maybe'"
    ) as info:
        all_reduce_tensors(torch.ones(2))
    assert isinstance(info.value, ValueError)
    assert info.value.value == "maybe"


def test_validate_must_be_a_bool(world_of_one: None) -> None:
    with pytest.raises(TypeError, match="validate must be True, False or None"):
        all_reduce_tensors(torch.ones(2), validate=1)  # type: ignore[arg-type]


def test_in_validation_mode_an_argument_problem_is_still_an_argument_error(
    world_of_one: None,
) -> None:
    with pytest.raises(CollectiveArgumentError, match="has 3 elements"):
        gather_into_tensor(torch.ones(2), (3,), validate=True)


# ------------------------------------------------------------------- barriers


def test_safe_barrier_passes_the_current_device_on_nccl(
    world_of_one: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, Any]] = []
    # A CUDA host whose default group runs nccl, as far as safe_barrier can tell.
    monkeypatch.setattr(helios_collectives._safe_barrier, "_CUDA", True)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    monkeypatch.setattr(dist, "barrier", lambda **kwargs: seen.append(kwargs))
    safe_barrier()
    safe_barrier(device_ids=[1])
    assert [kw["device_ids"] for kw in seen] == [[3], [1]]


def test_safe_barrier_on_gloo_leaves_device_ids_alone(world_of_one: None, spy: Spy) -> None:
    calls = spy("barrier")
    safe_barrier(group=dist.group.WORLD)
    ((_, kwargs),) = calls
    assert "device_ids" not in kwargs


@pytest.mark.skipif(not BARRIER_TAKES_TIMEOUT, reason="torch's barrier takes timeout from 2.12")
def test_safe_barrier_passes_its_timeout_to_torch(world_of_one: None, spy: Spy) -> None:
    calls = spy("barrier")
    safe_barrier(timeout=timedelta(seconds=5))
    safe_barrier(timeout=2.5)
    assert [kwargs["timeout"] for _, kwargs in calls] == [
        timedelta(seconds=5),
        timedelta(seconds=2.5),
    ]


@pytest.mark.parametrize("timeout", [0, -1.0, float("inf")])
def test_safe_barrier_refuses_a_timeout_that_is_not_positive(
    world_of_one: None, no_communication: None, timeout: float
) -> None:
    with pytest.raises(
        CollectiveArgumentError, match="timeout must be a positive, finite number of seconds"
    ):
        safe_barrier(timeout=timeout)


@pytest.mark.skipif(BARRIER_TAKES_TIMEOUT, reason="this torch's barrier takes a timeout")
def test_safe_barrier_names_the_torch_its_timeout_needs(
    world_of_one: None, no_communication: None
) -> None:
    with pytest.raises(CollectiveArgumentError, match=r"torch 2\.12 or later"):
        safe_barrier(timeout=timedelta(seconds=5))


def test_barrier_at_world_one_passes_again_and_again(world_of_one: None) -> None:
    for _ in range(5):
        barrier(timedelta(seconds=1))
    barrier(timeout=0.5)


@pytest.mark.parametrize("timeout", [0, -1.0, float("inf"), float("nan"), timedelta(0)])
def test_barrier_timeout_must_be_positive_and_finite(timeout: Any) -> None:
    with pytest.raises(CollectiveArgumentError, match="positive, finite number of seconds") as info:
        barrier(timeout)
    assert isinstance(info.value, ValueError)


def test_barrier_timeout_must_be_a_duration() -> None:
    with pytest.raises(
        TypeError, match=r"timeout must be seconds \(a number\) or a datetime.timedelta"
    ):
        barrier("5")  # type: ignore[arg-type]


# The outcome of a timed-out barrier is decided at its arrival count, in the store;
# these drive that decision on a real store, one step per rank, in the orders that
# several processes cannot be made to take reliably.

RANKS = [0, 1, 2]
BASE = "b/1"
LIMIT = timedelta(seconds=2)


def arrive(store: Store, rank: int, *, count: bool = True) -> int:
    if count:
        return _barrier._arrive(store, BASE, rank, f"token{rank}")
    store.append(f"{BASE}/arrivals", f"{rank}:token{rank},")  # type: ignore[attr-defined]
    return 0


def test_the_first_rank_to_give_up_records_whose_arrival_is_missing() -> None:
    store = HashStore()
    arrive(store, 0)
    arrive(store, 2, count=False)  # arrival recorded, not yet counted in
    assert _barrier._give_up(store, BASE, RANKS, LIMIT) >= _barrier._GAVE_UP
    # Rank 2 counts itself in after the jump: it cannot find the count met.
    assert store.add(f"{BASE}/count", 1) >= _barrier._GAVE_UP
    verdict = _barrier._read_verdict(store, BASE, RANKS, LIMIT)
    assert verdict == _barrier._Verdict((1,), LIMIT)


def test_a_second_rank_giving_up_keeps_the_first_verdict() -> None:
    store = HashStore()
    arrive(store, 0)
    arrive(store, 2)
    _barrier._give_up(store, BASE, RANKS, LIMIT)
    arrive(store, 1)  # late: after the first verdict
    _barrier._give_up(store, BASE, RANKS, timedelta(seconds=9))
    assert _barrier._read_verdict(store, BASE, RANKS, LIMIT) == _barrier._Verdict((1,), LIMIT)


def test_a_count_met_before_the_jump_is_a_verdict_that_nobody_is_missing() -> None:
    store = HashStore()
    for rank in RANKS:
        arrive(store, rank)  # the last one passes on its own count
    _barrier._give_up(store, BASE, RANKS, LIMIT)  # a rank that had not polled since
    assert store.check([f"{BASE}/verdict"])  # recorded, so every rank can read it
    assert _barrier._read_verdict(store, BASE, RANKS, LIMIT).missing == ()


def test_without_a_recorded_verdict_the_arrivals_are_read_after_the_bound() -> None:
    store = HashStore()
    arrive(store, 0)
    store.add(f"{BASE}/count", _barrier._GAVE_UP)  # that rank died before recording
    short = timedelta(seconds=0.05)
    assert _barrier._read_verdict(store, BASE, RANKS, short) == _barrier._Verdict((1, 2), short)


# --------------------------------------------------------------------- errors


def test_errors_keep_their_attributes_through_pickling() -> None:
    mismatch = CollectiveMismatchError(
        "m", operation="all_reduce_tensors", disagreeing_ranks=(1,), differences={"dtype": {}}
    )
    copy = pickle.loads(pickle.dumps(mismatch))
    assert (str(copy), copy.operation, copy.disagreeing_ranks, copy.differences) == (
        "m",
        "all_reduce_tensors",
        (1,),
        {"dtype": {}},
    )
    timeout = BarrierTimeoutError("t", missing_ranks=(2, 3), timeout=timedelta(seconds=1))
    again = pickle.loads(pickle.dumps(timeout))
    assert (str(again), again.missing_ranks, again.timeout) == ("t", (2, 3), timedelta(seconds=1))
    setting = pickle.loads(pickle.dumps(ValidationSettingError("s", value="maybe")))
    assert (str(setting), setting.value) == ("s", "maybe")


def test_safe_barrier_refuses_async_op_rather_than_drop_the_handle(world_of_one: None) -> None:
    with pytest.raises(CollectiveArgumentError, match="async_op=True"):
        safe_barrier(async_op=True)


@pytest.mark.parametrize("validate", [True, False, None])
def test_safe_barrier_refuses_async_op_before_anything_is_sent(
    world_of_one: None, no_communication: None, validate: bool | None
) -> None:
    with pytest.raises(CollectiveArgumentError, match="async_op=True"):
        safe_barrier(async_op=True, validate=validate)


@pytest.mark.parametrize("validate", [True, False])
def test_all_reduce_tensors_refuses_async_op_before_anything_is_sent(
    world_of_one: None, no_communication: None, validate: bool
) -> None:
    with pytest.raises(CollectiveArgumentError, match="async_op=True"):
        all_reduce_tensors(torch.ones(2), async_op=True, validate=validate)
