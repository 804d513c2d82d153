"""Faults on real gloo ranks: late ranks at a barrier, a rank that skips a collective,
and a peer that dies. The others raise within the group timeout; nothing hangs.
"""

from __future__ import annotations

import pytest

from tests.collectives.conftest import CPU_RUN_ENV, GROUP_TIMEOUT, WORKERS, Run
from tests.support.procs import Finished, results, run_hand_started

MARGIN = 3.0
"""Seconds allowed beyond a timeout for the error to surface."""


def test_barrier_passes_when_every_rank_arrives(property_run: Run) -> None:
    for occurrence in range(3):
        outcomes = property_run.scenario("barrier_all", occurrence)
        assert all(o["ok"] for o in outcomes), outcomes


def test_safe_barrier_passes_with_and_without_validation(property_run: Run) -> None:
    outcomes = property_run.scenario("safe_barriers")
    assert all(o["ok"] for o in outcomes), outcomes


def test_barrier_names_the_rank_that_did_not_arrive(property_run: Run) -> None:
    *waited, late = property_run.scenario("barrier_late_last_rank")
    for outcome in waited:
        assert outcome["error"] == "BarrierTimeoutError", outcome
        assert outcome["is_runtime_error"]
        assert outcome["missing_ranks"] == [2]
        assert "rank 2 of 3 did not arrive within 0.5 s" in outcome["message"]
        assert outcome["elapsed"] < 0.5 + MARGIN
    assert late["ok"], late


def test_barrier_names_every_missing_rank(property_run: Run) -> None:
    first, *_ = property_run.scenario("barrier_late_all_but_rank_zero")
    assert first["error"] == "BarrierTimeoutError", first
    assert first["missing_ranks"] == [1, 2]
    assert "ranks 1, 2 of 3 did not arrive" in first["message"]


def test_a_rank_that_skips_a_collective_makes_the_others_raise_within_the_timeout(
    property_run: Run,
) -> None:
    *waited, skipper = property_run.scenario("skip_on_last_rank")
    for outcome in waited:
        assert not outcome["ok"], outcome
        assert outcome["is_runtime_error"], outcome
        assert outcome["elapsed"] < GROUP_TIMEOUT + MARGIN, outcome
    assert skipper["ok"], skipper


@pytest.fixture(scope="module")
def dead_peer_run() -> list[Finished]:
    """Two ranks; rank 1 exits after a first barrier, rank 0 carries on."""
    return run_hand_started(
        WORKERS / "dead_peer.py",
        2,
        extra_env=CPU_RUN_ENV,
        limit=60,
    )


def _step(finished: list[Finished], step: str) -> dict[str, object]:
    found = [r for r in results(finished[0]) if r["step"] == step]
    assert len(found) == 1, "\n".join(f.describe() for f in finished)
    return found[0]


def test_a_dead_peer_exits_where_the_test_kills_it(dead_peer_run: list[Finished]) -> None:
    survivor, dead = dead_peer_run
    assert dead.returncode == 17, dead.describe()
    assert survivor.returncode == 0, survivor.describe()


def test_barrier_names_a_dead_peer(dead_peer_run: list[Finished]) -> None:
    outcome = _step(dead_peer_run, "barrier")
    assert outcome["error"] == "BarrierTimeoutError"
    assert outcome["missing_ranks"] == [1]


@pytest.mark.parametrize("step", ["all_reduce_tensors", "gather_into_tensor"])
def test_a_dead_peer_makes_the_collective_raise_within_the_timeout(
    dead_peer_run: list[Finished], step: str
) -> None:
    outcome = _step(dead_peer_run, step)
    assert outcome["ok"] is False, outcome
    assert outcome["is_runtime_error"] is True, outcome
    elapsed = outcome["elapsed"]
    assert isinstance(elapsed, float)
    assert elapsed < GROUP_TIMEOUT + MARGIN, outcome
