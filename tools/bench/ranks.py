"""The cases of many ranks, each run as pytest sessions under helios-pg's ``ranks`` plugin:
``ranks``, the plugin itself against tests that start their ranks with
``torch.multiprocessing.spawn``; ``collectives`` and ``scale``, whose ranks run the
``on_ranks_*`` functions here and write what they measured into ``out``: every rank times
helios and the alternative in turn, behind ``dist.barrier``."""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import TCPStore

import helios_pg
from helios_collectives import (
    all_reduce_dict,
    all_reduce_tensors,
    barrier,
    broadcast_object,
    gather_objects,
    gather_uneven,
)
from tests.support.procs import free_port, launcher_variables, plain_environment
from tools.bench.agreement import on_ranks_agreement, on_ranks_reporter
from tools.bench.common import ROOT, Measured, Row, paired, row, run_checked
from tools.bench.stragglers import on_ranks_stragglers

__all__ = [
    "on_ranks",
    "on_ranks_agreement",
    "on_ranks_check",
    "on_ranks_collectives",
    "on_ranks_preemption",
    "on_ranks_reporter",
    "on_ranks_scale",
    "on_ranks_stragglers",
    "plugin",
]

_TESTS = """
from datetime import timedelta
import pytest, torch, torch.distributed as dist, torch.multiprocessing as mp

def work(kind, rank):
    if kind == "sum":
        x = torch.tensor([1.0])
        dist.all_reduce(x)
        assert x.item() == 2.0
        return
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.full((3, 4), float(rank))).sum().backward()
    optimizer.step()

def _rank(rank, kind, path):
    timeout, store = timedelta(seconds=60), dist.FileStore(path, 2)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=timeout)
    work(kind, rank)
    dist.barrier()  # neither rank tears gloo down while the other may still use it
    dist.destroy_process_group()

@pytest.mark.ranks(2)
@pytest.mark.parametrize("case", range({tests}))
def test_plugin(dist_info, case):
    work("{kind}", dist_info.rank)

@pytest.mark.parametrize("case", range({tests}))
def test_spawn(case, tmp_path):
    mp.spawn(_rank, args=("{kind}", str(tmp_path / "store")), nprocs=2)
"""
_ON_RANKS = """
@pytest.mark.ranks({world}, timeout=900)
def test_{world}():
    ranks.on_ranks_{function}(Path({out!r}))
"""


def _session(source: str, *options: str, **env: str) -> float:
    """Median seconds per test of a pytest session on ``source``, but its first test."""
    with tempfile.TemporaryDirectory(prefix="hb-", dir="/tmp") as folder:
        Path(folder, "test_bench_ranks.py").write_text(source)
        env = plain_environment(os.environ) | env | {"GLOO_SOCKET_IFNAME": "lo", "TMPDIR": folder}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options]
        run_checked([*command, "--junitxml=r.xml", "."], env, limit=900, cwd=folder)
        times = [float(t.attrib["time"]) for t in ET.parse(Path(folder, "r.xml")).iter("testcase")]
    return statistics.median(times[1:] or times)


def on_ranks(function: str, *worlds: int) -> Measured:
    """``on_ranks_<function>`` as a ranks test per world size: the rows its rank 0 wrote."""
    with tempfile.TemporaryDirectory(prefix="hb-out-") as out:
        source = "from pathlib import Path\n\nimport pytest\n\nfrom tools.bench import ranks\n"
        source += "".join(_ON_RANKS.format(world=w, function=function, out=out) for w in worlds)
        _session(source, PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore", OPENBLAS_NUM_THREADS="1")
        found = [json.loads(Path(out, f"{w}.json").read_text()) for w in worlds]
    return [Row(**r) for rows in found for r in rows], {}


def plugin() -> Measured:
    """Per 2-rank test against spawn: fresh and reused ranks, and a DDP step on fresh ranks
    (a spawn session pays seconds per test, so it runs fewer of those)."""

    def per_test(harness: str, kind: str, tests: int, *options: str) -> float:
        return _session(_TESTS.format(kind=kind, tests=tests), "-k", harness, *options)

    spawn, ranks = "torch.multiprocessing.spawn(nprocs=2)", "@pytest.mark.ranks(2), "
    spawned, ddp_spawn = per_test("spawn", "sum", 31), per_test("spawn", "ddp", 4)
    fresh, ddp = per_test("plugin", "sum", 31), per_test("plugin", "ddp", 7)
    reused, faster = per_test("plugin", "sum", 31, "--ranks-reuse"), partial(row, speed_up=True)
    test = "2-rank test: init, all-reduce, destroy (median of 30)"
    ddp_test = "2-rank DDP test: construct, forward, backward, step, fresh ranks"
    fork, per = f"{ranks}fresh ranks from the forkserver", f"{spawn} per test"
    preloaded, stored = f"{ranks}torch's DDP stack preloaded", f"{spawn}, FileStore"
    both = (ddp, ddp_spawn)
    return [
        faster(test, fork, per, (fresh, spawned), goal="helios <= 300 ms", headline=True),
        faster(test, f"{ranks}--ranks-reuse", per, (reused, spawned), goal="helios <= 50 ms"),
        faster(ddp_test, preloaded, stored, both, goal="helios <= 500 ms", headline=True),
    ], {}


_TIMEOUT = timedelta(seconds=120)
_timed = partial(paired, before=dist.barrier)  # every rank times the same call at once


def _by_hand(t: torch.Tensor) -> torch.Tensor:
    """An uneven gather as a user would write it: exchange the sizes, pad, gather, trim."""
    sizes = [torch.zeros(1, dtype=torch.long) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([t.shape[0]]))
    counts = [int(s.item()) for s in sizes]
    padded = torch.zeros(max(counts), *t.shape[1:])
    padded[: t.shape[0]] = t
    parts = [torch.empty_like(padded) for _ in counts]
    dist.all_gather(parts, padded)
    return torch.cat([part[:count] for part, count in zip(parts, counts, strict=True)])


def _as_objects(t: torch.Tensor) -> torch.Tensor:
    objects: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(objects, t)
    return torch.cat(objects)


def on_ranks_collectives(out: Path) -> None:
    """Two ranks: coalescing, the uneven gather, objects and dicts; rank 0 writes the rows."""
    tensors = [torch.rand(16) for _ in range(64)]

    def loop() -> None:
        for t in tensors:
            dist.all_reduce(t)

    coalesced = _timed(partial(all_reduce_tensors, tensors), loop, number=20, repeat=9)
    case, helios = "coalescing: all-reduce of 64 tensors of 16 floats", "all_reduce_tensors(list)"
    alternative, faster = "64 x dist.all_reduce", partial(row, speed_up=True)
    rows = [faster(case, helios, alternative, coalesced, goal=">= 10", headline=True)]
    # About 4 KiB and 1 MiB per rank (rows of 1 KiB), first dimensions differing by rank.
    for label, base, step, number in (("~4 KiB", 4, 1, 200), ("~1 MiB", 1024, 64, 10)):
        t, case = torch.rand(base + step * dist.get_rank(), 256), f"uneven gather, {label} per rank"
        for alternative, theirs, goal in (
            ("by hand: all_gather sizes, pad, all_gather, trim", _by_hand, ">= 1"),
            ("all_gather_object", _as_objects, ">= 2"),
        ):
            ours = partial(gather_uneven, t)
            measured = _timed(ours, partial(theirs, t), number=number, repeat=15)
            rows.append(faster(case, "gather_uneven", alternative, measured, goal=goal))
    config, vocab = {"lr": 0.1, "layers": [64] * 8}, [f"w{i}" for i in range(20_000)]
    for label, obj in (("a config dict", config), ("a 20,000-word vocabulary", vocab)):
        listed = partial(dist.broadcast_object_list, [obj])
        timed = _timed(partial(broadcast_object, obj), listed, number=20, repeat=9)
        rows.append(faster(f"broadcast {label}", "broadcast_object", "broadcast_object_list",
                           timed, goal=">= 1"))  # fmt: skip
        slots: list[object] = [None] * dist.get_world_size()
        gathered = partial(dist.all_gather_object, slots, obj)
        timed = _timed(partial(gather_objects, obj), gathered, number=20, repeat=9)
        rows.append(faster(f"gather {label}", "gather_objects", "all_gather_object", timed,
                           goal=">= 1"))  # fmt: skip
    metrics = {f"m{i}": torch.rand(()) for i in range(8)}

    def each() -> None:
        for value in metrics.values():
            dist.all_reduce(value)

    timed = _timed(partial(all_reduce_dict, metrics), each, number=50, repeat=9)
    rows.append(faster("a dict of 8 metrics", "all_reduce_dict", "8 x dist.all_reduce", timed,
                       goal=">= 1"))  # fmt: skip
    if dist.get_rank() == 0:
        out.joinpath("2.json").write_text(json.dumps([asdict(r) for r in rows]))


def on_ranks_check(out: Path) -> None:
    """One world size: ``all_reduce_tensors`` with its default check (every rank makes the
    same call) against ``dist.all_reduce`` of the same tensor; rank 0 writes the rows."""
    world, rows = dist.get_world_size(), []
    at = f"the default check, {world} ranks: "
    ours, theirs = "all_reduce_tensors", "dist.all_reduce"
    for label, elements, number, repeat, goal in (
        ("1 element", 1, 100, 21, "<= 1.3"),
        ("1 MiB", 2**18, 5, 11, "<= 1.03"),
        ("16 MiB", 2**22, 1, 7, "<= 1.03"),
    ):
        t = torch.rand(elements)
        measured = _timed(partial(all_reduce_tensors, t), partial(dist.all_reduce, t),
                          number=number, repeat=repeat)  # fmt: skip
        rows.append(row(f"{at}all-reduce of {label}", ours, theirs, measured, goal=goal,
                        headline=elements == 1))  # fmt: skip
    unchecked = partial(all_reduce_tensors, torch.rand(1), validate=False)
    measured = _timed(unchecked, partial(dist.all_reduce, torch.rand(1)), number=100, repeat=21)
    rows.append(row(f"{at}all-reduce of 1 element", f"{ours}(validate=False)", theirs, measured))
    if dist.get_rank() == 0:
        out.joinpath(f"{world}.json").write_text(json.dumps([asdict(r) for r in rows]))


def on_ranks_scale(out: Path) -> None:
    """One world size: helios's init (all ranks starting at one moment) and barrier, memory,
    and torch's init. Rank 0 writes the rows: medians over the ranks, init the slowest's."""
    rank, world = dist.get_rank(), dist.get_world_size()
    plan: list[Any] = [time.time() + 1.0 + 0.05 * world, free_port(), free_port(), 0.0]
    dist.broadcast_object_list(plan, 0)
    helios_pg.shutdown()  # the plugin's group: the one timed here is formed by env://
    os.environ.update(launcher_variables(rank, world, plan[1]))
    time.sleep(max(0.0, plan[0] - time.time()))
    helios_pg.init(timeout=_TIMEOUT)
    result: dict[str, Any] = {"init": time.time() - plan[0]}
    for name in ("barrier", "monitored_barrier"):
        result[name] = _timed(partial(barrier, 60.0), getattr(dist, name), number=20, repeat=5)
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in {"Pss", "Rss"}:
            result[name.lower()] = int(rest.split()[0]) / 1024  # MiB
    plan[3] = time.time() + 1.0
    dist.broadcast_object_list(plan, 0)
    helios_pg.shutdown()
    time.sleep(max(0.0, plan[3] - time.time()))
    store = TCPStore("127.0.0.1", plan[2], world, rank == 0, timeout=_TIMEOUT)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=_TIMEOUT)
    result["tcp"] = time.time() - plan[3]
    ranks: list[Any] = [None] * world
    dist.all_gather_object(ranks, result)
    dist.destroy_process_group()
    if rank != 0:
        return
    at, init = f"scale, {world} ranks: ", [max(r[k] for r in ranks) for k in ("init", "tcp")]
    helios, tcp = "helios_pg.init (env://, TCPStore)", "init_process_group on a TCPStore"
    rows = [row(at + "init, slowest rank", helios, tcp, init)]
    for name in ("barrier", "monitored_barrier"):
        ours = "helios_collectives.barrier"
        goal = "<= 3" if name == "barrier" and world == 64 else "report"
        measured = [statistics.median(r[name][i] for r in ranks) for i in range(3)]
        rows.append(row(f"{at}{ours} per call", ours, f"dist.{name}", measured, goal=goal))
    memory = [statistics.median(r[key] for r in ranks) for key in ("pss", "rss")]
    case = at + "memory per rank (forked by the ranks plugin)"
    rows.append(row(case, "PSS (shared pages counted once)", "RSS", memory, unit="MiB"))
    out.joinpath(f"{world}.json").write_text(json.dumps([asdict(r) for r in rows]))


def on_ranks_preemption(out: Path) -> None:
    """One world size: ``should_stop()`` per call against the one-element all-reduce it
    makes, and against a small training step (a linear layer's forward, backward and an
    all-reduce of its gradient); rank 0 writes the rows."""
    world, flag = dist.get_world_size(), torch.zeros(1, dtype=torch.int32)
    model = torch.nn.Linear(256, 256)
    batch = torch.rand(32, 256)

    def step() -> None:
        model.zero_grad()
        model(batch).sum().backward()
        assert model.weight.grad is not None
        dist.all_reduce(model.weight.grad)

    with helios_pg.preemption(("SIGUSR1",)) as stop:
        bare = _timed(stop.should_stop, partial(dist.all_reduce, flag), number=50, repeat=9)
        typical = _timed(stop.should_stop, step, number=20, repeat=9)
    if dist.get_rank() == 0:
        at, ours = f"preemption, {world} ranks: ", "Preemption.should_stop()"
        rows = [
            row(f"{at}per call", ours, "dist.all_reduce, one element", bare, goal="<= 1.2"),
            row(f"{at}against a step", ours, "a small DDP-like step (256x256)", typical),
        ]
        out.joinpath(f"{world}.json").write_text(json.dumps([asdict(r) for r in rows]))
