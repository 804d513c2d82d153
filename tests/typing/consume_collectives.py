"""A downstream module that uses every public name of helios_collectives; read by mypy only.

Nothing here runs: pytest does not collect this file and ``consume`` is never called.
mypy --strict checks that the public API has the exact types downstream code relies
on, from the installed package's ``py.typed`` inline annotations.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from typing_extensions import assert_type  # typing's from Python 3.11 on

import helios_collectives
from helios_collectives import (
    VALIDATE_ENV_VAR,
    BarrierError,
    BarrierTimeoutError,
    CollectiveArgumentError,
    CollectiveMismatchError,
    ProcessGroupNotInitializedError,
    UnevenGather,
    ValidationSettingError,
    all_reduce_dict,
    all_reduce_tensors,
    barrier,
    broadcast_object,
    gather_into_tensor,
    gather_objects,
    gather_uneven,
    safe_barrier,
)


def consume(tensor: torch.Tensor, group: dist.ProcessGroup) -> None:
    """Call every public function the way a user's program would."""
    assert_type(gather_into_tensor(tensor, (2, 3)), torch.Tensor)
    assert_type(gather_into_tensor(tensor, torch.Size([6]), group=group), torch.Tensor)
    assert_type(gather_into_tensor(tensor, [6], validate=True), torch.Tensor)

    assert_type(all_reduce_tensors(tensor), torch.Tensor)
    assert_type(all_reduce_tensors([tensor, tensor], op=dist.ReduceOp.AVG), torch.Tensor)
    assert_type(all_reduce_tensors((tensor,), group=group, validate=None), torch.Tensor)

    result = gather_uneven(tensor, group=group)
    assert_type(result, UnevenGather)
    assert_type(result.tensor, torch.Tensor)
    assert_type(result.sizes, tuple[int, ...])
    assert_type(result.split(), tuple[torch.Tensor, ...])

    assert_type(broadcast_object({"lr": 0.1}), dict[str, float])
    config = {"lr": 0.1} if group.rank() == 0 else None
    assert_type(broadcast_object(config, src=0, group=group), dict[str, float])
    assert_type(gather_objects(3), list[int])
    assert_type(gather_objects("x", group=group), list[str])
    assert_type(all_reduce_dict({"loss": tensor, "n": 3}), dict[str, torch.Tensor])
    assert_type(
        all_reduce_dict({"a": 1.0}, op=dist.ReduceOp.AVG, group=group), dict[str, torch.Tensor]
    )

    assert_type(safe_barrier(), None)
    assert_type(safe_barrier(validate=False, group=group), None)
    assert_type(safe_barrier(timeout=2.5, device_ids=[0]), None)
    assert_type(safe_barrier(timeout=timedelta(seconds=2)), None)
    assert_type(barrier(30.0), None)
    assert_type(barrier(timeout=timedelta(seconds=5), group=group), None)

    assert_type(VALIDATE_ENV_VAR, str)

    try:
        barrier(1)
    except BarrierTimeoutError as error:
        assert_type(error.missing_ranks, tuple[int, ...])
        assert_type(error.timeout, timedelta)
        barrier_error: BarrierError = error
        runtime_error: RuntimeError = barrier_error
        print(runtime_error)
    try:
        all_reduce_tensors([tensor], validate=True)
    except CollectiveMismatchError as error:
        assert_type(error.operation, str)
        assert_type(error.disagreeing_ranks, tuple[int, ...])
        assert_type(error.differences, dict[str, dict[str, tuple[int, ...]]])
        value_error: ValueError = error
        print(value_error)
    except CollectiveArgumentError as error:
        argument_error: ValueError = error
        print(argument_error)
    except ValidationSettingError as error:
        assert_type(error.value, str)
        setting_error: ValueError = error
        print(setting_error)
    except ProcessGroupNotInitializedError as error:
        not_initialized: RuntimeError = error
        print(not_initialized)

    assert_type(helios_collectives.__all__, list[str])
    assert_type(helios_collectives.__version__, str)


def misuse(tensor: torch.Tensor, result: UnevenGather) -> None:
    """Mistakes the types must reject; strict mode fails if an ignore goes unused."""
    result.sizes = (1,)  # type: ignore[misc]
    gather_into_tensor(tensor, "6")  # type: ignore[arg-type]
    gather_into_tensor(tensor, (6,), True)  # type: ignore[call-arg, arg-type]
    all_reduce_tensors(3.0)  # type: ignore[arg-type]
    # A misspelt keyword is a type error: the collectives take typed keywords.
    all_reduce_tensors(tensor, opp=dist.ReduceOp.MAX)  # type: ignore[call-arg]
    safe_barrier(timout=1.0)  # type: ignore[call-arg]
    all_reduce_dict({1: tensor})  # type: ignore[dict-item]
    all_reduce_dict({"a": "high"})  # type: ignore[dict-item]
    barrier("5")  # type: ignore[arg-type]
    safe_barrier(validate="yes")  # type: ignore[arg-type]
