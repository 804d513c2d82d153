"""Verify every collective against values each rank computes on its own.

Each rank's input is a deterministic function of its rank, so every rank can compute
the expected result of every collective locally, and a wrong result is caught on the
rank that received it. The per-rank verdicts are then gathered (as pickled bytes
moved by ``gather_uneven``, since ``all_gather_object`` needs numpy) so that rank 0
can name every rank whose result differed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from helios_collectives._barrier import barrier
from helios_collectives._gather import gather_into_tensor, gather_uneven
from helios_collectives._objects import gather_objects
from helios_collectives._reduce import all_reduce_tensors
from helios_collectives._safe_barrier import safe_barrier

__all__ = ["CHECKS", "CheckResult", "run_checks"]


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The verdict on one collective across all ranks.

    Attributes:
        name: The check's name, such as ``"all_reduce sum"``.
        passed: Whether every rank got the expected result.
        failures: For each failing rank, what went wrong.
    """

    name: str
    passed: bool
    failures: dict[int, str]


def _input(rank: int, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    count = 1
    for dim in shape:
        count *= dim
    base = torch.arange(count, dtype=torch.float32, device=device).reshape(shape)
    return base + 1000.0 * (rank + 1)


def _compare(got: torch.Tensor, want: torch.Tensor) -> str | None:
    if got.shape != want.shape:
        return f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    if got.device != want.device:
        return f"device {got.device}, expected {want.device}"
    if not torch.allclose(got.float().cpu(), want.float().cpu(), rtol=1e-5, atol=1e-5):
        error = (got.float().cpu() - want.float().cpu()).abs().max().item()
        return f"values differ (max abs error {error:.6g})"
    return None


_Outcome = tuple[torch.Tensor, torch.Tensor]


def _gather_concat(rank: int, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    got = gather_into_tensor(_input(rank, (4, 3), device), (n * 4, 3))
    want = torch.cat([_input(r, (4, 3), device) for r in range(n)])
    return got, want


def _gather_stacked(rank: int, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    got = gather_into_tensor(_input(rank, (4, 3), device), (n, 4, 3))
    want = torch.stack([_input(r, (4, 3), device) for r in range(n)])
    return got, want


def _gather_uneven(rank: int, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    result = gather_uneven(_input(rank, (rank + 1, 3), device))
    want = torch.cat([_input(r, (r + 1, 3), device) for r in range(n)])
    sizes = torch.tensor(list(result.sizes), dtype=torch.float32, device=device)
    want_sizes = torch.arange(1, n + 1, dtype=torch.float32, device=device)
    return torch.cat([result.tensor.flatten(), sizes]), torch.cat([want.flatten(), want_sizes])


def _reduce(
    op: dist.ReduceOp.RedOpType,
) -> Callable[[int, int, torch.device], tuple[torch.Tensor, torch.Tensor]]:
    def check(rank: int, n: int, device: torch.device) -> _Outcome:
        got = all_reduce_tensors(_input(rank, (5, 2), device), op=op)
        stack = torch.stack([_input(r, (5, 2), device) for r in range(n)])
        if op == dist.ReduceOp.SUM:
            want = stack.sum(0)
        elif op == dist.ReduceOp.AVG:
            want = stack.mean(0)
        else:
            want = stack.amax(0)
        return got, want

    return check


def _reduce_list(rank: int, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    def parts(r: int) -> list[torch.Tensor]:
        return [_input(r, (), device), _input(r, (2, 3), device), _input(r, (4,), device)]

    got = all_reduce_tensors(parts(rank))
    want = torch.stack([torch.cat([p.flatten() for p in parts(r)]) for r in range(n)]).sum(0)
    return got, want


def _reduce_view(rank: int, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    # A non-contiguous view: every other column. Nothing outside it may change.
    base = _input(rank, (4, 6), device)
    all_reduce_tensors(base[:, ::2])
    want = _input(rank, (4, 6), device)
    want[:, ::2] = torch.stack([_input(r, (4, 6), device)[:, ::2] for r in range(n)]).sum(0)
    return base, want


def _barriers(rank: int, n: int, device: torch.device) -> None:
    safe_barrier()
    barrier(timeout=timedelta(seconds=60))


CHECKS: dict[str, Callable[[int, int, torch.device], object]] = {
    "gather_into_tensor (concatenated)": _gather_concat,
    "gather_into_tensor (stacked)": _gather_stacked,
    "gather_uneven": _gather_uneven,
    "all_reduce_tensors sum": _reduce(dist.ReduceOp.SUM),
    "all_reduce_tensors avg": _reduce(dist.ReduceOp.AVG),
    "all_reduce_tensors max": _reduce(dist.ReduceOp.MAX),
    "all_reduce_tensors list (0-d and n-d)": _reduce_list,
    "all_reduce_tensors non-contiguous view": _reduce_view,
    "barriers": _barriers,
}


def run_checks(device: torch.device) -> list[CheckResult]:
    """Run every check on every rank and gather the verdicts.

    Every rank must call this. A check that raises counts as failed on that rank.

    Args:
        device: The device that holds the tensors.

    Returns:
        One result per check, the same on every rank.
    """
    rank, n = dist.get_rank(), dist.get_world_size()
    local: dict[str, str | None] = {}
    for name, check in CHECKS.items():
        try:
            outcome = check(rank, n, device)
        except Exception as exc:
            local[name] = f"raised {type(exc).__name__}: {exc}"
            continue
        if outcome is None:
            local[name] = None
            continue
        assert isinstance(outcome, tuple)
        got, want = outcome
        local[name] = _compare(got, want)
    everyone: list[dict[str, str | None] | None] = list(gather_objects(local))
    results = []
    for name in CHECKS:
        failures = {
            r: (verdicts or {}).get(name) or "no verdict"
            for r, verdicts in enumerate(everyone)
            if verdicts is None or verdicts.get(name) is not None
        }
        results.append(CheckResult(name=name, passed=not failures, failures=failures))
    return results
