"""Faults on real gloo processes over 127.0.0.1: peers that never join, die, or leave traces.

Two launches, each shared by the tests that read it:

- three hand-started ranks (workers/reliability_hygiene.py) run a full group, then a
  rendezvous that a peer never joins, and report what init and shutdown left
  behind: environment variables, threads, child processes, a group;
- one process (tests/support/groups.py) imports torch once and forks a fresh
  three-rank group per scenario, in which one rank dies (``os._exit`` or ``SIGKILL``)
  before or during ``all_reduce_tensors``, ``gather_into_tensor`` or ``barrier``.

Every launch has a parent-side time limit and fresh free ports, the groups a 5 s
timeout. Times are asserted only against the timeout plus a generous margin (this
machine is shared); tools/faults.py reports the figures.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.groups import run_scenarios
from tests.support.procs import (
    Finished,
    base_env,
    free_port,
    results,
    run_hand_started,
)

WORKERS = Path(__file__).resolve().parent / "workers"
GROUP_TIMEOUT = 5.0
"""Seconds: the process-group timeout of every group here."""
BARRIER_TIMEOUT = 2.0
"""Seconds: the timeout of ``helios_collectives.barrier`` in the death scenarios."""
MARGIN = 20.0
"""Seconds allowed beyond a timeout before an error counts as late (a loaded machine)."""
WORLD = 3
MARKER = "HELIOS_RELIABILITY_RUN"
"""Environment variable that tags every process a launch starts (and their children)."""
UNDESTROYED = "destroy_process_group"
JOINED = "only 2 of 3 ranks joined"
"""How helios words the count (torch's own "2/3 clients joined" follows it, quoted)."""

if sys.platform != "linux":
    pytest.skip("the leak probes read /proc", allow_module_level=True)
if importlib.util.find_spec("torch") is None:
    # Like pytest.importorskip, without paying for importing torch in this process.
    pytest.skip("needs torch (the workers run torch.distributed)", allow_module_level=True)


def marked_processes(tag: str) -> list[int]:
    """Pids of live processes started with ``MARKER=tag`` in their environment."""
    needle = f"{MARKER}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = entry.joinpath("environ").read_bytes()
        except OSError:
            continue  # gone, or not ours
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def is_running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (a zombie has freed everything)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def expect_exit_status(finished: list[Finished], status: int = 0) -> None:
    for item in finished:
        assert item.returncode == status, item.describe()


# --- the launches ---------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """One launch: its tag, its processes and what they reported."""

    tag: str
    finished: list[Finished]
    reports: list[dict[str, Any]]

    def log(self) -> str:
        return "\n".join(item.describe()[-6000:] for item in self.finished)


@pytest.fixture(scope="module")
def hygiene_run() -> Launch:
    tag = uuid.uuid4().hex
    finished = run_hand_started(
        WORKERS / "reliability_hygiene.py",
        WORLD,
        args=[
            f"--timeout={GROUP_TIMEOUT}",
            f"--never-joins-port={free_port()}",
            f"--no-host-port={free_port()}",
        ],
        extra_env={"CUDA_VISIBLE_DEVICES": "", MARKER: tag},
        limit=100,
    )
    return Launch(tag, finished, results(finished))


@pytest.fixture(scope="module")
def hygiene(hygiene_run: Launch) -> dict[int, dict[str, Any]]:
    """Each rank's report, by rank, after checking that every rank exited cleanly."""
    expect_exit_status(hygiene_run.finished)
    by_rank = {r["rank"]: r for r in hygiene_run.reports}
    assert sorted(by_rank) == list(range(WORLD)), hygiene_run.log()
    return by_rank


DEATH_SCENARIOS = [
    {
        "id": f"{op}-{when}-{mode}-rank{dying}",
        "kind": "death",
        "op": op,
        "when": when,
        "mode": mode,
        "dying": dying,
    }
    for op in ("all_reduce_tensors", "gather_into_tensor", "barrier")
    for when in ("before", "waiting", "inside")
    for mode, dying in (("exit", 1), ("sigkill", 1), ("exit", 0), ("sigkill", 0))
]
"""Rank 0 hosts the rendezvous store, so its death is a fault of its own."""

STORE_HOST_LEAVES = [
    {
        "id": f"barrier-store-host-enters-{order}-and-leaves",
        "kind": "death",
        "op": "barrier",
        "when": "before",
        "mode": "exit",
        "dying": 1,
        "entry_delays": delays,
        "abandon": True,
    }
    for order, delays in (
        ("first", [0.0, 0.0, BARRIER_TIMEOUT / 2]),
        ("last", [BARRIER_TIMEOUT / 2, 0.0, 0.0]),
    )
]
"""Rank 1 dies; ranks 0 and 2 enter the barrier half its timeout apart, and each exits
as soon as its barrier raises (no shutdown). Rank 0 hosts the store: entering first, it
times out first; entering last, it reads the verdict last."""


@pytest.fixture(scope="module")
def deaths_run() -> Launch:
    tag = uuid.uuid4().hex
    finished = run_scenarios(
        [*DEATH_SCENARIOS, *STORE_HOST_LEAVES],
        env=base_env({"CUDA_VISIBLE_DEVICES": "", MARKER: tag}),
        world=WORLD,
        timeout=GROUP_TIMEOUT,
        barrier_timeout=BARRIER_TIMEOUT,
        scenario_limit=GROUP_TIMEOUT + MARGIN,
        parallel=4,
        limit=130,
    )
    return Launch(tag, [finished], results(finished))


@dataclass(frozen=True)
class Death:
    """What the ranks of one death scenario reported."""

    scenario: dict[str, Any]
    died_at: float
    survivors: list[dict[str, Any]]
    exits: dict[int, dict[str, Any]]


def death(run: Launch, scenario: dict[str, Any]) -> Death:
    mine = [r for r in run.reports if r["scenario"] == scenario["id"]]
    detail = json.dumps(mine, indent=1) + "\n" + run.log()
    dying = [r for r in mine if r["role"] == "dying"]
    assert [r.get("where") for r in dying] != ["returned"], detail
    assert len(dying) == 1, detail
    survivors = [r for r in mine if r["role"] == "survivor"]
    assert sorted(r["rank"] for r in survivors) == [
        r for r in range(WORLD) if r != scenario["dying"]
    ], detail
    exits = {r["rank"]: r for r in mine if r["role"] == "exit"}
    assert sorted(exits) == list(range(WORLD)), detail
    return Death(scenario, dying[0]["died_at"], survivors, exits)


# --- a peer that never joins ----------------------------------------------------------


def never_joins(hygiene: dict[int, dict[str, Any]], rank: int) -> dict[str, Any]:
    outcome = hygiene[rank]["never_joins"]
    assert isinstance(outcome, dict)
    return outcome


@pytest.mark.parametrize("rank", range(WORLD))
def test_init_raises_within_the_timeout_when_a_peer_never_joins(
    hygiene: dict[int, dict[str, Any]], rank: int
) -> None:
    # Ranks 0 and 1 of a world of three whose rank 2 never comes; and (rank 2 here)
    # rank 1 of a world of two whose rank 0, the store host, never comes.
    outcome = never_joins(hygiene, rank)
    assert outcome["raised"], outcome
    assert outcome["error"] == "ProcessGroupInitError", outcome
    assert outcome["is_runtime_error"], outcome
    assert outcome["cause"] is not None, outcome
    assert outcome["elapsed"] < GROUP_TIMEOUT + MARGIN, outcome
    assert outcome["initialized_after_failure"] is False, outcome
    assert outcome["env_changed_by_init"] == [], outcome


def test_the_store_host_says_how_many_ranks_joined(hygiene: dict[int, dict[str, Any]]) -> None:
    message = never_joins(hygiene, 0)["message"]
    assert JOINED in message, message
    assert "rank 0 of" in message, message


def test_a_rank_that_joined_says_how_many_ranks_joined(
    hygiene: dict[int, dict[str, Any]],
) -> None:
    message = never_joins(hygiene, 1)["message"]
    assert JOINED in message, message


def test_a_rank_whose_store_host_never_came_is_told_rank_0_is_missing(
    hygiene: dict[int, dict[str, Any]],
) -> None:
    outcome = never_joins(hygiene, WORLD - 1)
    assert outcome["case"] == "store host never joins"
    assert re.search(r"\brank 0\b", outcome["message"]), outcome["message"]


# --- a peer that dies -----------------------------------------------------------------


@pytest.mark.parametrize("scenario", DEATH_SCENARIOS, ids=[s["id"] for s in DEATH_SCENARIOS])
def test_every_survivor_of_a_death_raises_and_shuts_down(
    deaths_run: Launch, scenario: dict[str, Any]
) -> None:
    found = death(deaths_run, scenario)
    for survivor in found.survivors:
        first, follow_up = survivor["first"], survivor["follow_up"]
        if first["raised"]:
            error = first
        else:
            # Only a barrier that the dying rank had reached before it died may pass;
            # then the next collective must raise.
            assert (scenario["op"], scenario["when"]) == ("barrier", "inside"), survivor
            assert follow_up is not None, survivor
            assert follow_up["raised"], survivor
            error = follow_up
        assert error["is_runtime_error"], survivor
        assert error["raised_at"] - found.died_at < GROUP_TIMEOUT + MARGIN, survivor
        assert survivor["initialized_after_shutdown"] is False, survivor
        assert survivor["shutdown_s"] < GROUP_TIMEOUT + MARGIN, survivor


@pytest.mark.parametrize("scenario", DEATH_SCENARIOS, ids=[s["id"] for s in DEATH_SCENARIOS])
def test_each_rank_of_a_death_scenario_exits_as_expected(
    deaths_run: Launch, scenario: dict[str, Any]
) -> None:
    found = death(deaths_run, scenario)
    dying_status = {"exit": 1, "sigkill": -9}[scenario["mode"]]
    for rank, exit_report in found.exits.items():
        assert exit_report["killed_at_limit"] is False, exit_report
        wanted = dying_status if rank == scenario["dying"] else 0
        assert exit_report["status"] == wanted, exit_report


@pytest.mark.parametrize("when", ["before", "waiting"])
@pytest.mark.parametrize("mode", ["exit", "sigkill"])
def test_barrier_names_a_dead_rank_that_never_arrived(
    deaths_run: Launch, mode: str, when: str
) -> None:
    # The store cannot tell a dead rank from a late one: the barrier times out and
    # names it.
    scenario = next(
        s
        for s in DEATH_SCENARIOS
        if (s["op"], s["when"], s["mode"], s["dying"]) == ("barrier", when, mode, 1)
    )
    for survivor in death(deaths_run, scenario).survivors:
        assert survivor["first"]["error"] == "BarrierTimeoutError", survivor
        assert survivor["first"]["missing_ranks"] == [1], survivor


@pytest.mark.parametrize("scenario", STORE_HOST_LEAVES, ids=lambda s: s["id"])
def test_barrier_names_the_dead_rank_on_every_survivor_though_the_store_host_exits(
    deaths_run: Launch, scenario: dict[str, Any]
) -> None:
    # The survivor that enters first times out first; the other, still within its own
    # timeout, must learn which rank was missing, and neither may lose the store to
    # rank 0 exiting on its error.
    found = death(deaths_run, scenario)
    for survivor in found.survivors:
        first = survivor["first"]
        assert first["error"] == "BarrierTimeoutError", survivor
        assert first["missing_ranks"] == [1], survivor
    later = max(found.survivors, key=lambda s: s["first"]["entered_at"])["first"]
    # Raised on the verdict, before its own timeout (about half of it is left).
    assert later["raised_at"] - later["entered_at"] < BARRIER_TIMEOUT, found.survivors
    exits = {rank: (e["status"], e["killed_at_limit"]) for rank, e in found.exits.items()}
    assert exits == {0: (0, False), 1: (1, False), 2: (0, False)}, exits


@pytest.mark.parametrize("when", ["before", "waiting", "inside"])
def test_barrier_reports_the_lost_store_when_its_host_dies(deaths_run: Launch, when: str) -> None:
    scenario = next(
        s
        for s in DEATH_SCENARIOS
        if (s["op"], s["when"], s["mode"], s["dying"]) == ("barrier", when, "sigkill", 0)
    )
    for survivor in death(deaths_run, scenario).survivors:
        assert survivor["first"]["error"] == "BarrierError", survivor
        assert "store is unreachable" in survivor["first"]["message"], survivor


def test_the_deaths_run_itself_exits_cleanly(deaths_run: Launch) -> None:
    expect_exit_status(deaths_run.finished)
    assert UNDESTROYED not in deaths_run.finished[0].stderr, deaths_run.log()
    assert not [r for r in deaths_run.reports if r["role"] == "crashed"], deaths_run.log()


# --- hygiene after multi-process runs -----------------------------------------------------


@pytest.fixture
def marked_sleeper() -> Iterator[tuple[str, int]]:
    """A process of this test's own, tagged with a fresh marker, killed afterwards."""
    tag = uuid.uuid4().hex
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], env=base_env({MARKER: tag})
    )
    try:
        yield tag, proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_the_leak_scan_sees_a_live_marked_process(marked_sleeper: tuple[str, int]) -> None:
    tag, pid = marked_sleeper
    deadline = time.monotonic() + 10
    while pid not in marked_processes(tag) and time.monotonic() < deadline:
        time.sleep(0.05)  # the environment is readable once the interpreter has started
    assert marked_processes(tag) == [pid]


@pytest.mark.parametrize("launch", ["hygiene_run", "deaths_run"])
def test_no_process_of_a_run_outlives_it(request: pytest.FixtureRequest, launch: str) -> None:
    run: Launch = request.getfixturevalue(launch)
    # Every process the run started carries the marker, and so does anything those
    # processes started, even in a session of its own. (tests/support kills what is
    # left in each worker's session after a run, which would hide a leaked child
    # there: the workers' own reports of their children cover that.)
    assert marked_processes(run.tag) == [], run.log()
    pids = [r["pid"] for r in run.reports if "pid" in r]
    assert pids, run.log()
    assert [pid for pid in pids if is_running(pid)] == []


def test_workers_have_no_child_process_after_shutdown(hygiene: dict[int, dict[str, Any]]) -> None:
    for report in hygiene.values():
        assert report["after_group"]["children"] == [], report
        assert report["after_never_joins"]["children"] == [], report


def test_the_child_process_probe_sees_a_child(hygiene: dict[int, dict[str, Any]]) -> None:
    for report in hygiene.values():
        assert report["controls"]["child_seen"] is True, report


def test_no_thread_outlives_shutdown(hygiene: dict[int, dict[str, Any]]) -> None:
    # Not even torch's own: destroy_process_group ends gloo's and the store's threads,
    # and these small tensors never start torch's intra-op thread pool. A native
    # thread may end a moment after shutdown returned; the worker waits up to 3 s.
    for report in hygiene.values():
        assert report["threads_before_init"] == report["threads_at_start"] == ["MainThread"]
        assert report["group"]["native_settled_in"] is not None, report["group"]
        assert report["never_joins"]["native_settled_in"] is not None, report["never_joins"]
        for phase in ("after_group", "after_never_joins"):
            for kind in ("threads", "native"):
                assert report[phase][kind]["gained"] == [], (phase, kind, report)


def test_the_thread_probe_sees_the_threads_of_a_live_group(
    hygiene: dict[int, dict[str, Any]],
) -> None:
    for report in hygiene.values():
        assert report["controls"]["threads_of_a_live_group"], report


def test_init_and_shutdown_change_no_environment_variable(
    hygiene: dict[int, dict[str, Any]],
) -> None:
    for report in hygiene.values():
        assert report["env_changed_by_imports"] == [], report
        assert report["after_group"]["env_changed"] == [], report
        assert report["never_joins"]["env_changed_by_init"] == [], report


def test_no_group_is_left_after_shutdown(hygiene: dict[int, dict[str, Any]]) -> None:
    for report in hygiene.values():
        assert report["group"]["initialized_after_shutdown"] is False, report
        assert report["never_joins"]["initialized_after_failure"] is False, report


def test_the_collectives_ran_in_the_hygiene_group(hygiene: dict[int, dict[str, Any]]) -> None:
    # The hygiene checks mean something only if the group really ran collectives.
    for report in hygiene.values():
        group = report["group"]
        assert group["reduced"] == [3.0, 3.0, 3.0]
        assert group["gathered"] == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
        assert group["uneven_rows"] == 6
        assert group["validated"] == [3.0, 3.0, 3.0]


def test_no_undestroyed_group_warning_on_stderr(hygiene_run: Launch) -> None:
    # torch prints this warning for nccl groups only; on gloo the reports of
    # dist.is_initialized() above are what shows a group left behind.
    for item in hygiene_run.finished:
        assert UNDESTROYED not in item.stderr, item.describe()
