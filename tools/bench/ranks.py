"""Case ``ranks``: a 2-rank test under helios-pg's pytest plugin (fresh ranks, and reused
ranks) against one that calls ``torch.multiprocessing.spawn``, per test, in whole
pytest sessions timed from their JUnit reports.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

from tests.support.procs import plain_environment, run_processes
from tools.bench.rows import CaseResult, Row, Settings

__all__ = ["run"]


_RANKS_TESTS = 31
_RANKS_PLUGIN_FILE = f"""
import pytest
import torch
import torch.distributed as dist


@pytest.mark.ranks(2)
@pytest.mark.parametrize("case", range({_RANKS_TESTS}))
def test_sum(dist_info, case):
    x = torch.tensor([1.0])
    dist.all_reduce(x)
    assert x.item() == 2.0
"""
_RANKS_SPAWN_FILE = f"""
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _rank(rank, path):
    store = dist.FileStore(path, 2)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    x = torch.tensor([1.0])
    dist.all_reduce(x)
    assert x.item() == 2.0
    dist.destroy_process_group()


@pytest.mark.parametrize("case", range({_RANKS_TESTS}))
def test_sum(case, tmp_path):
    mp.spawn(_rank, args=(str(tmp_path / "store"),), nprocs=2)
"""


def _test_times(source: str, *options: str) -> list[float]:
    """Seconds of each test of a pytest session run on ``source``, from its JUnit XML."""
    import xml.etree.ElementTree as ET

    with tempfile.TemporaryDirectory(prefix="hb-", dir="/tmp") as folder:
        root = Path(folder)
        (root / "test_bench_ranks.py").write_text(source)
        report = root / "report.xml"
        env = plain_environment(os.environ) | {"GLOO_SOCKET_IFNAME": "lo", "TMPDIR": folder}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options]
        command += [f"--junitxml={report}", str(root)]
        # A session of its own: at the limit its forkserver and ranks go with pytest.
        [finished] = run_processes([(command, env)], limit=900, cwd=root)
        if finished.returncode != 0:
            raise RuntimeError(f"the benchmark's pytest session failed:\n{finished.describe()}")
        cases = ET.parse(report).getroot().iter("testcase")
        return [float(case.attrib["time"]) for case in cases]


def measure() -> list[Row]:
    """The ranks plugin's cost per 2-rank test against a ``torch.multiprocessing.spawn`` harness."""
    spawn = statistics.median(_test_times(_RANKS_SPAWN_FILE)[1:])
    rows = []
    for mode, options, goal in (
        ("fresh ranks from the forkserver", (), 0.3),
        ("--ranks-reuse", ("--ranks-reuse",), 0.05),
    ):
        # The first test starts the forkserver (it imports torch): the median leaves it out.
        ours = statistics.median(_test_times(_RANKS_PLUGIN_FILE, *options)[1:])
        rows.append(
            Row(
                "2-rank test: init, all-reduce, destroy (median of 30)",
                f"@pytest.mark.ranks(2), {mode}",
                "torch.multiprocessing.spawn(nprocs=2) per test",
                ours,
                spawn,
                "s",
                spawn / ours,
                "alternative / helios (speed-up)",
                f"helios <= {goal * 1000:g} ms",
                ours <= goal,
            )
        )
    return rows


def run(settings: Settings) -> CaseResult:
    return CaseResult(measure())
