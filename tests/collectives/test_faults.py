"""Faults on real gloo ranks: late ranks at a barrier, a rank that skips a collective,
and a peer that dies. The others raise within the group timeout; nothing hangs.

Late and skipping ranks run on ranks of helios-pg's pytest plugin; the dead peers are
processes of their own (tests/support/groups.py), which exit (``os._exit(1)``) after a
first barrier, before the operation.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

from helios_collectives import BarrierTimeoutError, all_reduce_tensors, barrier, safe_barrier
from helios_env import DistributedInfo
from helios_pg._reports._peer import is_peer_failure
from tests.collectives.conftest import CPU_RUN_ENV, GROUP_TIMEOUT
from tests.collectives.on_ranks import barrier_late, tell, wait_until_told
from tests.support.groups import run_scenarios
from tests.support.procs import base_env, results

MARGIN = 3.0
"""Seconds allowed beyond a timeout for the error to surface."""
WORLD = 3
SKIP_GROUP_TIMEOUT = 2.0
"""The group timeout that a skipped collective must hit, in seconds."""


@pytest.mark.ranks(WORLD, timeout=60)
def test_barrier_passes_when_every_rank_arrives() -> None:
    for _ in range(3):
        barrier(30.0)


@pytest.mark.ranks(WORLD, timeout=60)
def test_safe_barrier_passes_with_and_without_validation() -> None:
    safe_barrier()
    safe_barrier(validate=True)


@pytest.mark.ranks(WORLD, timeout=60)
def test_barrier_names_the_rank_that_did_not_arrive(dist_info: DistributedInfo) -> None:
    if dist_info.rank == WORLD - 1:
        barrier_late(dist_info.rank, late=[WORLD - 1])  # arrives after the others left
    else:
        start = time.monotonic()
        with pytest.raises(BarrierTimeoutError) as raised:
            barrier_late(dist_info.rank, late=[WORLD - 1])
        assert time.monotonic() - start < 0.5 + MARGIN
        assert isinstance(raised.value, RuntimeError)
        assert list(raised.value.missing_ranks) == [2]
        assert is_peer_failure(raised.value)  # the report names rank 2, not this rank
        assert "rank 2 of 3 did not arrive within 0.5 s" in str(raised.value)
    barrier(30.0)  # a barrier after a timed-out one still meets


@pytest.mark.ranks(WORLD, timeout=60)
def test_barrier_names_every_missing_rank(dist_info: DistributedInfo) -> None:
    if dist_info.rank != 0:
        barrier_late(dist_info.rank, late=[1, 2])  # rank 0 gave up before they came: pass
    else:
        with pytest.raises(BarrierTimeoutError) as raised:
            barrier_late(dist_info.rank, late=[1, 2])
        assert list(raised.value.missing_ranks) == [1, 2]
        assert "ranks 1, 2 of 3 did not arrive" in str(raised.value)
    barrier(30.0)  # a barrier after a timed-out one still meets


@pytest.mark.ranks(WORLD, timeout=60, group_timeout=SKIP_GROUP_TIMEOUT)
def test_a_rank_that_skips_a_collective_makes_the_others_raise_within_the_timeout(
    dist_info: DistributedInfo,
) -> None:
    if dist_info.rank == WORLD - 1:
        # Never reaches the all-reduce, and stays alive until the others have raised:
        # they must raise at their group timeout, not when this rank's connections close.
        wait_until_told("skipped", range(WORLD - 1))
        return
    start = time.monotonic()
    try:
        with pytest.raises(RuntimeError):
            all_reduce_tensors(torch.ones(3))
    finally:
        tell("skipped")
    assert time.monotonic() - start < SKIP_GROUP_TIMEOUT + MARGIN


DEAD_PEER_OPERATIONS = ("barrier", "all_reduce_tensors", "gather_into_tensor")
DEAD_PEER_BARRIER_TIMEOUT = 2.0


@pytest.fixture(scope="module")
def dead_peer_run() -> list[dict[str, Any]]:
    """Two ranks per operation; rank 1 exits after a first barrier, then rank 0 calls it."""
    scenarios = [
        {"id": op, "kind": "death", "op": op, "when": "before", "mode": "exit", "dying": 1}
        for op in DEAD_PEER_OPERATIONS
    ]
    finished = run_scenarios(
        scenarios,
        env=base_env(CPU_RUN_ENV),
        world=2,
        timeout=GROUP_TIMEOUT,
        barrier_timeout=DEAD_PEER_BARRIER_TIMEOUT,
        scenario_limit=GROUP_TIMEOUT + 20,
        parallel=len(scenarios),
        limit=60,
    )
    assert finished.returncode == 0, finished.describe()
    found = results(finished)
    assert not [r for r in found if r["role"] == "crashed"], finished.describe()
    return found


def _reports(run: list[dict[str, Any]], op: str, role: str) -> list[dict[str, Any]]:
    return [r for r in run if r["scenario"] == op and r["role"] == role]


def _survivor_call(run: list[dict[str, Any]], op: str) -> dict[str, Any]:
    survivors = _reports(run, op, "survivor")
    assert [s["rank"] for s in survivors] == [0], run
    first: dict[str, Any] = survivors[0]["first"]
    return first


@pytest.mark.parametrize("op", DEAD_PEER_OPERATIONS)
def test_the_peer_dies_before_the_operation_and_the_survivor_exits_cleanly(
    dead_peer_run: list[dict[str, Any]], op: str
) -> None:
    # The tests below read the survivor's call: it met a peer that had already died.
    exits = {r["rank"]: r for r in _reports(dead_peer_run, op, "exit")}
    assert {rank: e["status"] for rank, e in exits.items()} == {0: 0, 1: 1}, exits
    assert [r["where"] for r in _reports(dead_peer_run, op, "dying")] == ["before the operation"]


def test_barrier_names_a_dead_peer(dead_peer_run: list[dict[str, Any]]) -> None:
    outcome = _survivor_call(dead_peer_run, "barrier")
    assert outcome["error"] == "BarrierTimeoutError", outcome
    assert outcome["missing_ranks"] == [1]


@pytest.mark.parametrize("op", ["all_reduce_tensors", "gather_into_tensor"])
def test_a_dead_peer_makes_the_collective_raise_within_the_timeout(
    dead_peer_run: list[dict[str, Any]], op: str
) -> None:
    outcome = _survivor_call(dead_peer_run, op)
    assert outcome["raised"] is True, outcome
    assert outcome["is_runtime_error"] is True, outcome
    assert outcome["raised_at"] - outcome["entered_at"] < GROUP_TIMEOUT + MARGIN, outcome
