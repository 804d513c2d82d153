"""The straggler report across virtual nodes: a node whose ranks are all slow is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.multinode.checks import LIMIT, TEST_TIMEOUT, c10d_torchrun, describe
from tests.support.netns import VirtualNodes
from tests.support.procs import results

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(TEST_TIMEOUT)]

ROOT = Path(__file__).parents[2]
WORKER = ROOT / "tests" / "pg" / "workers" / "stragglers.py"


@pytest.mark.parametrize(("slowed", "named"), [("node2", [2, 3]), ("3", [3])])
def test_the_slow_node_is_named_as_a_node_and_a_slow_rank_as_a_rank(
    nodes: VirtualNodes, slowed: str, named: list[int]
) -> None:
    by = "HELIOS_TEST_SLOWED_HOST" if slowed.startswith("node") else "HELIOS_TEST_SLOWED_RANKS"
    command = c10d_torchrun(nodes, str(WORKER))
    env = nodes.env({
        "PYTHONPATH": str(ROOT),
        "HELIOS_STRAGGLER_REPORT": "1",
        "HELIOS_TEST_LOOP": "raw",
        "HELIOS_TEST_STEP": "0.03",
        "HELIOS_TEST_SLOWED_BY": "0.5",
        by: slowed,
        "HELIOS_TEST_REPORTS": "4",
        "HELIOS_TEST_RUN": "60",
        "HELIOS_TEST_PG_TIMEOUT": "60",
    })  # fmt: skip
    finished = nodes.run_all([(node.index, command, env) for node in nodes.nodes], limit=LIMIT)

    assert all(item.returncode == 0 for item in finished), describe(finished)
    (zero,) = [item for item in results(finished) if item["rank"] == 0]
    reports = zero["reports"]
    assert len(reports) == 4, describe(finished)
    # The first period holds the ranks' start: judged from the second on.
    for report in reports[1:]:
        straggler = report["straggler"]
        assert straggler is not None, (report, describe(finished))
        assert straggler["ranks"] == named, (report, describe(finished))
        assert straggler["node"] == (len(named) > 1), report
        assert straggler["host"] == "node2", report
    line = reports[-1]["line"]
    start = "node node2 (ranks 2-3)" if len(named) > 1 else "rank 3 (node2)"
    assert line.startswith(f"helios straggler: {start} arrived last at "), line
    assert line in finished[0].stderr, describe(finished)
