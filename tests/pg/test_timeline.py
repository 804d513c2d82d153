"""Ranks that reach the rendezvous late: init's warning, from rank 0, and its words."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helios_pg._setup._timeline import Arrival, late_start
from tests.support.procs import results, run_hand_started

WORKER = Path(__file__).parent / "workers" / "late_start.py"
HOSTS = ["node1"] * 4 + ["node2"] * 4
MOMENTS = (
    "process_started",
    "helios_imported",
    "torch_loaded",
    "init_called",
    "store_reached",
    "group_formed",
)


def on_time(rank: int) -> Arrival:
    return Arrival(100.0 + rank * 0.01, 103.0, 103.2, 104.5, 105.0, 105.5 + rank * 0.01)


def test_ranks_on_time_are_not_named() -> None:
    assert late_start([on_time(rank) for rank in range(8)], HOSTS) is None


@pytest.mark.parametrize(
    ("late", "step"),
    [
        (Arrival(138.0, 141.0, 141.2, 142.5, 143.0, 143.5), "their processes started 38 s after"),
        (Arrival(100.0, 138.0, 138.2, 139.5, 140.0, 140.5), "35 s more than the others from their"),
        (
            Arrival(100.0, 103.0, 103.2, 139.5, 140.0, 140.5),
            "35 s more than the others loading torch",
        ),
        (
            Arrival(100.0, 103.0, 138.2, 139.5, 140.0, 140.5),
            "35 s more than the others in the program",
        ),
        (
            Arrival(100.0, 103.0, 103.2, 104.5, 140.0, 140.5),
            "35 s more than the others in the program",
        ),
        (
            Arrival(100.0, 103.0, 103.2, 104.5, 105.0, 140.5),
            "35 s more than the others from calling",
        ),
    ],
    ids=["started", "imports", "torch", "before-asking", "before-init", "network"],
)
def test_the_late_ranks_are_named_with_their_node_and_the_step_that_took_the_time(
    late: Arrival, step: str
) -> None:
    arrivals = [on_time(rank) for rank in range(6)] + [late, late]

    message = late_start(arrivals, HOSTS)

    assert message is not None
    assert message.startswith("ranks 6-7 (node2) reached the rendezvous store 3"), message
    assert step in message, message


def test_half_the_job_arriving_late_is_named_too() -> None:
    late = Arrival(138.0, 141.0, 141.2, 142.5, 143.0, 143.5)
    message = late_start([on_time(rank) for rank in range(4)] + [late] * 4, HOSTS)
    assert message is not None
    assert message.startswith("ranks 4-7 (node2) reached the rendezvous store 38 s after"), message


def test_a_late_rank_zero_is_late_itself_though_the_others_waited_for_it() -> None:
    # Every other rank counts in only once rank 0 opened the store: just after it.
    host = Arrival(138.0, 141.0, 141.2, 142.5, 143.0, 143.5)
    waiting = [Arrival(100.0, 103.0, 103.2, 104.5, 105.0, 143.6) for _ in range(7)]
    message = late_start([host, *waiting], HOSTS)
    assert message is not None
    assert message.startswith("rank 0 (node1) reached the rendezvous store 38 s after"), message
    assert "their processes started 38 s after the others'" in message, message


def test_ranks_that_arrive_one_after_another_are_not_late() -> None:
    steady = [Arrival(100.0, 103.0, 103.2, 104.5, 105.0, 105.5 + 5 * rank) for rank in range(8)]
    assert late_start(steady, HOSTS) is None  # 35 s in all, never 10 s without a rank


def test_a_rank_that_sent_no_moments_is_left_out() -> None:
    late = Arrival(100.0, 103.0, 103.2, 104.5, 105.0, 150.0)
    message = late_start([on_time(0), None, late], ["node1", "node2", "node3"])
    assert message is not None
    assert message.startswith("rank 2 (node3) reached the rendezvous store 44 s after"), message
    assert late_start([None, None, late], HOSTS[:3]) is None  # one rank: nothing to compare
    assert Arrival.decode("") is None
    assert Arrival.decode("1.0,2.0,3.0,4.0") is None  # four moments: not this helios's
    assert Arrival.decode(",1.0,2.0,3.0,4.0,5.0") == Arrival(None, 1.0, 2.0, 3.0, 4.0, 5.0)


@pytest.mark.parametrize(
    "late_by",
    [pytest.param(0.0, id="on-time"), pytest.param(30.0, id="late", marks=pytest.mark.long)],
)
def test_rank_zero_warns_once_of_a_rank_that_called_init_late(late_by: float) -> None:
    env = {"HELIOS_TEST_LATE_RANK": "2", "HELIOS_TEST_LATE_BY": str(late_by)}
    finished = run_hand_started(WORKER, 3, extra_env=env, limit=120)
    found = {entry["rank"]: entry for entry in results(finished)}
    reports = {rank: entry["warnings"] for rank, entry in found.items()}
    detail = "\n".join(item.describe() for item in finished)

    assert sorted(reports) == [0, 1, 2], detail
    for entry in found.values():  # each rank's own moments, in the order they happen
        moments = entry["moments"]
        order = [moments[name] for name in MOMENTS]
        assert None not in order, moments
        assert order == sorted(order), moments
    assert reports[1] == reports[2] == [], detail
    if not late_by:
        assert reports[0] == [], detail
        return
    (warning,) = reports[0]
    assert warning.startswith(f"rank 2 ({socket.gethostname()}) reached the rendezvous store"), (
        warning
    )
    assert "s more than the others in the program's own work before calling" in warning, warning


def test_any_first_use_of_inits_module_notes_torchs_load() -> None:
    # helios_pg.StartupMoments lives beside init: asking for it loads torch as init does.
    code = (
        "import helios_pg, sys\n"
        "assert 'torch' not in sys.modules\n"
        "helios_pg.StartupMoments\n"
        "assert 'torch' in sys.modules\n"
        "print(helios_pg._SETUP_ASKED is not None, helios_pg._SETUP_LOADED is not None)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"], done.stdout
