"""The in-process world-size-one backend: every collective as gloo or nccl gives it.

Most cases run the same call on a gloo world-size-one group and on a helios-local
group and compare the outcomes. Where gloo itself is narrower than nccl (``AVG`` of
integers, ``PREMUL_SUM``, an all-gather into a stacked or flat output), the expected
value is the identity that nccl gives at world size one.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch._C._distributed_c10d import (
    AllreduceOptions,
    BarrierOptions,
    HashStore,
    _broadcast_coalesced,
    _DistributedBackendOptions,
    _make_nccl_premul_sum,
)
from torch.distributed.distributed_c10d import (
    _all_gather_base,
    _coalescing_manager,
    _reduce_scatter_base,
)
from torch.nn.parallel import DistributedDataParallel

from helios_pg._local import (
    LOCAL_BACKEND,
    _create_local_backend,
    _LocalBackend,
    register_local_backend,
)

GLOO = "gloo"
R = dist.ReduceOp
Case = Callable[[], object]

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def sample(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.tensor([[True, False, True], [False, False, True]])
    if dtype.is_complex:
        return torch.tensor([[1 + 2j, 3 - 1j, 0j], [2j, -1 + 0j, 4 + 4j]], dtype=dtype)
    return torch.arange(1, 7, dtype=dtype).reshape(2, 3)


def normalize(value: object) -> object:
    """Turn tensors into comparable plain data, keeping dtype and shape."""
    if isinstance(value, torch.Tensor):
        dense = value.to_dense() if value.is_sparse else value
        return ("tensor", str(dense.dtype), tuple(dense.shape), dense.cpu().tolist())
    if isinstance(value, (list, tuple)):
        return [normalize(item) for item in value]
    if isinstance(value, dict):
        return {key: normalize(item) for key, item in value.items()}
    return value


def world() -> dist.ProcessGroup:
    group = dist.group.WORLD
    assert group is not None
    return group


def local_backend() -> _LocalBackend:
    backend = world()._get_backend(torch.device("cpu"))
    assert isinstance(backend, _LocalBackend)
    return backend


def start(backend: str, **kwargs: Any) -> None:
    if backend == LOCAL_BACKEND:
        register_local_backend()
    dist.init_process_group(backend=backend, store=HashStore(), rank=0, world_size=1, **kwargs)


def outcome(backend: str, case: Case) -> tuple[str, object]:
    """Run ``case`` on a fresh world-size-one group of ``backend``; always destroy it."""
    start(backend)
    try:
        try:
            return ("ok", normalize(case()))
        except (RuntimeError, ValueError):
            return ("error", None)
    finally:
        dist.destroy_process_group()


@pytest.fixture
def local_group() -> Iterator[None]:
    start(LOCAL_BACKEND)
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _deprecated(call: Callable[[], object]) -> object:
    # all_reduce_coalesced, all_gather_coalesced and the underscore-base functions
    # are torch's own deprecated APIs; their FutureWarning is expected here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return call()


# ---------------------------------------------------------------- cases


def all_reduce(op: dist.ReduceOp.RedOpType, dtype: torch.dtype) -> Case:
    def case() -> object:
        tensor = sample(dtype)
        dist.all_reduce(tensor, op=op)
        return tensor

    return case


def into(output: torch.Tensor, call: Callable[[torch.Tensor], object]) -> Case:
    def case() -> object:
        call(output)
        return output

    return case


def into_list(outputs: list[torch.Tensor], call: Callable[[list[torch.Tensor]], object]) -> Case:
    def case() -> object:
        call(outputs)
        return outputs

    return case


def async_result(call: Callable[[], dist.Work | None]) -> Case:
    def case() -> object:
        work = call()
        assert work is not None
        return (work.wait(), work.get_future().value())

    return case


def coalesced_all_reduce() -> object:
    first, second = sample(), sample() * 2
    with _coalescing_manager():
        dist.all_reduce(first)
        dist.all_reduce(second)
    return [first, second]


def coalesced_all_gather() -> object:
    output = torch.empty(2, 3)
    with _coalescing_manager(async_ops=True) as manager:
        dist.all_gather_single(output, sample())
    manager.wait()
    return output


def coalesced_reduce_scatter() -> object:
    output = torch.empty(2, 3)
    with _coalescing_manager():
        dist.reduce_scatter_single(output, sample())
    return output


def sub_group_all_reduce() -> object:
    group = dist.new_group([0])
    assert isinstance(group, dist.ProcessGroup)
    tensor = sample()
    dist.all_reduce(tensor, group=group)
    dist.barrier(group=group)
    dist.destroy_process_group(group)
    return tensor


def broadcast_objects() -> object:
    objects: list[object] = [{"a": 1}, "two", 3.0]
    dist.broadcast_object_list(objects, src=0)
    return objects


def all_gather_objects() -> object:
    gathered: list[object] = [None]
    dist.all_gather_object(gathered, {"rank": dist.get_rank()})
    return gathered


def gather_objects() -> object:
    gathered: list[object] = [None]
    dist.gather_object({"rank": 0}, gathered, dst=0)
    return gathered


def scatter_objects() -> object:
    received: list[object] = [None]
    dist.scatter_object_list(received, [{"b": 2}], src=0)
    return received


def broadcast_coalesced() -> object:
    tensors = [sample(), sample(torch.int64)]
    _broadcast_coalesced(world(), tensors, 1024, 0)
    return tensors


def sparse_all_reduce() -> object:
    tensor = sample().to_sparse()
    dist.all_reduce(tensor)
    return tensor


SAME_AS_GLOO: dict[str, Case] = {
    **{
        f"all_reduce-{op}-{dtype}": all_reduce(getattr(R, op), dtype)
        for op in ("SUM", "PRODUCT", "MIN", "MAX")
        for dtype in (torch.float32, torch.float64, torch.int64, torch.bool)
    },
    **{
        f"all_reduce-{op}-{dtype}": all_reduce(getattr(R, op), dtype)
        for op in ("BAND", "BOR", "BXOR")
        for dtype in (torch.int64, torch.int32, torch.bool, torch.float32)
    },
    "all_reduce-AVG-float32": all_reduce(R.AVG, torch.float32),
    "all_reduce-AVG-bool": all_reduce(R.AVG, torch.bool),
    "all_reduce-SUM-complex64": all_reduce(R.SUM, torch.complex64),
    "all_reduce-sparse": sparse_all_reduce,
    "all_reduce_coalesced": lambda: _deprecated(
        lambda: (tensors := [sample(), sample(torch.int64)], dist.all_reduce_coalesced(tensors))
    ),
    "broadcast": into(sample(), lambda t: dist.broadcast(t, src=0)),
    "broadcast-bad-src": into(sample(), lambda t: dist.broadcast(t, src=1)),
    "reduce": into(sample(), lambda t: dist.reduce(t, dst=0, op=R.MAX)),
    "reduce-bad-dst": into(sample(), lambda t: dist.reduce(t, dst=1)),
    "all_gather": into_list([torch.empty(2, 3)], lambda out: dist.all_gather(out, sample())),
    "all_gather-int": into_list(
        [torch.empty(2, 3, dtype=torch.int64)],
        lambda out: dist.all_gather(out, sample(torch.int64)),
    ),
    "all_gather-two-outputs": into_list(
        [torch.empty(2, 3), torch.empty(2, 3)], lambda out: dist.all_gather(out, sample())
    ),
    "all_gather-other-shape": into_list(
        [torch.empty(3, 2)], lambda out: dist.all_gather(out, sample())
    ),
    "all_gather-other-dtype": into_list(
        [torch.empty(2, 3, dtype=torch.int64)], lambda out: dist.all_gather(out, sample())
    ),
    "all_gather_coalesced": lambda: _deprecated(
        lambda: (
            outputs := [[torch.empty(2, 3), torch.empty(4)]],
            dist.all_gather_coalesced(outputs, [sample(), torch.arange(4.0)]),
        )[0]
    ),
    "all_gather_single": into(torch.empty(2, 3), lambda out: dist.all_gather_single(out, sample())),
    "all_gather_single-non-contiguous-output": into(
        torch.empty(3, 2).t(), lambda out: dist.all_gather_single(out, sample())
    ),
    "all_gather_single-non-contiguous-input": into(
        torch.empty(3, 2), lambda out: dist.all_gather_single(out, sample().t())
    ),
    "all_gather_single-too-small": into(
        torch.empty(5), lambda out: dist.all_gather_single(out, sample())
    ),
    "all_gather_single-other-dtype": into(
        torch.empty(2, 3, dtype=torch.int64), lambda out: dist.all_gather_single(out, sample())
    ),
    "all_gather_into_tensor": into(
        torch.empty(2, 3), lambda out: dist.all_gather_into_tensor(out, sample())
    ),
    "_all_gather_base": into(
        torch.empty(2, 3), lambda out: _deprecated(lambda: _all_gather_base(out, sample()))
    ),
    "gather": into_list([torch.empty(2, 3)], lambda out: dist.gather(sample(), out, dst=0)),
    "gather-two-outputs": into_list(
        [torch.empty(2, 3), torch.empty(2, 3)], lambda out: dist.gather(sample(), out, dst=0)
    ),
    "gather-other-shape": into_list(
        [torch.empty(6)], lambda out: dist.gather(sample(), out, dst=0)
    ),
    "gather-no-list": lambda: dist.gather(sample(), None, dst=0),
    "scatter": into(torch.empty(2, 3), lambda out: dist.scatter(out, [sample()], src=0)),
    "scatter-two-inputs": into(
        torch.empty(2, 3), lambda out: dist.scatter(out, [sample(), sample()], src=0)
    ),
    "scatter-other-shape": into(torch.empty(6), lambda out: dist.scatter(out, [sample()], src=0)),
    "scatter-other-dtype": into(
        torch.empty(2, 3, dtype=torch.int64), lambda out: dist.scatter(out, [sample()], src=0)
    ),
    "reduce_scatter": into(torch.empty(2, 3), lambda out: dist.reduce_scatter(out, [sample()])),
    "reduce_scatter-AVG": into(
        torch.empty(2, 3), lambda out: dist.reduce_scatter(out, [sample()], op=R.AVG)
    ),
    "reduce_scatter-two-inputs": into(
        torch.empty(2, 3), lambda out: dist.reduce_scatter(out, [sample(), sample()])
    ),
    "reduce_scatter_single": into(
        torch.empty(2, 3), lambda out: dist.reduce_scatter_single(out, sample())
    ),
    "reduce_scatter_tensor": into(
        torch.empty(2, 3), lambda out: dist.reduce_scatter_tensor(out, sample(), op=R.MIN)
    ),
    "_reduce_scatter_base": into(
        torch.empty(2, 3),
        lambda out: _deprecated(lambda: _reduce_scatter_base(out, sample())),
    ),
    "all_to_all_single": into(torch.empty(2, 3), lambda out: dist.all_to_all_single(out, sample())),
    "all_to_all_single-splits": into(
        torch.empty(2, 3), lambda out: dist.all_to_all_single(out, sample(), [2], [2])
    ),
    "all_to_all_single-output-splits": into(
        torch.empty(2, 3), lambda out: dist.all_to_all_single(out, sample(), [2], None)
    ),
    "all_to_all_single-bad-splits": into(
        torch.empty(2, 3), lambda out: dist.all_to_all_single(out, sample(), [1], [1])
    ),
    "all_to_all_single-too-large": into(
        torch.empty(3, 3), lambda out: dist.all_to_all_single(out, sample())
    ),
    "all_to_all_single-other-dtype": into(
        torch.empty(2, 3, dtype=torch.int64), lambda out: dist.all_to_all_single(out, sample())
    ),
    "all_to_all": into_list([torch.empty(2, 3)], lambda out: dist.all_to_all(out, [sample()])),
    "all_to_all-two": into_list(
        [torch.empty(2, 3)] * 2, lambda out: dist.all_to_all(out, [sample()] * 2)
    ),
    "all_to_all-other-shape": into_list(
        [torch.empty(6)], lambda out: dist.all_to_all(out, [sample()])
    ),
    "barrier": dist.barrier,
    "monitored_barrier": lambda: dist.monitored_barrier(timeout=timedelta(seconds=5)),
    "monitored_barrier-all": lambda: dist.monitored_barrier(wait_all_ranks=True),
    "broadcast_object_list": broadcast_objects,
    # These three need numpy inside torch; without it both backends raise alike.
    "all_gather_object": all_gather_objects,
    "gather_object": gather_objects,
    "scatter_object_list": scatter_objects,
    "_broadcast_coalesced": broadcast_coalesced,
    "coalescing-all_reduce": coalesced_all_reduce,
    "coalescing-all_gather_single": coalesced_all_gather,
    "coalescing-reduce_scatter_single": coalesced_reduce_scatter,
    "new_group": sub_group_all_reduce,
    "get_world_size": dist.get_world_size,
    "get_rank": dist.get_rank,
    "send-to-self": lambda: dist.send(sample(), dst=0),
    "future-all_reduce": async_result(lambda: dist.all_reduce(sample(), async_op=True)),
    "future-broadcast": async_result(lambda: dist.broadcast(sample(), 0, async_op=True)),
    "future-reduce": async_result(lambda: dist.reduce(sample(), 0, async_op=True)),
    "future-all_gather": async_result(
        lambda: dist.all_gather([torch.empty(2, 3)], sample(), async_op=True)
    ),
    "future-all_gather_single": async_result(
        lambda: dist.all_gather_single(torch.empty(2, 3), sample(), async_op=True)
    ),
    "future-gather": async_result(
        lambda: dist.gather(sample(), [torch.empty(2, 3)], 0, async_op=True)
    ),
    "future-scatter": async_result(
        lambda: dist.scatter(torch.empty(2, 3), [sample()], 0, async_op=True)
    ),
    "future-all_to_all_single": async_result(
        lambda: dist.all_to_all_single(torch.empty(2, 3), sample(), async_op=True)
    ),
    "future-all_to_all": async_result(
        lambda: dist.all_to_all([torch.empty(2, 3)], [sample()], async_op=True)
    ),
    "future-barrier": async_result(lambda: dist.barrier(async_op=True)),
}


@pytest.mark.parametrize("name", sorted(SAME_AS_GLOO))
def test_same_outcome_as_gloo(name: str) -> None:
    case = SAME_AS_GLOO[name]

    assert outcome(LOCAL_BACKEND, case) == outcome(GLOO, case)


def premul_sum(factor: float | torch.Tensor) -> dist.ReduceOp:
    return _make_nccl_premul_sum(factor)


# Where gloo is narrower than nccl: the nccl result at world size one.
LIKE_NCCL: dict[str, tuple[Case, object]] = {
    "all_reduce-AVG-int64": (all_reduce(R.AVG, torch.int64), sample(torch.int64)),
    "all_reduce-PREMUL_SUM": (
        into(sample(), lambda t: dist.all_reduce(t, op=premul_sum(2.0))),
        sample() * 2,
    ),
    "all_reduce-PREMUL_SUM-tensor-factor": (
        into(sample(), lambda t: dist.all_reduce(t, op=premul_sum(torch.tensor([0.5])))),
        sample() * 0.5,
    ),
    "reduce-PREMUL_SUM": (
        into(sample(), lambda t: dist.reduce(t, 0, op=premul_sum(3.0))),
        sample() * 3,
    ),
    "reduce_scatter-PREMUL_SUM": (
        into(torch.empty(2, 3), lambda o: dist.reduce_scatter(o, [sample()], op=premul_sum(2.0))),
        sample() * 2,
    ),
    "reduce_scatter_single-PREMUL_SUM": (
        into(torch.empty(6), lambda o: dist.reduce_scatter_single(o, sample(), premul_sum(2.0))),
        sample().flatten() * 2,
    ),
    "all_gather_single-stacked": (
        into(torch.empty(1, 2, 3), lambda out: dist.all_gather_single(out, sample())),
        sample().unsqueeze(0),
    ),
    "all_gather_single-flat": (
        into(torch.empty(6), lambda out: dist.all_gather_single(out, sample())),
        sample().flatten(),
    ),
    "reduce_scatter_single-flat": (
        into(torch.empty(6), lambda out: dist.reduce_scatter_single(out, sample())),
        sample().flatten(),
    ),
    "reduce_scatter_single-AVG": (
        into(torch.empty(2, 3), lambda out: dist.reduce_scatter_single(out, sample(), R.AVG)),
        sample(),
    ),
    "future-reduce_scatter": (
        async_result(lambda: dist.reduce_scatter(torch.empty(2, 3), [sample()], async_op=True)),
        (True, [sample()]),
    ),
    "future-reduce_scatter_single": (
        async_result(
            lambda: dist.reduce_scatter_single(torch.empty(2, 3), sample(), async_op=True)
        ),
        (True, [sample()]),
    ),
}


@pytest.mark.parametrize("name", sorted(LIKE_NCCL))
def test_same_outcome_as_nccl_where_gloo_refuses(name: str) -> None:
    case, expected = LIKE_NCCL[name]

    assert outcome(LOCAL_BACKEND, case) == ("ok", normalize(expected))


def test_coalescing_manager_with_a_device(local_group: None) -> None:
    first, second = sample(), sample()
    with _coalescing_manager(device=torch.device("cpu"), async_ops=True) as manager:
        dist.all_reduce(first, op=premul_sum(2.0))
        dist.broadcast(second, src=0)
    manager.wait()

    assert torch.equal(first, sample() * 2)
    assert torch.equal(second, sample())


def test_all_reduce_of_a_view_touches_only_the_view(local_group: None) -> None:
    base = torch.arange(24.0).reshape(4, 6)
    view = base[1:3, ::2]
    assert not view.is_contiguous()

    dist.all_reduce(view, op=premul_sum(10.0))

    expected = torch.arange(24.0).reshape(4, 6)
    expected[1:3, ::2] *= 10
    assert torch.equal(base, expected)


def test_all_gather_in_place_input_is_the_output(local_group: None) -> None:
    output = torch.arange(6.0)

    dist.all_gather_single(output, output[0:6])

    assert torch.equal(output, torch.arange(6.0))


def test_functional_collectives(local_group: None) -> None:
    tensor = torch.arange(4.0)

    assert torch.equal(funcol.all_reduce(tensor, "sum", world()), tensor)
    assert torch.equal(funcol.all_gather_single(tensor, 0, world()), tensor)
    assert torch.equal(funcol.reduce_scatter_single(tensor, "avg", 0, world()), tensor)
    assert torch.equal(funcol.all_to_all_single(tensor, None, None, world()), tensor)


# ---------------------------------------------------------------- errors


def test_size_mismatches_are_runtime_errors(local_group: None) -> None:
    with pytest.raises(RuntimeError, match="5 elements but the input has 6"):
        dist.all_gather_into_tensor(torch.empty(5), sample())
    with pytest.raises(RuntimeError, match="5 elements but the input has 6"):
        dist.reduce_scatter_tensor(torch.empty(5), sample())
    with pytest.raises(RuntimeError, match="list of 2, expected 1"):
        dist.all_gather([torch.empty(2, 3)] * 2, sample())
    with pytest.raises(RuntimeError, match="split sizes"):
        dist.all_to_all_single(torch.empty(2, 3), sample(), [1, 1], [1, 1])
    with pytest.raises(RuntimeError, match="invalid root rank 1"):
        dist.broadcast(sample(), src=1)


def test_dtype_mismatches_are_value_errors(local_group: None) -> None:
    with pytest.raises(ValueError, match="dtype"):
        dist.all_gather_into_tensor(torch.empty(6, dtype=torch.int64), sample())
    with pytest.raises(ValueError, match="dtype"):
        dist.reduce_scatter_tensor(torch.empty(6, dtype=torch.float64), sample())


def test_reductions_refused_as_gloo_and_nccl_refuse_them(local_group: None) -> None:
    with pytest.raises(RuntimeError, match=r"ReduceOp\.BAND with non-integral"):
        dist.all_reduce(sample(), op=R.BAND)
    with pytest.raises(RuntimeError, match=r"ReduceOp\.AVG with boolean"):
        dist.all_reduce(sample(torch.bool), op=R.AVG)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda: dist.isend(sample(), dst=0), id="isend"),
        pytest.param(lambda: dist.irecv(sample(), src=0), id="irecv"),
        pytest.param(lambda: dist.recv(sample(), src=0), id="recv"),
        pytest.param(lambda: dist.recv(sample()), id="recv-any-source"),
        pytest.param(
            lambda: dist.batch_isend_irecv([dist.P2POp(dist.isend, sample(), 0)]),
            id="batch_isend_irecv",
        ),
    ],
)
def test_point_to_point_has_no_peer(local_group: None, call: Callable[[], object]) -> None:
    with pytest.raises(RuntimeError, match="at world size one: there is no other rank"):
        call()


def test_send_to_self_is_refused_by_torch_first(local_group: None) -> None:
    with pytest.raises(ValueError, match="Invalid destination rank"):
        dist.send(sample(), dst=0)


def test_groups_of_more_than_one_rank_are_refused() -> None:
    opts = _DistributedBackendOptions()
    opts.store = HashStore()
    opts.group_rank = 0
    opts.group_size = 2
    opts.timeout = timedelta(seconds=5)

    with pytest.raises(ValueError, match="groups of one rank only, got a group of 2"):
        _create_local_backend(opts, None)


def test_pg_options_of_another_type_are_refused() -> None:
    register_local_backend()
    with pytest.raises(TypeError, match="pg_options"):
        dist.init_process_group(
            backend=LOCAL_BACKEND,
            store=HashStore(),
            rank=0,
            world_size=1,
            pg_options=object(),
        )
    assert not dist.is_initialized()


# ---------------------------------------------------------------- work handles


def test_async_work_is_complete_at_once(local_group: None) -> None:
    tensor = sample()

    work = dist.all_reduce(tensor, async_op=True)

    assert work is not None
    assert work.wait() is True
    assert work.wait(timedelta(seconds=1)) is True
    assert work.is_success()
    assert work.exception() is None
    future = work.get_future()
    assert future.done()
    assert normalize(future.value()) == normalize([sample()])
    assert future.value()[0] is tensor


def test_async_barrier_waits_with_a_timeout(local_group: None) -> None:
    # torch's own benchmarking waits on an async barrier with a finite timeout.
    work = dist.barrier(async_op=True)

    assert work is not None
    assert work.wait(timedelta(seconds=1)) is True
    assert work.get_future().value() == []


def test_backend_work_reports_completion(local_group: None) -> None:
    tensor = sample()

    work = local_backend().allreduce([tensor], AllreduceOptions())

    assert work.is_completed()
    assert work.is_success()
    assert work.exception() is None
    assert work.result() == [tensor]
    assert work.get_future().value() == [tensor]


@pytest.mark.xfail(
    reason="torch 2.15's PyWorkHolder, which wraps a Python backend's work, forwards "
    "only wait() and get_future(); is_completed() falls back to the base class",
)
def test_handle_from_torch_reports_completion(local_group: None) -> None:
    work = dist.all_reduce(sample(), async_op=True)

    assert work is not None
    assert work.is_completed()


def test_backend_identity_and_options(local_group: None) -> None:
    group = dist.group.WORLD
    assert group is not None
    backend = group._get_backend(torch.device("cpu"))

    assert dist.get_backend() == LOCAL_BACKEND
    assert group._get_backend(torch.device("cuda")) is backend
    assert backend.name() == LOCAL_BACKEND
    assert backend.supports_coalescing
    assert not backend.supports_splitting
    assert not backend.supports_shrinking
    assert not backend.supports_reconfigure
    assert not backend.supports_window
    assert not backend._supports_time_estimate
    assert not group.supports_reconfigure
    assert backend.options.backend == LOCAL_BACKEND
    backend.set_timeout(timedelta(seconds=3))
    assert backend.options._timeout == timedelta(seconds=3)


def test_timeout_reaches_the_backend_options() -> None:
    start(LOCAL_BACKEND, timeout=timedelta(seconds=7))
    try:
        group = dist.group.WORLD
        assert group is not None
        backend = group._get_backend(torch.device("cpu"))
        assert backend.options._timeout == timedelta(seconds=7)
    finally:
        dist.destroy_process_group()


def test_bound_device_and_sub_groups() -> None:
    # A bound device makes torch ask the backend whether it can split (it cannot).
    start(LOCAL_BACKEND, device_id=torch.device("cpu", 0))
    try:
        sub = dist.new_group([0])
        assert isinstance(sub, dist.ProcessGroup)
        tensor = sample()
        dist.all_reduce(tensor, group=sub)
        dist.barrier()
        dist.barrier(group=sub)
        assert torch.equal(tensor, sample())
        assert dist.get_backend(sub) == LOCAL_BACKEND
    finally:
        dist.destroy_process_group()


def test_barrier_options_without_a_device(local_group: None) -> None:
    group = dist.group.WORLD
    assert group is not None

    work = group.barrier(BarrierOptions())

    assert work.wait()


# ---------------------------------------------------------------- registration


def test_registration_is_idempotent() -> None:
    before = dict(dist.Backend.default_device_backend_map)

    first = register_local_backend()
    plugin = dist.Backend._plugins[LOCAL_BACKEND.upper()]
    second = register_local_backend()

    assert first == second == LOCAL_BACKEND
    assert dist.Backend._plugins[LOCAL_BACKEND.upper()] is plugin
    assert dist.Backend(LOCAL_BACKEND) == LOCAL_BACKEND
    assert dist.is_backend_available(LOCAL_BACKEND)
    # Registering never makes the backend a default for any device.
    assert dist.Backend.default_device_backend_map == before


def _listening_inodes() -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        path = Path(table)
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                inodes.add(fields[9])
    return inodes


def _own_socket_inodes() -> set[str]:
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = str(fd.readlink())
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _own_listening_sockets() -> set[str]:
    return _own_socket_inodes() & _listening_inodes()


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")
def test_no_listening_socket() -> None:
    before = _own_listening_sockets()
    start(GLOO)
    try:
        # The check sees gloo's listening socket, so it would see ours.
        assert _own_listening_sockets() - before
    finally:
        dist.destroy_process_group()

    before = _own_listening_sockets()
    start(LOCAL_BACKEND)
    try:
        dist.all_reduce(sample())
        dist.barrier()
        assert _own_listening_sockets() - before == set()
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------- DDP


def _ddp_step(device: torch.device) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to(
        device
    )
    reference = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)
    ).to(device)
    reference.load_state_dict(model.state_dict())
    ddp = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    inputs = torch.randn(5, 4, device=device)

    ddp(inputs).square().sum().backward()
    reference(inputs).square().sum().backward()

    for param, ref in zip(model.parameters(), reference.parameters(), strict=True):
        assert param.grad is not None
        assert ref.grad is not None
        assert torch.equal(param.grad, ref.grad)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    optimizer.step()
    optimizer.zero_grad()
    ddp(inputs).sum().backward()


def test_ddp_gradients_equal_plain_gradients(local_group: None) -> None:
    _ddp_step(torch.device("cpu"))


# ---------------------------------------------------------------- CUDA


@pytest.mark.gpu
@needs_cuda
def test_cuda_collectives_and_futures(local_group: None) -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    tensor = sample().to(device)
    dist.all_reduce(tensor, op=premul_sum(2.0))
    assert torch.equal(tensor.cpu(), sample() * 2)

    output = torch.empty(1, 2, 3, device=device)
    work = dist.all_gather_single(output, sample().to(device), async_op=True)
    assert work is not None
    assert work.wait()
    value = work.get_future().wait()
    assert value[0] is output
    assert torch.equal(output.cpu(), sample().unsqueeze(0))

    dist.barrier(device_ids=[device.index])


@pytest.mark.gpu
@needs_cuda
def test_cuda_ddp_with_a_bound_device() -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    start(LOCAL_BACKEND, device_id=device)
    try:
        _ddp_step(device)
        dist.barrier()
        sub = dist.new_group([0])
        assert isinstance(sub, dist.ProcessGroup)
        tensor = torch.ones(3, device=device)
        dist.all_reduce(tensor, group=sub)
        assert torch.equal(tensor.cpu(), torch.ones(3))
    finally:
        dist.destroy_process_group()
