"""Fault scenarios for helios on real processes: what fails, how, and how fast.

Run it with::

    uv run python tools/faults.py            # prints a table; writes tools/results/faults.{md,json}
    uv run python tools/faults.py --no-run   # rewrites faults.md from faults.json

Every scenario runs in processes of its own over gloo on 127.0.0.1, on fresh free
ports, with a short process-group timeout (5 s) and a time limit on every process;
the tool kills only the processes it started (each launch in a session of its own).

Scenarios:

- malformed launcher variables: ``get_dist_info`` in a fresh process per case, and
  ``helios_pg.init`` (one process tries every case, the environment set per case);
- ``MASTER_PORT`` already in use: ``init`` as rank 0 of 2 on a port this tool holds;
- a peer that never joins: ranks 0 and 1 of a world of three whose rank 2 never
  comes, and rank 1 of a world of two whose rank 0 (the store host) never comes;
- a peer that dies (``os._exit(1)`` or ``SIGKILL``) while the survivors wait in each
  collective, or while it is inside the collective itself;
- a rank that skips a collective (it stays alive, so the others must time out);
- ranks that disagree on a call, with validation on (and, for contrast, off).

The multi-rank scenarios run in tests/support/groups.py (shared with the tests): one
process that imports torch once and forks a fresh group of three ranks per scenario.
This file is the worker of the rest: ``tools/faults.py --worker KIND``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as ``python tools/faults.py``
    sys.path.insert(0, str(ROOT))

from tests.support.groups import (  # noqa: E402
    DEATH_DELAY,
    LATE_ENTRY,
    OPERATIONS,
    SKIP_SLACK,
    Outcome,
    attempt,
    run_scenarios,
)
from tests.support.procs import (  # noqa: E402
    Finished,
    base_env,
    free_port,
    plain_environment,
    results,
    run_processes,
)
from tests.support.worker import report  # noqa: E402

DEFAULT_OUT = ROOT / "tools" / "results"
WORLD = 3
GROUP_TIMEOUT = 5.0
"""Seconds: the process-group timeout of every group."""
BARRIER_TIMEOUT = 1.5
"""Seconds: the timeout given to ``helios_collectives.barrier``."""
MARGIN = 20.0
"""Seconds beyond a timeout after which a scenario counts as hung (a loaded machine)."""
PROMPT = 1.0
"""Seconds: "at once", for errors that need no network."""
DEATH_BOUND = 2.0
"""Seconds from a peer's death to the survivors' errors."""


@dataclass(frozen=True)
class Row:
    case: str
    expected: str
    observed: str
    seconds: float | None
    passed: bool | None  # None: shown for contrast, nothing is expected
    detail: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------ process helpers


def plain_env() -> dict[str, str]:
    """``base_env`` on the CPU, without this shell's choice of validation."""
    env = base_env({"CUDA_VISIBLE_DEVICES": ""})
    env.pop("HELIOS_VALIDATE_COLLECTIVES", None)
    return env


def run_all(
    commands: Sequence[tuple[Sequence[str], Mapping[str, str]]], limit: float
) -> list[Finished]:
    """Start every command at once; kill all at ``limit`` (status -9), and carry on."""
    return run_processes(commands, limit=limit, cwd=ROOT, raise_on_timeout=False)


def worker_command(kind: str, *args: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--worker", kind, *args]


# ------------------------------------------------------------------ workers


def worker_env_case() -> int:
    """``get_dist_info`` once, in a process whose environment the tool chose."""
    import helios_env

    outcome = attempt(helios_env.get_dist_info)
    report(**outcome)
    return 0


def worker_init_cases(cases_json: str, timeout: float) -> int:
    """``helios_pg.init`` once per case (environment set per case); every case's outcome."""
    import torch.distributed as dist

    import helios_pg

    cases: list[dict[str, Any]] = json.loads(cases_json)
    clean = plain_environment(os.environ)
    for case in cases:
        os.environ.clear()
        os.environ.update(clean)
        os.environ.update(case["env"])
        before = dict(os.environ)
        outcome = attempt(lambda: helios_pg.init(timeout=timedelta(seconds=timeout)))
        outcome["initialized"] = dist.is_initialized()
        helios_pg.shutdown()
        outcome["env_changed"] = sorted(
            k for k in {*before, *os.environ} if before.get(k) != os.environ.get(k)
        )
        report(case=case["name"], **outcome)
    return 0


def worker_never_joins(rank: int, world: int, port: int, timeout: float) -> int:
    import torch.distributed as dist

    import helios_pg

    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    outcome = attempt(lambda: helios_pg.init(timeout=timedelta(seconds=timeout)))
    outcome["initialized"] = dist.is_initialized()
    helios_pg.shutdown()
    report(rank=rank, world=world, **outcome)
    return 0


def worker_main(kind: str, args: list[str]) -> int:
    if kind == "env":
        return worker_env_case()
    if kind == "init-cases":
        return worker_init_cases(args[0], float(args[1]))
    if kind == "never-joins":
        return worker_never_joins(int(args[0]), int(args[1]), int(args[2]), float(args[3]))
    message = f"unknown worker {kind!r}"
    raise SystemExit(message)


# ------------------------------------------------------------------ scenarios

MALFORMED: list[tuple[str, str]] = [
    ("RANK", "abc"),
    ("RANK", "-1"),
    ("RANK", "2"),
    ("WORLD_SIZE", "two"),
    ("WORLD_SIZE", "0"),
    ("LOCAL_RANK", "-3"),
    ("LOCAL_RANK", "2"),
    ("LOCAL_WORLD_SIZE", "0"),
    ("MASTER_PORT", "http"),
    ("MASTER_PORT", "70000"),
]
"""Each applied to rank 1 of 2 with LOCAL_WORLD_SIZE=2, at a port where nothing listens."""


def _rank_one_of_two(port: int) -> dict[str, str]:
    return {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


SOURCE_PREFIX = re.compile(r"^\[[^\]]*\.(?:cc|cpp|h):\d+\] ")
PEER_PORT = re.compile(r"(\[127\.0\.0\.1\]):\d+")
TABLE_WIDTH = 170


def _short(message: str) -> str:
    """A message as the table shows it: no C++ source path, no peer port, not too long."""
    text = PEER_PORT.sub(r"\1:<port>", SOURCE_PREFIX.sub("", message))
    return text if len(text) <= TABLE_WIDTH else text[: TABLE_WIDTH - 3].rstrip() + "..."


def _observed(outcome: Outcome | None) -> str:
    if outcome is None:
        return "no report"
    if not outcome.get("raised"):
        return "returned without an error"
    return f"{outcome['error']}: {_short(outcome['message'])}"


def _seconds(outcome: Outcome | None) -> float | None:
    if outcome is None or "raised_at" not in outcome:
        return None
    return float(outcome["raised_at"] - outcome["entered_at"])


def malformed_rows(port: int, init_outcomes: dict[str, Outcome]) -> list[Row]:
    env_commands = []
    for variable, value in MALFORMED:
        env = {**plain_env(), **_rank_one_of_two(port), variable: value}
        env_commands.append((worker_command("env"), env))
    env_runs = run_all(env_commands, limit=60)
    rows = []
    for (variable, value), run in zip(MALFORMED, env_runs, strict=True):
        found = results(run)
        outcome = found[0] if found else None
        rows.append(_malformed_row("get_dist_info", variable, value, outcome, None))
    for variable, value in MALFORMED:
        outcome = init_outcomes.get(f"{variable}={value}")
        rows.append(_malformed_row("helios_pg.init", variable, value, outcome, outcome))
    return rows


def _malformed_row(
    api: str, variable: str, value: str, outcome: Outcome | None, group: Outcome | None
) -> Row:
    seconds = _seconds(outcome)
    passed = (
        outcome is not None
        and outcome.get("raised") is True
        and outcome["is_value_error"]
        and variable in outcome["message"]
        and repr(value) in outcome["message"]
        and seconds is not None
        and seconds < PROMPT
        and (group is None or (group["initialized"] is False and group["env_changed"] == []))
    )
    return Row(
        case=f"malformed {variable}={value!r}: {api}",
        expected=f"ValueError naming {variable} and {value!r} within {PROMPT:g} s; no group",
        observed=_observed(outcome),
        seconds=seconds,
        passed=passed,
        detail={"outcome": outcome},
    )


def busy_port_row(port: int, outcome: Outcome | None) -> Row:
    seconds = _seconds(outcome)
    passed = (
        outcome is not None
        and outcome.get("raised") is True
        and str(port) in outcome["message"]
        and "in use" in outcome["message"]
        and seconds is not None
        and seconds < GROUP_TIMEOUT
        and outcome["initialized"] is False
    )
    return Row(
        case="MASTER_PORT already in use: rank 0 of 2",
        expected=f"error naming the port, within a few seconds (< {GROUP_TIMEOUT:g} s)",
        observed=_observed(outcome),
        seconds=seconds,
        passed=passed,
        detail={"port": port, "outcome": outcome},
    )


NEVER_JOINS = [
    ("rank 0 (store host) of 3, rank 2 absent", r"\b2\s*(?:/|of)\s*3\b", "2 of 3 joined"),
    ("rank 1 of 3 (joined the store), rank 2 absent", r"\b2\s*(?:/|of)\s*3\b", "2 of 3 joined"),
    (
        "rank 1 of 2, rank 0 (store host) absent",
        r"\brank 0\b",
        "rank 0, the store host, is missing",
    ),
]
"""Who calls init, what the message must match, and what that means."""


def never_joins_rows(runs: list[Finished]) -> list[Row]:
    rows = []
    for run, (label, count, meaning) in zip(runs, NEVER_JOINS, strict=True):
        found = results(run)
        outcome = found[0] if found else None
        seconds = _seconds(outcome)
        message = outcome["message"] if outcome and outcome.get("raised") else ""
        passed = (
            outcome is not None
            and outcome.get("raised") is True
            and seconds is not None
            and seconds < GROUP_TIMEOUT + MARGIN
            and outcome["initialized"] is False
            and re.search(count, message) is not None
        )
        rows.append(
            Row(
                case=f"peer never joins: {label}",
                expected=(
                    f"error within {GROUP_TIMEOUT:g} s + {MARGIN:g} s that says how many "
                    f"ranks joined ({meaning})"
                ),
                observed=_observed(outcome),
                seconds=seconds,
                passed=passed,
                detail={"outcome": outcome, "returncode": run.returncode},
            )
        )
    return rows


def group_scenarios() -> list[Outcome]:
    scenarios: list[Outcome] = []
    for op in OPERATIONS:
        for when, mode, dying in (
            ("waiting", "exit", 1),
            ("waiting", "sigkill", 1),
            ("waiting", "sigkill", 0),
            ("inside", "sigkill", 1),
        ):
            scenarios.append(
                {
                    "id": f"death/{op}/{when}/{mode}/{dying}",
                    "kind": "death",
                    "op": op,
                    "when": when,
                    "mode": mode,
                    "dying": dying,
                }
            )
    for op, validate in (
        ("all_reduce_tensors", False),
        ("all_reduce_tensors", True),
        ("gather_into_tensor", False),
        ("barrier", None),
    ):
        scenarios.append(
            {"id": f"skip/{op}/{validate}", "kind": "skip", "op": op, "validate": validate}
        )
    for field_name in ("dtype", "numel", "op", "gather numel", "operation"):
        for validate in (True, False):
            scenarios.append(
                {
                    "id": f"mismatch/{field_name}/{validate}",
                    "kind": "mismatch",
                    "field": field_name,
                    "validate": validate,
                }
            )
    return scenarios


def _compact(reports: list[Outcome]) -> list[Outcome]:
    """What each rank of a scenario reported, without the bulk: for faults.json."""
    compact: dict[int, Outcome] = {}
    for item in reports:
        entry = compact.setdefault(item["rank"], {"rank": item["rank"]})
        role = item["role"]
        if role == "exit":
            entry["exit_status"] = item["status"]
            continue
        entry["role"] = role
        for key in ("shutdown_s", "initialized_after_shutdown", "died_at", "error"):
            if key in item:
                entry[key] = item[key]
        for key in ("first", "follow_up"):
            outcome = item.get(key)
            if outcome:
                entry[key] = {
                    "observed": _observed(outcome),
                    "seconds": _seconds(outcome),
                    **{
                        k: outcome[k]
                        for k in ("missing_ranks", "disagreeing_ranks", "value")
                        if k in outcome
                    },
                }
    return [compact[rank] for rank in sorted(compact)]


def _by_scenario(results: list[Outcome]) -> dict[str, list[Outcome]]:
    grouped: dict[str, list[Outcome]] = {}
    for item in results:
        grouped.setdefault(item["scenario"], []).append(item)
    return grouped


def _exit_statuses(reports: list[Outcome]) -> dict[int, int | None]:
    return {r["rank"]: r["status"] for r in reports if r["role"] == "exit"}


def death_row(scenario: Outcome, reports: list[Outcome]) -> Row:
    op, when, mode, dying = scenario["op"], scenario["when"], scenario["mode"], scenario["dying"]
    how = {"exit": "os._exit(1)", "sigkill": "SIGKILL"}[mode]
    where = {
        "waiting": "while the others wait in it",
        "inside": f"inside it (the last survivor enters {LATE_ENTRY - DEATH_DELAY:g} s later)",
    }[when]
    host = " (the store host)" if dying == 0 else ""
    died = [r for r in reports if r["role"] == "dying" and "died_at" in r]
    survivors = [r for r in reports if r["role"] == "survivor"]
    statuses = _exit_statuses(reports)
    if op == "barrier" and dying != 0 and when == "waiting":
        bound = BARRIER_TIMEOUT + DEATH_BOUND
        expected = (
            f"BarrierTimeoutError naming rank {dying} within the barrier's {BARRIER_TIMEOUT:g} s"
            f" + {DEATH_BOUND:g} s; shutdown completes"
        )
    else:
        bound = DEATH_BOUND
        expected = (
            f"every survivor raises within {DEATH_BOUND:g} s of the death; shutdown completes"
        )
    errors: list[Outcome] = []
    for survivor in survivors:
        first, follow_up = survivor["first"], survivor["follow_up"]
        errors.append(first if first["raised"] or follow_up is None else follow_up)
    delays = [e["raised_at"] - died[0]["died_at"] for e in errors if e.get("raised") and died]
    slowest = max(delays) if len(delays) == WORLD - 1 else None
    passed = (
        len(died) == 1
        and len(survivors) == WORLD - 1
        and all(e.get("raised") and e["is_runtime_error"] for e in errors)
        and slowest is not None
        and slowest < bound
        and all(s["initialized_after_shutdown"] is False for s in survivors)
        and all(statuses.get(r) == 0 for r in range(WORLD) if r != dying)
        and None not in statuses.values()
    )
    observed = "; ".join(sorted({_observed(e) for e in errors})) or "no survivor reported"
    if any(not s["first"]["raised"] for s in survivors):
        observed = f"{op} completed (rank {dying} had arrived); next call: {observed}"
    return Row(
        case=f"rank {dying}{host} dies ({how}) {where}: {op}",
        expected=expected,
        observed=observed,
        seconds=slowest,
        passed=passed,
        detail={"scenario": scenario, "ranks": _compact(reports), "death_to_error_s": delays},
    )


def skip_row(scenario: Outcome, reports: list[Outcome]) -> Row:
    op, validate = scenario["op"], scenario["validate"]
    waiting = [r for r in reports if r["role"] == "survivor"]
    statuses = _exit_statuses(reports)
    limit = BARRIER_TIMEOUT if op == "barrier" else GROUP_TIMEOUT
    seconds_each = [_seconds(r["first"]) for r in waiting]
    slowest = max((s for s in seconds_each if s is not None), default=None)
    passed = (
        len(waiting) == WORLD - 1
        and all(r["first"]["raised"] and r["first"]["is_runtime_error"] for r in waiting)
        and None not in seconds_each
        and slowest is not None
        and slowest < limit + SKIP_SLACK
        and all(r["initialized_after_shutdown"] is False for r in waiting)
        and all(status == 0 for status in statuses.values())
    )
    label = "" if validate is None else f" (validate={validate})"
    return Row(
        case=f"rank {WORLD - 1} skips {op}{label}",
        expected=f"the others raise within the {limit:g} s timeout + {SKIP_SLACK:g} s",
        observed="; ".join(sorted({_observed(r["first"]) for r in waiting})) or "no report",
        seconds=slowest,
        passed=passed,
        detail={"scenario": scenario, "ranks": _compact(reports)},
    )


def mismatch_row(scenario: Outcome, reports: list[Outcome]) -> Row:
    field_name, validate = scenario["field"], scenario["validate"]
    callers = {r["rank"]: r for r in reports if r["role"] == "caller"}
    statuses = _exit_statuses(reports)
    firsts = [callers[r]["first"] for r in sorted(callers)]
    seconds_each = [_seconds(f) for f in firsts]
    slowest = max((s for s in seconds_each if s is not None), default=None)
    disagreeing = [1]
    if validate:
        passed: bool | None = (
            len(callers) == WORLD
            and all(
                f["raised"] and f["error"] == "CollectiveMismatchError" and f["is_value_error"]
                for f in firsts
            )
            and all(f.get("disagreeing_ranks") == disagreeing for f in firsts)
            and slowest is not None
            and slowest < PROMPT
            and all(status == 0 for status in statuses.values())
        )
        expected = (
            f"CollectiveMismatchError (a ValueError) on every rank naming rank 1, < {PROMPT:g} s"
        )
    else:
        passed = None
        expected = "nothing promised without validation (shown for contrast)"
    parts = []
    for rank in range(WORLD):
        if rank in callers:
            first = callers[rank]["first"]
            text = _observed(first) if first["raised"] else f"returned {first.get('value')}"
        else:
            status = statuses.get(rank)
            text = "killed at the limit" if status is None else f"exit status {status}"
        parts.append(f"rank {rank}: {text}")
    observed = "; ".join(parts)
    if validate and len({_observed(f) for f in firsts}) == 1 and len(firsts) == WORLD:
        observed = f"every rank: {_observed(firsts[0])}"
    return Row(
        case=f"rank 1 disagrees on {field_name} (validate={validate})",
        expected=expected,
        observed=observed,
        seconds=slowest,
        passed=passed,
        detail={"scenario": scenario, "ranks": _compact(reports)},
    )


# ------------------------------------------------------------------ output


def _cell(text: str) -> str:
    """Text for a Markdown table cell: no line breaks, no column bars, no HTML tags."""
    return text.replace("<", "&lt;").replace("|", "\\|").replace("\n", " ")


NOTES = (
    "Time to error: from the call to the error, except for a death, where it runs from "
    "the dying rank's `time.time()` just before it died to the slowest survivor's error.",
    "A death is detected at once by the ranks that talk to the dead peer: gloo sees the "
    "connection close. `barrier` meets in the store, which cannot tell a dead rank from a "
    "late one, so it raises when its own timeout expires, naming the dead rank; when rank "
    "0 dies, the store goes with it and the barrier fails at once.",
    "Validation off is shown for contrast: ranks that disagree abort (SIGABRT, exit "
    "status -6), fail on a reset connection, time out, or return wrong values silently.",
)


def to_markdown(rows: list[Row], header: str) -> str:
    lines = [
        header,
        "",
        "| case | expected behaviour | observed | time to error (s) | pass |",
        "|---|---|---|---:|---|",
    ]
    for row in rows:
        seconds = "-" if row.seconds is None else f"{row.seconds:.2f}"
        verdict = {True: "pass", False: "FAIL", None: "info"}[row.passed]
        lines.append(
            f"| {_cell(row.case)} | {_cell(row.expected)} | {_cell(row.observed)} "
            f"| {seconds} | {verdict} |"
        )
    passed = sum(row.passed is True for row in rows)
    judged = sum(row.passed is not None for row in rows)
    contrast = len(rows) - judged
    lines += ["", f"{passed} of {judged} cases passed ({contrast} shown for contrast).", ""]
    lines += [f"- {note}" for note in NOTES]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--parallel", type=int, default=6, help="group scenarios at a time")
    parser.add_argument(
        "--no-run", action="store_true", help="run nothing: rewrite faults.md from faults.json"
    )
    args, rest = parser.parse_known_args()
    if args.worker:
        return worker_main(args.worker, rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.no_run:
        stored = json.loads((args.out / "faults.json").read_text(encoding="utf-8"))
        markdown = to_markdown([Row(**row) for row in stored["rows"]], stored["header"])
        (args.out / "faults.md").write_text(markdown)
        print(markdown)
        return 0

    started = time.monotonic()
    dead_port = free_port()  # nothing listens here
    cases = [
        {"name": f"{variable}={value}", "env": {**_rank_one_of_two(dead_port), variable: value}}
        for variable, value in MALFORMED
    ]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        busy_port = int(busy.getsockname()[1])
        cases.append(
            {
                "name": "busy-port",
                "env": {
                    "RANK": "0",
                    "WORLD_SIZE": "2",
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(busy_port),
                },
            }
        )
        never_port, no_host_port = free_port(), free_port()
        timeout = str(GROUP_TIMEOUT)
        print("running: malformed variables, busy port, peers that never join ...", flush=True)
        launch = run_all(
            [
                (worker_command("init-cases", json.dumps(cases), timeout), plain_env()),
                (worker_command("never-joins", "0", "3", str(never_port), timeout), plain_env()),
                (worker_command("never-joins", "1", "3", str(never_port), timeout), plain_env()),
                (worker_command("never-joins", "1", "2", str(no_host_port), timeout), plain_env()),
            ],
            limit=GROUP_TIMEOUT + MARGIN + 60,
        )
    init_outcomes = {r["case"]: r for r in results(launch[0])}
    rows = malformed_rows(dead_port, init_outcomes)
    rows.append(busy_port_row(busy_port, init_outcomes.get("busy-port")))
    rows += never_joins_rows(launch[1:])

    scenarios = group_scenarios()
    print(f"running: {len(scenarios)} group scenarios, {WORLD} ranks each ...", flush=True)
    groups = run_scenarios(
        scenarios,
        env=plain_env(),
        world=WORLD,
        timeout=GROUP_TIMEOUT,
        barrier_timeout=BARRIER_TIMEOUT,
        scenario_limit=GROUP_TIMEOUT + MARGIN,
        parallel=args.parallel,
        limit=(len(scenarios) / args.parallel + 1) * (GROUP_TIMEOUT + MARGIN) + 60,
        raise_on_timeout=False,
    )
    by_scenario = _by_scenario(results(groups))
    for scenario in scenarios:
        reports = by_scenario.get(scenario["id"], [])
        make = {"death": death_row, "skip": skip_row, "mismatch": mismatch_row}[scenario["kind"]]
        rows.append(make(scenario, reports))

    header = (
        f"Python {platform.python_version()}, torch {version('torch')}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, gloo over 127.0.0.1, {date.today().isoformat()}; group "
        f"timeout {GROUP_TIMEOUT:g} s, barrier timeout {BARRIER_TIMEOUT:g} s, "
        f"{time.monotonic() - started:.0f} s in all."
    )
    markdown = to_markdown(rows, header)
    print(markdown)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "faults.md").write_text(markdown)
    payload = {
        "header": header,
        "group_timeout_s": GROUP_TIMEOUT,
        "barrier_timeout_s": BARRIER_TIMEOUT,
        "rows": [asdict(row) for row in rows],
        "stderr_tail": {
            "init_and_never_joins": [f.stderr[-2000:] for f in launch],
            "groups": groups.stderr[-4000:],
        },
        "returncodes": {"launch": [f.returncode for f in launch], "groups": groups.returncode},
    }
    (args.out / "faults.json").write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
