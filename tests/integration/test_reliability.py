"""Faults on real gloo processes over 127.0.0.1: peers that never join, die, or leave traces.

Two launches, each shared by the tests that read it:

- three hand-started ranks (workers/reliability_hygiene.py) run a full group, then a
  rendezvous that a peer never joins, and report what init and shutdown left
  behind: environment variables, threads, child processes, a group;
- one process (tests/support/groups.py) imports torch once and forks a fresh
  three-rank group per scenario, in which one rank dies (``os._exit`` or ``SIGKILL``)
  before or during a collective, skips one, or disagrees with the others on one.

Every launch has a parent-side time limit and fresh free ports, the groups a 5 s
timeout (from their first barrier on: forming them has longer, see
tests/support/groups.py). Times are asserted only against the timeout plus a generous margin (this
machine is shared); each test that judges a fault scenario records what it measured
(tests/support/fault_records.py), from which ``python -m tools.faults`` renders the
table of docs/failures.md.
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

from tests.support.fault_records import RecordProperty, record_fault
from tests.support.groups import first_line, run_scenarios
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
MISSING = re.compile(r"rank 2 never joined the rendezvous store at \S+ within \S+ s; ranks 0-1 \(")
"""How helios names the rank that never came, and the ranks that did with their host."""
GROUPS_LIMIT = 480.0
"""Seconds: the parent-side limit of the group scenarios' launch (about 70 s quiet; two CI
sessions at once on two cores can take several times that)."""

# The first test that reads a launch waits for all of it, past pytest-timeout's default.
pytestmark = [pytest.mark.faults, pytest.mark.timeout(GROUPS_LIMIT + 60)]

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


def death_scenario(op: str, when: str, mode: str, dying: int) -> dict[str, Any]:
    return {
        "id": f"{op}-{when}-{mode}-rank{dying}",
        "kind": "death",
        "op": op,
        "when": when,
        "mode": mode,
        "dying": dying,
    }


DEATH_SCENARIOS = [
    death_scenario(op, when, mode, dying)
    for op in ("all_reduce_tensors", "gather_into_tensor", "barrier")
    for when in ("before", "waiting", "inside")
    for mode, dying in (("exit", 1), ("sigkill", 1), ("exit", 0), ("sigkill", 0))
] + [
    death_scenario(op, when, mode, dying)
    for op in ("gather_uneven", "safe_barrier")
    for when, mode, dying in (
        ("waiting", "exit", 1),
        ("waiting", "sigkill", 0),
        ("inside", "sigkill", 1),
    )
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


SKIPS = [
    {"id": f"skip-{op}-validate-{validate}", "kind": "skip", "op": op, "validate": validate}
    for op, validate in (
        ("all_reduce_tensors", False),
        ("all_reduce_tensors", True),
        ("gather_into_tensor", False),
        ("barrier", None),
    )
]
"""Rank 2 never calls ``op`` but stays alive past the group timeout."""

MISMATCHES = [
    {
        "id": f"mismatch-{field}-validate-{validate}",
        "kind": "mismatch",
        "field": field,
        "validate": validate,
    }
    for validate in (False, True)
    for field in ("dtype", "numel", "op", "gather numel", "operation")
]
"""Rank 1 disagrees with the others on ``field`` (tests/support/groups.py)."""


@pytest.fixture(scope="module")
def deaths_run() -> Launch:
    """Every group scenario: the deaths, and the ranks that skip a call or disagree on one."""
    tag = uuid.uuid4().hex
    finished = run_scenarios(
        # The skips (each lasts the group timeout and more) share the first batch.
        [*SKIPS, *MISMATCHES, *DEATH_SCENARIOS, *STORE_HOST_LEAVES],
        env=base_env({"CUDA_VISIBLE_DEVICES": "", MARKER: tag}),
        world=WORLD,
        timeout=GROUP_TIMEOUT,
        barrier_timeout=BARRIER_TIMEOUT,
        scenario_limit=GROUP_TIMEOUT + MARGIN,
        parallel=6,
        limit=GROUPS_LIMIT,
    )
    return Launch(tag, [finished], results(finished))


def reports_of(run: Launch, scenario: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in run.reports if r["scenario"] == scenario["id"]]


def exit_statuses(reports: list[dict[str, Any]]) -> dict[int, int | None]:
    return {r["rank"]: r["status"] for r in reports if r["role"] == "exit"}


def outcome(call: dict[str, Any], since: float) -> dict[str, Any]:
    """A call's outcome (tests/support/groups.py's ``attempt``) as a fault record has it."""
    if not call["raised"]:
        return {"returned": call.get("value")}
    return {
        "error": call["error"],
        "message": call["message"],
        "seconds": call["raised_at"] - since,
    }


@dataclass(frozen=True)
class Death:
    """What the ranks of one death scenario reported."""

    scenario: dict[str, Any]
    died_at: float
    survivors: list[dict[str, Any]]
    exits: dict[int, dict[str, Any]]


def death(run: Launch, scenario: dict[str, Any]) -> Death:
    mine = reports_of(run, scenario)
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


DYING_STATUS = {"exit": 1, "sigkill": -9}
HOW = {"exit": "os._exit(1)", "sigkill": "SIGKILL"}
WHERE = {
    "before": "before the others call it",
    "waiting": "while the others wait in it",
    "inside": "inside it, while a survivor waits there and the last has not come",
}


def death_case(scenario: dict[str, Any]) -> str:
    if scenario.get("abandon"):
        order = "first" if scenario["entry_delays"][0] == 0 else "last"
        return (
            f"rank 1 dies before barrier; rank 0 (the store host) enters it {order}, "
            "and each survivor exits on its error"
        )
    host = " (the store host)" if scenario["dying"] == 0 else ""
    how, where = HOW[scenario["mode"]], WHERE[scenario["when"]]
    return f"rank {scenario['dying']}{host} dies ({how}) {where}: {scenario['op']}"


def record_death(
    record_property: RecordProperty, run: Launch, scenario: dict[str, Any], claim: str
) -> None:
    """Record each survivor's error, from the death on, and each rank's exit status."""
    mine = reports_of(run, scenario)
    died_at = next((r["died_at"] for r in mine if r["role"] == "dying" and "died_at" in r), None)
    statuses = exit_statuses(mine)
    ranks = []
    for survivor in sorted((r for r in mine if r["role"] == "survivor"), key=lambda r: r["rank"]):
        first, follow_up = survivor["first"], survivor["follow_up"]
        call = first if first["raised"] or follow_up is None else follow_up
        entry = outcome(call, since=first["entered_at"] if died_at is None else died_at)
        if call is follow_up:
            entry["in_next_call"] = True
        ranks.append(
            {"rank": survivor["rank"], **entry, "exit_status": statuses.get(survivor["rank"])}
        )
    record_fault(
        record_property,
        kind="death",
        scenario=scenario["id"],
        case=death_case(scenario),
        claim=claim,
        ranks=ranks,
        since="the death",
    )


# --- a peer that never joins ----------------------------------------------------------

NEVER_JOINS_CASES = {
    0: "peer never joins: rank 0 (the store host) of 3, rank 2 absent",
    1: "peer never joins: rank 1 of 3, rank 2 absent",
    2: "peer never joins: rank 1 of 2, rank 0 (the store host) absent",
}
"""By the rank of the hygiene launch that plays the case."""


def never_joins(
    hygiene: dict[int, dict[str, Any]], rank: int, record_property: RecordProperty, claim: str
) -> dict[str, Any]:
    found = hygiene[rank]["never_joins"]
    assert isinstance(found, dict)
    entry: dict[str, Any] = {"seconds": found["elapsed"]}
    if found["raised"]:
        entry.update(error=found["error"], message=first_line(found["message"]))
    record_fault(
        record_property,
        kind="never joins",
        scenario=f"never-joins-{rank}",
        case=NEVER_JOINS_CASES[rank],
        claim=claim,
        ranks=[entry],
    )
    return found


@pytest.mark.parametrize("rank", range(WORLD))
def test_init_raises_within_the_timeout_when_a_peer_never_joins(
    hygiene: dict[int, dict[str, Any]], rank: int, record_property: RecordProperty
) -> None:
    # Ranks 0 and 1 of a world of three whose rank 2 never comes; and (rank 2 here)
    # rank 1 of a world of two whose rank 0, the store host, never comes.
    claim = (
        f"ProcessGroupInitError (a RuntimeError) within the {GROUP_TIMEOUT:g} s timeout "
        f"+ {MARGIN:g} s; no group left, no variable changed"
    )
    outcome = never_joins(hygiene, rank, record_property, claim)
    assert outcome["raised"], outcome
    assert outcome["error"] == "ProcessGroupInitError", outcome
    assert outcome["is_runtime_error"], outcome
    assert outcome["cause"] is not None, outcome
    assert outcome["elapsed"] < GROUP_TIMEOUT + MARGIN, outcome
    assert outcome["initialized_after_failure"] is False, outcome
    assert outcome["env_changed_by_init"] == [], outcome


def test_the_store_host_says_how_many_ranks_joined(
    hygiene: dict[int, dict[str, Any]], record_property: RecordProperty
) -> None:
    claim = "names rank 2 as the one that never joined, and ranks 0-1 with their host"
    message = never_joins(hygiene, 0, record_property, claim)["message"]
    assert MISSING.search(message), message
    assert "rank 0 of" in message, message


def test_a_rank_that_joined_names_the_rank_that_did_not(
    hygiene: dict[int, dict[str, Any]], record_property: RecordProperty
) -> None:
    claim = "names rank 2 as the one that never joined, and ranks 0-1 with their host"
    message = never_joins(hygiene, 1, record_property, claim)["message"]
    assert MISSING.search(message), message


def test_a_rank_whose_store_host_never_came_is_told_rank_0_is_missing(
    hygiene: dict[int, dict[str, Any]], record_property: RecordProperty
) -> None:
    outcome = never_joins(hygiene, WORLD - 1, record_property, "says that rank 0 is missing")
    assert outcome["case"] == "store host never joins"
    assert re.search(r"\brank 0\b", outcome["message"]), outcome["message"]


# --- a peer that dies -----------------------------------------------------------------


@pytest.mark.parametrize("scenario", DEATH_SCENARIOS, ids=[s["id"] for s in DEATH_SCENARIOS])
def test_every_survivor_of_a_death_raises_and_shuts_down(
    deaths_run: Launch, scenario: dict[str, Any], record_property: RecordProperty
) -> None:
    claim = (
        f"every survivor raises a RuntimeError within {GROUP_TIMEOUT + MARGIN:g} s of the "
        "death and shuts down"
    )
    if (scenario["op"], scenario["when"]) == ("barrier", "inside"):
        claim += " (or, had the dying rank arrived, raises in its next call)"
    record_death(record_property, deaths_run, scenario, claim)
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
    deaths_run: Launch, scenario: dict[str, Any], record_property: RecordProperty
) -> None:
    dying_status = DYING_STATUS[scenario["mode"]]
    claim = f"exit status {dying_status} for rank {scenario['dying']}, 0 for the others"
    record_death(record_property, deaths_run, scenario, claim)
    found = death(deaths_run, scenario)
    for rank, exit_report in found.exits.items():
        assert exit_report["killed_at_limit"] is False, exit_report
        wanted = dying_status if rank == scenario["dying"] else 0
        assert exit_report["status"] == wanted, exit_report


@pytest.mark.parametrize("when", ["before", "waiting"])
@pytest.mark.parametrize("mode", ["exit", "sigkill"])
def test_barrier_names_a_dead_rank_that_never_arrived(
    deaths_run: Launch, mode: str, when: str, record_property: RecordProperty
) -> None:
    # The store cannot tell a dead rank from a late one: the barrier times out and
    # names it.
    scenario = next(
        s
        for s in DEATH_SCENARIOS
        if (s["op"], s["when"], s["mode"], s["dying"]) == ("barrier", when, mode, 1)
    )
    claim = f"BarrierTimeoutError naming rank 1, at the barrier's {BARRIER_TIMEOUT:g} s timeout"
    record_death(record_property, deaths_run, scenario, claim)
    for survivor in death(deaths_run, scenario).survivors:
        assert survivor["first"]["error"] == "BarrierTimeoutError", survivor
        assert survivor["first"]["missing_ranks"] == [1], survivor


@pytest.mark.parametrize("scenario", STORE_HOST_LEAVES, ids=lambda s: s["id"])
def test_barrier_names_the_dead_rank_on_every_survivor_though_the_store_host_exits(
    deaths_run: Launch, scenario: dict[str, Any], record_property: RecordProperty
) -> None:
    # The survivor that enters first times out first; the other, still within its own
    # timeout, must learn which rank was missing, and neither may lose the store to
    # rank 0 exiting on its error.
    claim = (
        "BarrierTimeoutError naming rank 1 on both survivors, the later one before its own "
        "timeout; exit statuses 0, 1, 0"
    )
    record_death(record_property, deaths_run, scenario, claim)
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
def test_barrier_reports_the_lost_store_when_its_host_dies(
    deaths_run: Launch, when: str, record_property: RecordProperty
) -> None:
    scenario = next(
        s
        for s in DEATH_SCENARIOS
        if (s["op"], s["when"], s["mode"], s["dying"]) == ("barrier", when, "sigkill", 0)
    )
    record_death(record_property, deaths_run, scenario, "BarrierError: the store is unreachable")
    for survivor in death(deaths_run, scenario).survivors:
        assert survivor["first"]["error"] == "BarrierError", survivor
        assert "store is unreachable" in survivor["first"]["message"], survivor


def test_the_deaths_run_itself_exits_cleanly(deaths_run: Launch) -> None:
    expect_exit_status(deaths_run.finished)
    assert UNDESTROYED not in deaths_run.finished[0].stderr, deaths_run.log()
    assert not [r for r in deaths_run.reports if r["role"] == "crashed"], deaths_run.log()


# --- a rank that skips a collective, ranks that disagree --------------------------------


def record_calls(
    record_property: RecordProperty,
    run: Launch,
    scenario: dict[str, Any],
    *,
    kind: str,
    case: str,
    claim: str,
) -> list[dict[str, Any]]:
    """Record each calling rank's outcome (or, for one that ended, its exit status)."""
    mine = reports_of(run, scenario)
    calls = {r["rank"]: r for r in mine if r["role"] in {"survivor", "caller"}}
    ranks = []
    for rank, status in sorted(exit_statuses(mine).items()):
        if rank in calls:
            first = calls[rank]["first"]
            ranks.append(
                {"rank": rank, **outcome(first, first["entered_at"]), "exit_status": status}
            )
        elif scenario["kind"] == "mismatch":
            ranks.append({"rank": rank, "exit_status": status})
    record_fault(
        record_property, kind=kind, scenario=scenario["id"], case=case, claim=claim, ranks=ranks
    )
    return [calls[rank] for rank in sorted(calls)]


@pytest.mark.parametrize("scenario", SKIPS, ids=[s["id"] for s in SKIPS])
def test_the_ranks_that_wait_for_a_skipping_rank_raise_at_the_timeout(
    deaths_run: Launch, scenario: dict[str, Any], record_property: RecordProperty
) -> None:
    timeout = BARRIER_TIMEOUT if scenario["op"] == "barrier" else GROUP_TIMEOUT
    label = "" if scenario["validate"] is None else f" (validate={scenario['validate']})"
    waiting = record_calls(
        record_property,
        deaths_run,
        scenario,
        kind="skip",
        case=f"rank {WORLD - 1} skips {scenario['op']}{label}",
        claim=(
            f"the others raise a RuntimeError at the {timeout:g} s timeout (within "
            f"{MARGIN:g} s after it) and shut down"
        ),
    )
    assert [r["rank"] for r in waiting] == list(range(WORLD - 1)), deaths_run.log()
    for caller in waiting:
        first = caller["first"]
        assert first["raised"], caller
        assert first["is_runtime_error"], caller
        elapsed = first["raised_at"] - first["entered_at"]
        assert timeout - 0.1 < elapsed < timeout + MARGIN, caller
        assert caller["initialized_after_shutdown"] is False, caller
    assert set(exit_statuses(reports_of(deaths_run, scenario)).values()) == {0}


VALIDATED = [s for s in MISMATCHES if s["validate"]]
UNVALIDATED = [s for s in MISMATCHES if not s["validate"]]


def record_mismatch(
    record_property: RecordProperty, run: Launch, scenario: dict[str, Any], claim: str
) -> list[dict[str, Any]]:
    case = f"rank 1 disagrees on {scenario['field']} (validate={scenario['validate']})"
    return record_calls(record_property, run, scenario, kind="mismatch", case=case, claim=claim)


@pytest.mark.parametrize("scenario", VALIDATED, ids=[s["id"] for s in VALIDATED])
def test_ranks_that_disagree_under_validation_all_raise_the_mismatch_error(
    deaths_run: Launch, scenario: dict[str, Any], record_property: RecordProperty
) -> None:
    claim = (
        "CollectiveMismatchError (a ValueError) on every rank naming rank 1, before "
        f"the {GROUP_TIMEOUT:g} s timeout could pass"
    )
    callers = record_mismatch(record_property, deaths_run, scenario, claim)
    assert [r["rank"] for r in callers] == list(range(WORLD)), deaths_run.log()
    for caller in callers:
        first = caller["first"]
        assert first["error"] == "CollectiveMismatchError", caller
        assert first["is_value_error"], caller
        assert first["disagreeing_ranks"] == [1], caller
        assert first["raised_at"] - first["entered_at"] < GROUP_TIMEOUT, caller
    assert set(exit_statuses(reports_of(deaths_run, scenario)).values()) == {0}


@pytest.mark.parametrize("scenario", UNVALIDATED, ids=[s["id"] for s in UNVALIDATED])
def test_ranks_that_disagree_without_validation_still_end_by_themselves(
    deaths_run: Launch, scenario: dict[str, Any], record_property: RecordProperty
) -> None:
    # Nothing is promised about the result: an abort, a reset connection, a timeout or
    # wrong values. Only that, with a group timeout, no rank hangs.
    claim = (
        "nothing about the result; every rank returns, raises or aborts by itself "
        f"within the {GROUP_TIMEOUT:g} s timeout + {MARGIN:g} s"
    )
    record_mismatch(record_property, deaths_run, scenario, claim)
    exits = [r for r in reports_of(deaths_run, scenario) if r["role"] == "exit"]
    assert len(exits) == WORLD, deaths_run.log()
    assert not [e for e in exits if e["killed_at_limit"]], exits


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


def test_a_barrier_makes_a_few_store_requests_however_long_it_waits(
    hygiene: dict[int, dict[str, Any]],
) -> None:
    # Ranks 0 and 1 wait 1 s for rank 2, each blocked in one request on a connection of
    # its own: four or five requests a rank, and four more on rank 0, which deletes the
    # previous barrier's keys. Polling every 10 ms or less made a hundred.
    for rank, report in hygiene.items():
        traffic = report["group"]["traffic"]
        if rank != WORLD - 1:
            assert traffic["waited"] >= 0.9, traffic
        assert traffic["requests"] <= 12, (rank, traffic)


def test_a_timed_out_barrier_names_the_late_rank_and_torch_prints_nothing(
    hygiene: dict[int, dict[str, Any]],
) -> None:
    # The waits end by their keys being set, never by the store's own timeout, whose
    # C++ warnings would otherwise reach stderr.
    timed_out = {rank: r["group"]["traffic"]["timed_out"] for rank, r in hygiene.items()}
    assert timed_out == {0: [2], 1: [2], 2: None}
    for report in hygiene.values():
        assert report["group"]["traffic"]["stderr"] == "", report["group"]["traffic"]


def test_the_barriers_waiting_connections_close_with_the_group(
    hygiene: dict[int, dict[str, Any]],
) -> None:
    for report in hygiene.values():
        assert report["group"]["waiting_connections_after_shutdown"] == 0, report["group"]
