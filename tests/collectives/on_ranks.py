"""What the ranks of the collectives' ``ranks`` tests run, and how each checks itself.

Every rank runs the same cases in the same order and compares its own result with
:func:`tests.collectives.cases.expected`, computed right there from every rank's
input. A rank returns what it found wrong as plain strings, so a failing test shows
the case and the difference. pytest's warning filters (every warning an error) apply in
the ranks as in this process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from helios_collectives import (
    VALIDATE_ENV_VAR,
    _validation,
    all_reduce_tensors,
    barrier,
    gather_into_tensor,
    gather_uneven,
)
from tests.collectives.cases import Case, describe, expected, make_input, make_list

__all__ = ["SCENARIOS", "all_ranks", "wrong_results"]


def _op(name: str) -> Any:
    return getattr(dist.ReduceOp, name)


def _compare(case: Case, out: torch.Tensor, device: torch.device, **checks: bool) -> list[str]:
    want = expected(case, dist.get_world_size()).to(device)
    found = [f"{case}: check {name} failed" for name, passed in checks.items() if not passed]
    if describe(out) != describe(want):
        found.append(f"{case}: got {describe(out)!r:.300}, expected {describe(want)!r:.300}")
    return found


def _gather(case: Case, rank: int, device: torch.device) -> list[str]:
    inputs = make_input(case["shape"], case["dtype"], case["view"], case["seed"], rank, device)
    before = inputs.base.clone()
    out = gather_into_tensor(inputs.view, tuple(case["size"]), validate=case["validate"])
    return _compare(case, out, device, input_unchanged=torch.equal(inputs.base, before))


def _reduce(case: Case, rank: int, device: torch.device) -> list[str]:
    inputs = make_input(case["shape"], case["dtype"], case["view"], case["seed"], rank, device)
    before = inputs.base.clone()
    out = all_reduce_tensors(inputs.view, op=_op(case["op"]), validate=case["validate"])
    return _compare(
        case,
        out,
        device,
        same_object=out is inputs.view,
        view_holds_result=torch.equal(inputs.view, out),
        outside_unchanged=torch.equal(inputs.base[inputs.outside], before[inputs.outside]),
    )


def _reduce_list(case: Case, rank: int, device: torch.device) -> list[str]:
    tensors = make_list(case["shapes"], case["dtype"], case["seed"], rank, device)
    before = [t.clone() for t in tensors]
    out = all_reduce_tensors(tensors, op=_op(case["op"]), validate=case["validate"])
    unchanged = all(torch.equal(t, b) for t, b in zip(tensors, before, strict=True))
    return _compare(case, out, device, inputs_unchanged=unchanged)


def _uneven(case: Case, rank: int, device: torch.device) -> list[str]:
    shape = [case["firsts"][rank], *case["rest"]]
    inputs = make_input(shape, case["dtype"], case["view"], case["seed"], rank, device)
    before = inputs.base.clone()
    result = gather_uneven(inputs.view)
    return _compare(
        case,
        result.tensor,
        device,
        input_unchanged=torch.equal(inputs.base, before),
        sizes_are_each_ranks_first_dimension=list(result.sizes) == case["firsts"],
    )


_RUNNERS: dict[str, Callable[[Case, int, torch.device], list[str]]] = {
    "gather": _gather,
    "reduce": _reduce,
    "reduce_list": _reduce_list,
    "uneven": _uneven,
}


def wrong_results(cases: Iterable[Case], device: torch.device | None = None) -> list[str]:
    """Run ``cases`` in order on this rank; what was wrong with its results.

    Args:
        cases: ``gather``, ``reduce``, ``reduce_list`` or ``uneven`` cases, the same
            list on every rank.
        device: Where the inputs live; the CPU when omitted.

    Returns:
        One line per wrong result, failed check or error, naming the case.
    """
    where = device if device is not None else torch.device("cpu")
    rank = dist.get_rank()
    found: list[str] = []
    ran = 0
    for case in cases:
        ran += 1
        try:
            found += _RUNNERS[case["kind"]](case, rank, where)
        except Exception as exc:  # every error is a finding, named with its case
            found.append(f"{case}: raised {type(exc).__name__}: {exc}")
    assert ran, "no case to run"
    return found


def all_ranks(value: object) -> list[object]:
    """Gather a picklable value from every rank (an all-gather of objects).

    Args:
        value: This rank's value.

    Returns:
        Every rank's value, in rank order.
    """
    gathered: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


# --------------------------------------------------------------- scenarios
# Each takes (rank, world) and makes the calls one rank makes; ranks disagree on purpose.


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
    """Rank 0 counts one validated call more, as if it made one the others skipped."""
    world_group = dist.group.WORLD
    assert world_group is not None
    if rank == 0:
        _validation._CALLS[world_group] = _validation._CALLS.get(world_group, 0) + 1
    try:
        return all_reduce_tensors(torch.ones(2), validate=True)
    finally:
        # Bring the call numbers back in step for the calls that follow.
        if rank != 0:
            _validation._CALLS[world_group] = _validation._CALLS.get(world_group, 0) + 1


def last_batch_by_default(rank: int, world: int) -> Any:
    """The last batch of an epoch is smaller on the last rank; no validate argument."""
    return all_reduce_tensors(torch.ones(2 if rank == world - 1 else 3))


def dtype_by_default(rank: int, world: int) -> Any:
    return all_reduce_tensors(torch.ones(2, dtype=torch.float64 if rank == 1 else torch.float32))


def op_by_default(rank: int, world: int) -> Any:
    op = dist.ReduceOp.MAX if rank == 1 else dist.ReduceOp.SUM
    return all_reduce_tensors(torch.ones(4), op=op)


def gather_rows_by_default(rank: int, world: int) -> Any:
    """4 rows on rank 0, 2 on the others, each rank sizing the result by its own rows."""
    rows = 4 if rank == 0 else 2
    return gather_into_tensor(torch.ones(rows, 3), (world * rows, 3))


def uneven_dtype_mismatch(rank: int, world: int) -> Any:
    dtype = torch.float64 if rank == 1 else torch.float32
    return gather_uneven(torch.ones(rank + 1, 2, dtype=dtype))


def uneven_rest_mismatch(rank: int, world: int) -> Any:
    rest = 3 if rank == world - 1 else 2
    return gather_uneven(torch.ones(rank + 1, rest))


def uneven_zero_dim_everywhere(rank: int, world: int) -> Any:
    return gather_uneven(torch.tensor(1.0))


EVENT_LIMIT = timedelta(seconds=60)
"""How long a rank waits for the others' word through the store before it fails."""


def tell(event: str) -> None:
    """Say through the group's store that this rank got past ``event``."""
    store = dist.distributed_c10d._get_default_store()
    store.set(f"tests/{event}/{dist.get_rank()}", "1")


def wait_until_told(event: str, ranks: Iterable[int]) -> None:
    """Wait until every one of ``ranks`` said it got past ``event`` (see :func:`tell`)."""
    store = dist.distributed_c10d._get_default_store()
    store.wait([f"tests/{event}/{rank}" for rank in ranks], EVENT_LIMIT)


def barrier_late(rank: int, late: Iterable[int]) -> None:
    """Ranks in ``late`` reach ``barrier(0.5)`` once every other rank's has timed out."""
    late = set(late)
    # Each rank counts its own calls: all make the same calls, so the counts agree.
    store = dist.distributed_c10d._get_default_store()
    event = f"barrier_late/{store.add(f'tests/barrier_late/calls/{rank}', 1)}"
    if rank in late:
        wait_until_told(event, (r for r in range(dist.get_world_size()) if r not in late))
        barrier(0.5)
        return
    try:
        barrier(0.5)
    finally:
        tell(event)


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
        last_batch_by_default,
        dtype_by_default,
        op_by_default,
        gather_rows_by_default,
        uneven_dtype_mismatch,
        uneven_rest_mismatch,
        uneven_zero_dim_everywhere,
    )
}
