"""Faults across nodes: the second node's processes killed, or its link taken down, or
one of its ranks raising.

Four hand-started ranks, two per virtual node, all-reduce in a loop with a 10 s group
timeout. Once every rank has summed right, the test breaks the second node. Every rank
that survives must raise within the group timeout plus 10 s, and the first node's
ranks, asked by ``helios_collectives.barrier``, must name the second node's ranks as
missing; every process must end by itself, with the status the fault implies.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.multinode.checks import TEST_TIMEOUT
from tests.support.netns import VirtualNodes
from tests.support.procs import REPO_ROOT, parse_results

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(TEST_TIMEOUT)]

WORKER = [sys.executable, str(Path(__file__).parent / "workers" / "fault_loop.py")]
FAILING = [sys.executable, str(REPO_ROOT / "tests" / "pg" / "workers" / "failing.py")]
GROUP_TIMEOUT = 10.0
READY_LIMIT = 90.0
SURVIVOR_LIMIT = GROUP_TIMEOUT + 10.0
END_LIMIT = 90.0
PER_NODE = 2


def reports(log: Path) -> list[dict[str, Any]]:
    return parse_results(log.read_text(errors="replace") if log.exists() else "")


def outputs(procs: list[tuple[int, Path, Any]], statuses: dict[int, int | None]) -> str:
    """Every rank's output, with its exit status when known, for a failure message."""
    parts = []
    for rank, log, _ in procs:
        text = log.read_text(errors="replace") if log.exists() else ""
        parts.append(f"--- rank {rank} (status {statuses.get(rank, 'running')})\n{text}")
    return "\n".join(parts)


def start_ranks(
    nodes: VirtualNodes, tmp_path: Path, worker: list[str], extra: dict[str, str]
) -> list[tuple[int, Path, Any]]:
    """Start ``PER_NODE`` hand-started ranks on each node, each logging to a file."""
    port = nodes.free_port(0)
    world = PER_NODE * len(nodes.nodes)
    procs = []
    for rank in range(world):
        log = tmp_path / f"rank-{rank}.log"
        env = nodes.env(
            {
                "RANK": str(rank),
                "WORLD_SIZE": str(world),
                "LOCAL_RANK": str(rank % PER_NODE),
                "LOCAL_WORLD_SIZE": str(PER_NODE),
                "MASTER_ADDR": nodes.nodes[0].address,
                "MASTER_PORT": str(port),
                "HELIOS_TEST_PG_TIMEOUT": str(GROUP_TIMEOUT),
                "PYTHONUNBUFFERED": "1",
                **extra,
            }
        )
        procs.append((rank, log, nodes.popen(rank // PER_NODE, worker, env=env, log=log)))
    return procs


def wait_ranks(procs: list[tuple[int, Path, Any]]) -> dict[int, int | None]:
    """Each rank's exit status within ``END_LIMIT``; None for one killed at the limit."""
    statuses: dict[int, int | None] = {}
    end = time.monotonic() + END_LIMIT
    for rank, _, proc in procs:
        try:
            statuses[rank] = proc.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:  # still running at the limit: a hang
            proc.kill()
            statuses[rank] = None
    return statuses


def run_fault(
    nodes: VirtualNodes, tmp_path: Path, fault: Callable[[], object]
) -> tuple[dict[int, dict[str, Any]], dict[int, int | None], str]:
    """Start the ranks, break the second node once all are ready, collect the reports."""
    fault_file = tmp_path / "fault"
    procs = start_ranks(nodes, tmp_path, WORKER, {"HELIOS_TEST_FAULT_FILE": str(fault_file)})
    deadline = time.monotonic() + READY_LIMIT
    while not all(log.exists() and "READY" in log.read_text() for _, log, _ in procs):
        if time.monotonic() > deadline or any(p.poll() is not None for _, _, p in procs):
            for _, _, proc in procs:
                proc.kill()
            pytest.fail(f"the ranks did not all get ready:\n{outputs(procs, {})}")
        time.sleep(0.2)
    time.sleep(1.0)  # well into the loop on every rank
    fault_file.write_text(repr(time.time()))
    fault()
    statuses = wait_ranks(procs)
    logs = outputs(procs, statuses)
    found = {int(item["rank"]): item for _, log, _ in procs for item in reports(log)}
    # Seen with -s (or in a failure's captured output): each rank's time from the fault.
    for rank, item in sorted(found.items()):
        error, done = item["after_fault"], item["done_after_fault"]
        print(f"rank {rank}: {item['error']} {error:.2f} s after the fault, done at {done:.2f} s")
    return found, statuses, logs


def test_killing_the_second_node_fails_the_first_fast_and_names_its_ranks(
    nodes: VirtualNodes, tmp_path: Path
) -> None:
    found, statuses, logs = run_fault(nodes, tmp_path, lambda: nodes.kill(1))

    assert None not in statuses.values(), logs  # nothing hung
    assert [statuses[rank] for rank in (0, 1)] == [1, 1], logs
    assert [statuses[rank] for rank in (2, 3)] == [-9, -9], logs
    for rank in (0, 1):
        assert found[rank]["after_fault"] <= SURVIVOR_LIMIT, logs
        assert found[rank]["barrier"] == "BarrierTimeoutError", logs
        assert found[rank]["missing"] == [2, 3], logs


def test_cutting_the_second_nodes_link_fails_every_rank_within_the_timeout(
    nodes: VirtualNodes, tmp_path: Path
) -> None:
    try:
        found, statuses, logs = run_fault(nodes, tmp_path, lambda: nodes.link_down(1))
    finally:
        nodes.link_up(1)

    assert None not in statuses.values(), logs  # nothing hung
    assert set(statuses.values()) == {1}, logs
    for rank in range(4):
        assert found[rank]["after_fault"] <= SURVIVOR_LIMIT, logs
    for rank in (0, 1):
        assert found[rank]["barrier"] == "BarrierTimeoutError", logs
        assert found[rank]["missing"] == [2, 3], logs


def test_a_rank_that_raises_on_the_second_node_is_named_by_the_first(
    nodes: VirtualNodes, tmp_path: Path
) -> None:
    # Rank 2, on the second node, raises; the others wait in an all-reduce it never
    # joins, fail there once it is gone, and say who failed first: the culprit's line
    # comes through the store on the first node, whatever node each victim is on.
    extra = {
        "HELIOS_TEST_FAILURE": "raise",
        "HELIOS_TEST_FAILING_RANK": "2",
        "PYTHONPATH": str(REPO_ROOT),
    }
    procs = start_ranks(nodes, tmp_path, FAILING, extra)
    statuses = wait_ranks(procs)
    logs = outputs(procs, statuses)

    assert None not in statuses.values(), logs  # nothing hung
    assert 0 not in statuses.values(), logs
    texts = {rank: log.read_text(errors="replace") for rank, log, _ in procs}
    assert "ValueError: bad batch 7" in texts[2], logs
    culprit = f"rank 2 on {nodes.nodes[1].name} failed first: ValueError: bad batch 7"
    for rank in (0, 1, 3):
        assert culprit in texts[rank], logs
