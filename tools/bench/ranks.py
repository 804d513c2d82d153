"""Case ``ranks``: 2-rank tests under helios-pg's pytest plugin against the same tests
written with ``torch.multiprocessing.spawn``, per test, in whole pytest sessions timed
from their JUnit reports.

A test of one all-reduce, on fresh ranks and on reused ones; a DDP test (construct,
forward, backward, step) and an FSDP2 one on fresh ranks, with the forkserver's
preload of torch's DDP stack and without it (``ranks_preload_torch = false``), and the
forkserver's start-up time either way, from the session's terminal summary.
"""

from __future__ import annotations

import os
import re
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


_STEP_TESTS = 7
_STEP_SLOW_TESTS = 4
"""Tests per session where each pays seconds of imports (spawn, no preload)."""
_STEP = """
import torch
import torch.distributed as dist


def step(kind, rank):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model)
    else:
        import importlib

        fully_shard = getattr(importlib.import_module("torch.distributed.fsdp"),
                              "fully_shard", None)
        if fully_shard is None:  # torch before 2.6
            fully_shard = importlib.import_module(
                "torch.distributed._composable.fsdp").fully_shard
        fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.full((3, 4), float(rank))).sum().backward()
    optimizer.step()
"""
_STEP_PLUGIN_FILE = (
    _STEP
    + """
import pytest


@pytest.mark.ranks(2)
@pytest.mark.parametrize("case", range({tests}))
def test_step(dist_info, case):
    step("{kind}", dist_info.rank)
"""
)
_STEP_SPAWN_FILE = (
    _STEP
    + """
from datetime import timedelta

import pytest
import torch.multiprocessing as mp


def _rank(rank, path):
    store = dist.FileStore(path, 2)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    step("{kind}", rank)
    # Neither rank tears gloo down while the other may still use it.
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.parametrize("case", range({tests}))
def test_step(case, tmp_path):
    mp.spawn(_rank, args=(str(tmp_path / "store"),), nprocs=2)
"""
)
_SERVER_READY = re.compile(r"forkserver ready in ([0-9.]+) s")


def _test_times(source: str, *options: str) -> list[float]:
    """Seconds of each test of a pytest session run on ``source``, from its JUnit XML."""
    return _session(source, *options)[0]


def _session(source: str, *options: str) -> tuple[list[float], str]:
    """Each test's seconds of a pytest session run on ``source``, and its output."""
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
        return [float(case.attrib["time"]) for case in cases], finished.stdout


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


def _server_seconds(output: str) -> float:
    found = _SERVER_READY.search(output)
    if found is None:
        raise RuntimeError(f"the session did not say when its forkserver was ready:\n{output}")
    return float(found.group(1))


def measure_steps() -> list[Row]:
    """DDP and FSDP2 steps on fresh ranks, with and without the forkserver's preload."""
    no_preload = ("-o", "ranks_preload_torch=false")
    rows = []
    starts: dict[str, list[float]] = {"preload": [], "none": []}
    for kind, name in (("ddp", "DDP"), ("fsdp2", "FSDP2 (fully_shard)")):
        fast = {"kind": kind, "tests": _STEP_TESTS}
        slow = {"kind": kind, "tests": _STEP_SLOW_TESTS}
        # The first test of each session also waits for the forkserver: left out.
        times, output = _session(_STEP_PLUGIN_FILE.format(**fast))
        ours = statistics.median(times[1:])
        starts["preload"].append(_server_seconds(output))
        times, output = _session(_STEP_PLUGIN_FILE.format(**slow), *no_preload)
        unloaded = statistics.median(times[1:])
        starts["none"].append(_server_seconds(output))
        alternatives = [
            ("@pytest.mark.ranks(2), ranks_preload_torch = false", unloaded),
        ]
        if kind == "ddp":
            spawn = statistics.median(_test_times(_STEP_SPAWN_FILE.format(**slow))[1:])
            alternatives.insert(0, ("torch.multiprocessing.spawn(nprocs=2), FileStore", spawn))
        for alternative, theirs in alternatives:
            rows.append(
                Row(
                    f"2-rank {name} test: construct, forward, backward, step, fresh ranks",
                    "@pytest.mark.ranks(2), torch's DDP stack preloaded",
                    alternative,
                    ours,
                    theirs,
                    "s",
                    theirs / ours,
                    "alternative / helios (speed-up)",
                    "helios <= 500 ms",
                    ours <= 0.5,
                )
            )
    preload, none = statistics.median(starts["preload"]), statistics.median(starts["none"])
    rows.append(
        Row(
            "ranks plugin: forkserver start-up, once per session",
            "torch, pytest, helios-pg and torch's DDP stack",
            "torch, pytest, helios-pg (ranks_preload_torch = false)",
            preload,
            none,
            "s",
            preload / none,
            "helios / alternative",
            "report",
            True,
        )
    )
    return rows


_MEMORY_WORLDS = (2, 8, 32)
_MEMORY_FILE = """
import json
import os
from pathlib import Path

import pytest
import torch.distributed as dist

OUT = Path({out!r})


def _record(world, rank):
    dist.barrier()  # every rank of the test is alive and has run a collective
    found = {{}}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("Pss", "Rss"):
            found[name.lower()] = int(rest.split()[0]) * 1024
    OUT.joinpath(f"{{world}}-{{rank}}.json").write_text(json.dumps(found))
    dist.barrier()
""" + "".join(
    f"""

@pytest.mark.ranks({world}, timeout=300)
def test_memory_{world}(dist_info):
    _record({world}, dist_info.rank)
"""
    for world in _MEMORY_WORLDS
)


def measure_memory() -> list[Row]:
    """PSS and RSS per rank of the ranks plugin's fresh ranks, at 2, 8 and 32 ranks."""
    import json

    rows = []
    with tempfile.TemporaryDirectory(prefix="hb-memory-") as folder:
        _session(_MEMORY_FILE.format(out=folder))
        for world in _MEMORY_WORLDS:
            found = [
                json.loads(Path(folder, f"{world}-{rank}.json").read_text())
                for rank in range(world)
            ]
            pss = statistics.median(f["pss"] for f in found) / 2**20
            rss = statistics.median(f["rss"] for f in found) / 2**20
            rows.append(
                Row(
                    f"ranks plugin: memory per rank, {world} ranks (torch preloaded)",
                    "PSS (shared pages counted once)",
                    "RSS",
                    pss,
                    rss,
                    "MiB",
                    pss / rss,
                    "helios / alternative",
                    "report",
                    True,
                )
            )
    return rows


def run(settings: Settings) -> CaseResult:
    return CaseResult(measure() + measure_steps() + measure_memory())
