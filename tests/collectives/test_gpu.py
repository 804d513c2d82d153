"""The collectives on nccl with CUDA tensors; skipped without CUDA.

In this process at world size one (``helios_pg.init()`` picks nccl and binds
``cuda:0``), and on two GPUs as two ranks of helios-pg's pytest plugin.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist

import helios_pg
from helios_collectives import (
    all_reduce_tensors,
    barrier,
    gather_into_tensor,
    gather_uneven,
    safe_barrier,
)
from tests.collectives.cases import Case
from tests.collectives.conftest import GROUP_TIMEOUT
from tests.collectives.on_ranks import wrong_results
from tests.collectives.strategies import (
    draw_cases,
    explicit_cases,
    gather_cases,
    reduce_cases,
    reduce_list_cases,
    uneven_cases,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (nccl)"),
]


@pytest.fixture
def nccl_world_of_one() -> Iterator[torch.device]:
    helios_pg.init()
    try:
        assert dist.get_backend() == "nccl"
        yield helios_pg.local_device()
    finally:
        helios_pg.shutdown()


@pytest.mark.parametrize("stacked", [False, True])
def test_gather_into_tensor_on_nccl_returns_a_cuda_tensor(
    nccl_world_of_one: torch.device, stacked: bool
) -> None:
    tensor = torch.arange(6.0, device=nccl_world_of_one).reshape(2, 3)
    out = gather_into_tensor(tensor, (1, 2, 3) if stacked else (2, 3))
    assert out.device == nccl_world_of_one
    assert torch.equal(out.reshape(2, 3), tensor)


def test_all_reduce_tensors_on_nccl_uses_the_native_avg(
    nccl_world_of_one: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []
    real = dist.all_reduce

    def recording(tensor: torch.Tensor, **kwargs: Any) -> Any:
        seen.append(kwargs["op"])
        return real(tensor, **kwargs)

    monkeypatch.setattr(dist, "all_reduce", recording)
    out = all_reduce_tensors(
        torch.tensor([1.0, 3.0], device=nccl_world_of_one), op=dist.ReduceOp.AVG
    )
    assert seen == [dist.ReduceOp.AVG]
    assert out.tolist() == [1.0, 3.0]


def test_all_reduce_tensors_of_a_cuda_view_writes_nothing_outside_it(
    nccl_world_of_one: torch.device,
) -> None:
    base = torch.arange(12.0, device=nccl_world_of_one).reshape(3, 4)
    before = base.clone()
    view = base[:, 1]
    assert all_reduce_tensors(view) is view
    assert torch.equal(base, before)


def test_gather_uneven_and_validation_on_nccl(nccl_world_of_one: torch.device) -> None:
    result = gather_uneven(torch.ones(3, 2, device=nccl_world_of_one))
    assert result.sizes == (3,)
    assert result.tensor.device == nccl_world_of_one
    out = all_reduce_tensors([torch.ones(2, device=nccl_world_of_one)], validate=True)
    assert out.device == nccl_world_of_one


def test_safe_barrier_on_nccl_passes_the_current_device(
    nccl_world_of_one: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, Any]] = []
    real = dist.barrier

    def recording(**kwargs: Any) -> Any:
        seen.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(dist, "barrier", recording)
    safe_barrier()
    barrier(5.0)
    assert seen == [{"device_ids": [torch.cuda.current_device()]}]


@pytest.fixture(scope="module")
def gpu_cases() -> list[Case]:
    world = 2
    return [
        *explicit_cases(world),
        *draw_cases(gather_cases(world), 20),
        *draw_cases(reduce_cases(), 20),
        *draw_cases(reduce_list_cases(), 20),
        *draw_cases(uneven_cases(world), 20),
    ]


@pytest.mark.ranks(2, backend="nccl", timeout=120, group_timeout=GROUP_TIMEOUT)
def test_collectives_across_gpus_match_a_local_computation(gpu_cases: list[Case]) -> None:
    # Skipped by the plugin without two GPUs; each rank holds cuda:RANK.
    assert dist.get_backend() == "nccl"
    assert wrong_results(gpu_cases, device=helios_pg.local_device()) == []
