"""Run a list of cases on every rank and report each outcome.

Usage: ``python run_cases.py CASES.json`` with RANK/WORLD_SIZE/MASTER_* set. Each case
is a dict with a ``kind``; the worker reports one ``RESULT`` line per case and rank:
the result tensor, or the error it raised and how long that took. Cases run in
order, so every rank must get through each one (errors included) in step.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import helios_pg
from helios_collectives import (
    VALIDATE_ENV_VAR,
    BarrierTimeoutError,
    CollectiveMismatchError,
    _validation,
    all_reduce_tensors,
    barrier,
    gather_into_tensor,
    gather_uneven,
    safe_barrier,
)
from tests.collectives.cases import Case, digest, make_input, make_list
from tests.support.worker import group_timeout, report

Outcome = dict[str, Any]


def _op(name: str) -> Any:
    return getattr(dist.ReduceOp, name)


def _device() -> torch.device:
    """Where inputs live: the CPU, or this rank's GPU when HELIOS_TEST_DEVICE=cuda."""
    if os.environ.get("HELIOS_TEST_DEVICE", "cpu") == "cuda":
        return helios_pg.local_device()
    return torch.device("cpu")


def _result(out: torch.Tensor, **checks: bool) -> Outcome:
    """The digest of ``out`` and the names of the checks that failed (if any)."""
    outcome: Outcome = {"digest": digest(out)}
    failed = sorted(name for name, passed in checks.items() if not passed)
    if failed:
        outcome["failed_checks"] = failed
    return outcome


def run_gather(case: Case, rank: int) -> Outcome:
    inputs = make_input(case["shape"], case["dtype"], case["view"], case["seed"], rank, _device())
    before = inputs.base.clone()
    out = gather_into_tensor(inputs.view, tuple(case["size"]), validate=case["validate"])
    return _result(out, input_unchanged=torch.equal(inputs.base, before))


def run_reduce(case: Case, rank: int) -> Outcome:
    inputs = make_input(case["shape"], case["dtype"], case["view"], case["seed"], rank, _device())
    before = inputs.base.clone()
    out = all_reduce_tensors(inputs.view, op=_op(case["op"]), validate=case["validate"])
    return _result(
        out,
        same_object=out is inputs.view,
        view_holds_result=torch.equal(inputs.view, out),
        outside_unchanged=torch.equal(inputs.base[inputs.outside], before[inputs.outside]),
    )


def run_reduce_list(case: Case, rank: int) -> Outcome:
    tensors = make_list(case["shapes"], case["dtype"], case["seed"], rank, _device())
    before = [t.clone() for t in tensors]
    out = all_reduce_tensors(tensors, op=_op(case["op"]), validate=case["validate"])
    unchanged = all(torch.equal(t, b) for t, b in zip(tensors, before, strict=True))
    return _result(out, inputs_unchanged=unchanged)


def run_uneven(case: Case, rank: int) -> Outcome:
    shape = [case["firsts"][rank], *case["rest"]]
    inputs = make_input(shape, case["dtype"], case["view"], case["seed"], rank, _device())
    before = inputs.base.clone()
    result = gather_uneven(inputs.view)
    return {
        **_result(result.tensor, input_unchanged=torch.equal(inputs.base, before)),
        "sizes": list(result.sizes),
    }


def run_raw_view_reduce(case: Case, rank: int) -> Outcome:
    """The raw torch call on a view: what all_reduce_tensors protects against."""
    inputs = make_input(case["shape"], case["dtype"], case["view"], case["seed"], rank, _device())
    before = inputs.base.clone()
    dist.all_reduce(inputs.view)
    outside = torch.equal(inputs.base[inputs.outside], before[inputs.outside])
    return _result(inputs.view, outside_unchanged=outside)


# ---------------------------------------------------------------- scenarios
# Each takes (rank, world) and makes the calls one rank makes.


def reduce_dtype_mismatch(rank: int, world: int) -> Any:
    dtype = torch.int64 if rank == 1 else torch.float32
    return all_reduce_tensors(torch.ones(4, dtype=dtype), validate=True)


def reduce_shape_mismatch_env(rank: int, world: int) -> Any:
    shape = (3, 2) if rank == world - 1 else (2, 3)
    os.environ[VALIDATE_ENV_VAR] = "1"
    try:
        return all_reduce_tensors(torch.ones(shape))
    finally:
        del os.environ[VALIDATE_ENV_VAR]


def reduce_op_mismatch(rank: int, world: int) -> Any:
    op = dist.ReduceOp.MAX if rank == 1 else dist.ReduceOp.SUM
    return all_reduce_tensors(torch.ones(4), op=op, validate=True)


def reduce_list_composition_mismatch(rank: int, world: int) -> Any:
    sizes = (2, 3) if rank == 0 else (3, 2)
    return all_reduce_tensors([torch.ones(n) for n in sizes], validate=True)


def reduce_empty_list_on_one_rank(rank: int, world: int) -> Any:
    tensors = [] if rank == 1 else [torch.ones(2)]
    return all_reduce_tensors(tensors, validate=True)


def reduce_empty_list_everywhere(rank: int, world: int) -> Any:
    return all_reduce_tensors([], validate=True)


def gather_numel_mismatch(rank: int, world: int) -> Any:
    n = 4 if rank == 1 else 3
    return gather_into_tensor(torch.ones(n), (world * n,), validate=True)


def gather_bad_size_everywhere(rank: int, world: int) -> Any:
    return gather_into_tensor(torch.ones(3), (3 * world + 1,), validate=True)


def operation_mismatch(rank: int, world: int) -> Any:
    if rank == 0:
        return all_reduce_tensors(torch.ones(4), validate=True)
    return gather_into_tensor(torch.ones(4), (4 * world,), validate=True)


def sequence_mismatch(rank: int, world: int) -> Any:
    # Rank 0 counts one validated call more than the others, as when it made a
    # validated call the others skipped; the next validated call notices.
    world_group = dist.group.WORLD
    assert world_group is not None
    if rank == 0:
        _validation._CALLS[world_group] = _validation._CALLS.get(world_group, 0) + 1
    try:
        return all_reduce_tensors(torch.ones(2), validate=True)
    finally:
        # Bring the call numbers back in step for the scenarios that follow.
        if rank != 0:
            _validation._CALLS[world_group] = _validation._CALLS.get(world_group, 0) + 1


def uneven_dtype_mismatch(rank: int, world: int) -> Any:
    dtype = torch.float64 if rank == 1 else torch.float32
    return gather_uneven(torch.ones(rank + 1, 2, dtype=dtype))


def uneven_rest_mismatch(rank: int, world: int) -> Any:
    rest = 3 if rank == world - 1 else 2
    return gather_uneven(torch.ones(rank + 1, rest))


def uneven_zero_dim_everywhere(rank: int, world: int) -> Any:
    return gather_uneven(torch.tensor(1.0))


def barrier_all(rank: int, world: int) -> Any:
    barrier(30.0)


def safe_barriers(rank: int, world: int) -> Any:
    safe_barrier()
    safe_barrier(validate=True)


def barrier_late_last_rank(rank: int, world: int) -> Any:
    if rank == world - 1:
        time.sleep(2.0)
    barrier(0.5)


def barrier_late_all_but_rank_zero(rank: int, world: int) -> Any:
    if rank != 0:
        time.sleep(2.0)
    barrier(0.5)


def skip_on_last_rank(rank: int, world: int) -> Any:
    """The last rank never reaches the all-reduce; it waits past the group timeout."""
    if rank == world - 1:
        time.sleep(group_timeout().total_seconds() + 1.5)
        return None
    return all_reduce_tensors(torch.ones(3))


SCENARIOS: dict[str, Callable[[int, int], Any]] = {
    f.__name__: f
    for f in (
        reduce_dtype_mismatch,
        reduce_shape_mismatch_env,
        reduce_op_mismatch,
        reduce_list_composition_mismatch,
        reduce_empty_list_on_one_rank,
        reduce_empty_list_everywhere,
        gather_numel_mismatch,
        gather_bad_size_everywhere,
        operation_mismatch,
        sequence_mismatch,
        uneven_dtype_mismatch,
        uneven_rest_mismatch,
        uneven_zero_dim_everywhere,
        barrier_all,
        safe_barriers,
        barrier_late_last_rank,
        barrier_late_all_but_rank_zero,
        skip_on_last_rank,
    )
}

RUNNERS: dict[str, Callable[[Case, int], Outcome]] = {
    "gather": run_gather,
    "reduce": run_reduce,
    "reduce_list": run_reduce_list,
    "uneven": run_uneven,
    "raw_view_reduce": run_raw_view_reduce,
}


def describe_error(exc: BaseException) -> Outcome:
    outcome: Outcome = {
        "error": type(exc).__name__,
        "message": str(exc)[:1500],
        "is_value_error": isinstance(exc, ValueError),
        "is_runtime_error": isinstance(exc, RuntimeError),
    }
    if isinstance(exc, CollectiveMismatchError):
        outcome["disagreeing_ranks"] = list(exc.disagreeing_ranks)
        outcome["fields"] = sorted(exc.differences)
    if isinstance(exc, BarrierTimeoutError):
        outcome["missing_ranks"] = list(exc.missing_ranks)
    return outcome


def run_one(case: Case, rank: int, world: int) -> Outcome:
    start = time.monotonic()
    try:
        if case["kind"] == "scenario":
            SCENARIOS[case["name"]](rank, world)
            outcome: Outcome = {"ok": True}
        else:
            outcome = {"ok": True, **RUNNERS[case["kind"]](case, rank)}
    except Exception as exc:
        outcome = {"ok": False, **describe_error(exc)}
    outcome["elapsed"] = round(time.monotonic() - start, 3)
    return outcome


def main() -> int:
    warnings.simplefilter("error", FutureWarning)
    cases: list[Case] = json.loads(Path(sys.argv[1]).read_text())
    helios_pg.init(timeout=group_timeout())
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        for index, case in enumerate(cases):
            report(index=index, rank=rank, **run_one(case, rank, world))
    finally:
        helios_pg.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
