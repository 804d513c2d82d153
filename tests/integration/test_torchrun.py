"""Real torchrun: which ranks helios_log prints and logs on, and the ranks on two nodes.

Two runs, shared by every test here: three processes on one node, and two torchrun
agents of two processes each that stand for two nodes. The worker prints and logs
before the group exists and again with a live gloo group; the tests count the marked
lines each call produced. On one node the group is torch's own
(``init_process_group``); on two it is ``helios_pg.init``'s, and the workers also report
the ranks that helios_env sees before and after init.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from helios_env import DistributedInfo
from tests.support.procs import Finished, results, run_torchrun, run_two_nodes

if importlib.util.find_spec("torch") is None:
    # Like pytest.importorskip, without paying for importing torch in this process.
    pytest.skip("needs torch (the workers run torch.distributed)", allow_module_level=True)

pytestmark = pytest.mark.long  # whole torchrun jobs: CI runs them, not the default run

WORKER = str(Path(__file__).parent / "workers" / "log_worker.py")
MARKER = re.compile(r"@@(?P<kind>[\w-]+) (?P<phase>\w+):(?P<rank>\d+):(?P<local_rank>\d+)@@")
LOG_LINE = re.compile(
    r"^\[rank (?P<prefix_rank>\d+)/(?P<prefix_size>\d+)\] (?P<level>[A-Z]+) log_worker: "
    r"@@(?P<kind>info|warning) (?P<phase>\w+):(?P<rank>\d+):\d+@@$"
)
PHASES = ["before", "after"]
LIMIT = 110.0
"""Seconds: a launch on two loaded, shared cores; under the 120 s test timeout, which
counts a module fixture's setup."""


@dataclass(frozen=True)
class Run:
    """One torchrun job: its layout, what it printed and what its workers reported."""

    nodes: int
    per_node: int
    finished: list[Finished]
    reports: list[dict[str, Any]]

    @property
    def world_size(self) -> int:
        return self.nodes * self.per_node

    @property
    def stdout(self) -> str:
        return "".join(item.stdout for item in self.finished)

    def printed_by(self, kind: str, phase: str) -> list[int]:
        """The ranks that printed a ``kind`` marker in ``phase``, once per line printed."""
        return sorted(
            int(match["rank"])
            for match in MARKER.finditer(self.stdout)
            if match["kind"] == kind and match["phase"] == phase
        )

    def ranks_with_local_rank(self, local_rank: int) -> list[int]:
        return [node * self.per_node + local_rank for node in range(self.nodes)]

    def reported(self, phase: str) -> list[dict[str, Any]]:
        return sorted(
            (item for item in self.reports if item["phase"] == phase), key=lambda r: r["rank"]
        )

    def describe(self) -> str:
        return "\n".join(item.describe() for item in self.finished)


@pytest.fixture(scope="module")
def one_node() -> Run:
    finished = [run_torchrun([WORKER], nproc=3, limit=LIMIT)]
    return Run(1, 3, finished, results(finished))


@pytest.fixture(scope="module")
def two_nodes() -> Run:
    finished = run_two_nodes(
        [WORKER, "--helios-pg"],
        nproc_per_node=2,
        # gloo on the CPU even where GPUs exist, as on one node.
        extra_env={"CUDA_VISIBLE_DEVICES": ""},
        limit=LIMIT,
    )
    return Run(2, 2, finished, results(finished))


@pytest.fixture(scope="module", params=["one_node", "two_nodes"])
def run(request: pytest.FixtureRequest) -> Run:
    found: Run = request.getfixturevalue(request.param)
    return found


def test_every_worker_exits_cleanly(run: Run) -> None:
    assert [item.returncode for item in run.finished] == [0] * run.nodes, run.describe()
    assert "destroy_process_group" not in "".join(item.stderr for item in run.finished)


def test_the_after_phase_has_a_live_process_group(run: Run) -> None:
    groups = {phase: {r["process_group"] for r in run.reported(phase)} for phase in PHASES}
    assert groups == {"before": {False}, "after": {True}}, run.describe()


def test_every_rank_reports_in_both_phases(run: Run) -> None:
    for phase in PHASES:
        ranks = [r["rank"] for r in run.reported(phase)]
        assert ranks == list(range(run.world_size)), run.describe()


@pytest.mark.parametrize("phase", PHASES)
def test_global_print_prints_once_from_rank_zero(run: Run, phase: str) -> None:
    assert run.printed_by("global", phase) == [0], run.describe()


@pytest.mark.parametrize("phase", PHASES)
def test_global_print_to_the_last_rank_prints_once_from_it(run: Run, phase: str) -> None:
    assert run.printed_by("global-last", phase) == [run.world_size - 1], run.describe()


@pytest.mark.parametrize("phase", PHASES)
def test_local_print_prints_once_per_node(run: Run, phase: str) -> None:
    assert run.printed_by("local", phase) == run.ranks_with_local_rank(0), run.describe()


@pytest.mark.parametrize("phase", PHASES)
def test_local_print_to_local_rank_one_prints_once_per_node(run: Run, phase: str) -> None:
    assert run.printed_by("local-1", phase) == run.ranks_with_local_rank(1), run.describe()


@pytest.mark.parametrize("phase", PHASES)
def test_on_global_rank_runs_on_rank_zero_only(run: Run, phase: str) -> None:
    ran = [r["rank"] for r in run.reported(phase) if r["global_job"] is not None]
    assert ran == [0], run.describe()


@pytest.mark.parametrize("phase", PHASES)
def test_on_local_rank_runs_once_per_node(run: Run, phase: str) -> None:
    ran = [r["rank"] for r in run.reported(phase) if r["local_job"] is not None]
    assert ran == run.ranks_with_local_rank(0), run.describe()


def logged(run: Run, kind: str, phase: str) -> list[re.Match[str]]:
    lines = run.stdout.splitlines()
    found = [m for m in map(LOG_LINE.match, lines) if m is not None]
    return [m for m in found if m["kind"] == kind and m["phase"] == phase]


@pytest.mark.parametrize("phase", PHASES)
def test_rank_logging_logs_info_from_rank_zero_only(run: Run, phase: str) -> None:
    assert [int(m["rank"]) for m in logged(run, "info", phase)] == [0], run.describe()


@pytest.mark.parametrize("phase", PHASES)
def test_rank_logging_logs_warnings_from_every_rank_once(run: Run, phase: str) -> None:
    ranks = Counter(int(m["rank"]) for m in logged(run, "warning", phase))
    assert ranks == Counter(range(run.world_size)), run.describe()


@pytest.mark.parametrize("phase", PHASES)
def test_rank_logging_prefixes_each_line_with_its_rank(run: Run, phase: str) -> None:
    lines = logged(run, "warning", phase) + logged(run, "info", phase)
    assert lines, run.describe()
    for match in lines:
        assert match["prefix_rank"] == match["rank"]
        assert int(match["prefix_size"]) == run.world_size


def test_two_torchrun_agents_give_ranks_0_to_3_and_local_ranks_0_to_1(two_nodes: Run) -> None:
    ran = two_nodes.reported("ranks")
    seen = sorted((r["dist_rank"], r["after"]["local_rank"], r["group_rank"]) for r in ran)
    assert seen == [(0, 0, "0"), (1, 1, "0"), (2, 0, "1"), (3, 1, "1")], two_nodes.describe()
    for report in ran:
        rank = report["dist_rank"]
        # node_rank from GROUP_RANK, num_nodes from GROUP_WORLD_SIZE.
        expected = dataclasses.asdict(DistributedInfo(rank % 2, rank, 2, 4, rank // 2, 2))
        assert report["torchrun"] is True
        assert report["before"] == expected
        assert report["after"] == expected
        assert report["dist_world_size"] == 4
        assert report["backend"] == "gloo"
        assert report["total"] == sum(range(4))
    shutdown = [r["initialized"] for r in two_nodes.reports if r["phase"] == "shutdown"]
    assert shutdown == [False] * 4, two_nodes.describe()
