"""Benchmarks of helios against the alternatives, side by side in one run.

Every figure is a ratio measured in the same run on the same machine, so the table
compares like with like; absolute times are shown for context only. Run it with::

    uv run python tools/bench.py              # every case: tools/results/bench.{md,json}
    uv run python tools/bench.py busbw ranks  # only these cases; the others are kept
    uv run python tools/bench.py --no-run     # rewrite the tables and the plot from bench.json

``bench.json`` holds each case's rows with the machine, Python, torch and date of the run
that measured it; running some cases replaces only their entries, and ``bench.md`` (the
table the documentation includes) is rewritten from the whole file, its first line naming
the run or runs behind it.

Cases (each helios variant against what a program would otherwise use):

- import: ``import helios_env, helios_log`` against ``import torch.distributed``;
- gating: ``helios_log.global_print`` on a rank that does not print, against
  helios-ml 2.0.1's ``global_print`` with its group live;
- coalescing: ``all_reduce_tensors`` on 64 small tensors against 64
  ``torch.distributed.all_reduce`` calls (2 processes);
- overhead: ``all_reduce_tensors`` and ``gather_into_tensor`` against the raw torch
  calls, for 1 element and 16 MiB (2 processes);
- uneven gather: against pad-to-largest-then-gather and against ``all_gather_object``
  (2 processes, 1 MiB per rank);
- validation: ``all_reduce_tensors(validate=True)`` against the unvalidated call;
- world-size-one init: the ``HashStore`` path against ``init_process_group`` with a
  ``TCPStore`` at world size one;
- per-call cost: ``all_reduce_tensors``, ``gather_into_tensor`` and ``safe_barrier``
  against the raw torch calls at world size one on gloo, where no transport hides
  what helios adds;
- print gates: ``global_print`` and ``local_print`` on a rank that does not print,
  against a bare ``int(os.environ[...])`` test.
- hostlist: ``helios_env.expand_hostlist`` against python-hostlist on 10,000 nodes;
- ranks: a 2-rank test under helios-pg's pytest plugin (fresh ranks, and reused ranks)
  against one that calls ``torch.multiprocessing.spawn``, per test, in whole sessions;
- busbw: the bus bandwidth that ``python -m helios_collectives`` reports for all-reduce
  and all-gather from 4 B to 16 MiB under ``torchrun --nproc-per-node 2``, against the
  same sweep written with bare ``torch.distributed`` calls (tools/bench_workers.py), the
  two runs alternating; it also writes ``busbw.md`` (every size) and ``busbw.svg`` (the
  plot).

helios-ml is installed from PyPI with ``--no-deps`` into ``.bench/`` and its
``helios/core/distributed.py`` (which imports only torch) is loaded by path: the
package's ``__init__`` pulls in opencv, matplotlib and onnx, none of which the
compared function uses.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any
from xml.sax.saxutils import escape

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as ``python tools/bench.py``
    sys.path.insert(0, str(ROOT))

from tests.support.procs import (  # noqa: E402
    base_env,
    free_port,
    plain_environment,
    run_hand_started,
    run_processes,
    torchrun_command,
)

BENCH_DIR = ROOT / ".bench"
HELIOS_ML = "helios-ml==2.0.1"
DEFAULT_OUT = ROOT / "tools" / "results"


@dataclass(frozen=True)
class Row:
    case: str
    helios: str
    alternative: str
    helios_value: float
    alternative_value: float
    unit: str
    ratio: float
    ratio_meaning: str
    goal: str
    met: bool


@dataclass(frozen=True)
class CaseResult:
    """What one case measured: its table rows, and any data its figures are drawn from."""

    rows: list[Row]
    data: dict[str, Any] = field(default_factory=dict)


def _fmt(value: float, unit: str) -> str:
    if unit == "s":
        for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
            if value >= scale:
                return f"{value / scale:.3g} {name}"
        return f"{value * 1e9:.3g} ns"
    if unit == "MiB":
        return f"{value:.1f} MiB"
    if unit == "GB/s":
        return _bandwidth(value)
    return f"{value:.3g} {unit}"


def _bandwidth(gbps: float) -> str:
    """A bandwidth given in GB/s (10**9 bytes per second), in the unit that suits it."""
    for scale, name in ((1.0, "GB/s"), (1e-3, "MB/s"), (1e-6, "kB/s")):
        if gbps >= scale:
            return f"{gbps / scale:.3g} {name}"
    return f"{gbps * 1e9:.3g} B/s"


def _bytes(size: float) -> str:
    """A byte count with a binary unit: ``4 B``, ``64 KiB``, ``16 MiB``."""
    for scale, name in ((1024.0**3, "GiB"), (1024.0**2, "MiB"), (1024.0, "KiB")):
        if size >= scale:
            return f"{size / scale:.3g} {name}"
    return f"{size:.0f} B"


# --------------------------------------------------------------------------- timing


def paired(
    a: Callable[[], object], b: Callable[[], object], *, number: int, repeat: int = 41
) -> tuple[float, float, float]:
    """Seconds per call of ``a`` and ``b`` and their ratio, robust to drift and order.

    Each round times ``a`` and ``b`` back to back, in alternating order; the result is
    the median time of each and the median of the per-round ratios ``a / b``.
    """
    ta: list[float] = []
    tb: list[float] = []
    ratios: list[float] = []
    for round_ in range(repeat):
        order = ((a, ta), (b, tb)) if round_ % 2 == 0 else ((b, tb), (a, ta))
        for fn, out in order:
            start = time.perf_counter()
            for _ in range(number):
                fn()
            out.append((time.perf_counter() - start) / number)
        ratios.append(ta[-1] / tb[-1])
    return statistics.median(ta), statistics.median(tb), statistics.median(ratios)


def interleaved(
    a: Callable[[], object], b: Callable[[], object], *, number: int, repeat: int = 9
) -> tuple[float, float]:
    """Medians of seconds per call for ``a`` and ``b``, measured in alternation."""
    ta: list[float] = []
    tb: list[float] = []
    for _ in range(repeat):
        for fn, out in ((a, ta), (b, tb)):
            start = time.perf_counter()
            for _ in range(number):
                fn()
            out.append((time.perf_counter() - start) / number)
    return statistics.median(ta), statistics.median(tb)


# --------------------------------------------------------------------------- import


def _import_probe(code: str, repeat: int) -> tuple[float, float]:
    """Median wall seconds and median resident memory (MiB) of ``python -I -c code``."""
    walls: list[float] = []
    rss: list[float] = []
    probe = (
        "import os, time; t = time.perf_counter(); "
        f"{code}; "
        "print(time.perf_counter() - t, "
        "int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 1024)"
    )
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-I", "-W", "ignore", "-c", probe],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        walls.append(float(out[0]))
        rss.append(float(out[1]) / 1024)
    return statistics.median(walls), statistics.median(rss)


def bench_import(repeat: int) -> list[Row]:
    _, base_rss = _import_probe("pass", repeat)
    ours_t, ours_rss = _import_probe("import helios_env, helios_log", repeat)
    torch_t, torch_rss = _import_probe("import torch.distributed", repeat)
    ratio = ours_t / torch_t
    mem_ratio = (ours_rss - base_rss) / max(torch_rss - base_rss, 1e-9)
    return [
        Row(
            "import time",
            "import helios_env, helios_log",
            "import torch.distributed",
            ours_t,
            torch_t,
            "s",
            ratio,
            "helios / alternative",
            "<= 0.05",
            ratio <= 0.05,
        ),
        Row(
            "import memory (RSS added)",
            "import helios_env, helios_log",
            "import torch.distributed",
            ours_rss - base_rss,
            torch_rss - base_rss,
            "MiB",
            mem_ratio,
            "helios / alternative",
            "-",
            True,
        ),
    ]


# --------------------------------------------------------------------------- gating


def _install(target: Path, *requirements: str) -> None:
    subprocess.run(
        [
            "uv",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(target),
            "--python",
            sys.executable,
            *requirements,
        ],
        check=True,
    )


def _helios_ml() -> ModuleType:
    target = BENCH_DIR / "helios-ml"
    source = target / "helios" / "core" / "distributed.py"
    if not source.exists():
        _install(target, HELIOS_ML)
    spec = importlib.util.spec_from_file_location("helios_ml_distributed", source)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_gating() -> list[Row]:
    import torch.distributed as dist

    import helios_log
    import helios_pg

    hml = _helios_ml()
    # helios-ml reads these four variables whenever a group is live.
    saved = dict(os.environ)
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    try:
        helios_pg.init(backend="gloo")
        assert dist.is_initialized()
        ours, theirs = interleaved(
            lambda: helios_log.global_print("never shown", global_rank=1),
            lambda: hml.global_print("never shown", global_rank=1),
            number=20_000,
        )
    finally:
        helios_pg.shutdown()
        os.environ.clear()
        os.environ.update(saved)
    ratio = ours / theirs
    return [
        Row(
            "gating: global_print on a rank that does not print",
            "helios_log.global_print",
            "helios-ml 2.0.1 global_print",
            ours,
            theirs,
            "s",
            ratio,
            "helios / alternative",
            "<= 1.0",
            ratio <= 1.0,
        )
    ]


# --------------------------------------------------------------------------- init


def bench_init(repeat: int) -> list[Row]:
    import torch.distributed as dist

    import helios_pg

    def ours() -> None:
        helios_pg.init()
        helios_pg.shutdown()

    def tcp() -> None:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{free_port()}",
            rank=0,
            world_size=1,
            timeout=timedelta(seconds=30),
        )
        dist.destroy_process_group()

    ours_t, tcp_t = interleaved(ours, tcp, number=5, repeat=repeat)
    ratio = tcp_t / ours_t
    return [
        Row(
            "world-size-one init + shutdown",
            "helios_pg.init() (HashStore, gloo)",
            "init_process_group (TCPStore, gloo)",
            ours_t,
            tcp_t,
            "s",
            ratio,
            "alternative / helios (speed-up)",
            "report",
            True,
        )
    ]


def bench_call_cost() -> list[Row]:
    """What helios adds per call, apart from any transport: world size one on gloo."""
    import torch
    import torch.distributed as dist

    import helios_pg
    from helios_collectives import all_reduce_tensors, gather_into_tensor, safe_barrier

    helios_pg.init(backend="gloo")
    try:
        t = torch.rand(1)

        def raw_gather() -> None:
            # What gather_into_tensor does: a new tensor with the input's dtype and device.
            out = torch.empty((1,), dtype=t.dtype, device=t.device)
            dist.all_gather_into_tensor(out, t)

        measured: list[tuple[str, str, Callable[[], object], Callable[[], object]]] = [
            (
                "all_reduce_tensors",
                "dist.all_reduce",
                lambda: all_reduce_tensors(t),
                lambda: dist.all_reduce(t),
            ),
            (
                "gather_into_tensor",
                "torch.empty + dist.all_gather_into_tensor",
                lambda: gather_into_tensor(t, (1,)),
                raw_gather,
            ),
            ("safe_barrier", "dist.barrier", safe_barrier, dist.barrier),
        ]
        rows = []
        for helios, raw, ours_fn, raw_fn in measured:
            ours, theirs, ratio = paired(ours_fn, raw_fn, number=200, repeat=201)
            rows.append(
                Row(
                    "per-call cost, 1 element, world size one (gloo)",
                    helios,
                    raw,
                    ours,
                    theirs,
                    "s",
                    ratio,
                    "helios / alternative",
                    "<= 1.1",
                    ratio <= 1.1,
                )
            )
    finally:
        helios_pg.shutdown()
    return rows


def bench_print_gates() -> list[Row]:
    """A print on a rank that does not print, against the bare environment-variable gate."""
    import torch.distributed as dist

    import helios_log
    import helios_pg

    def bare_global() -> None:
        if int(os.environ["RANK"]) != 0:
            return
        print("never shown")

    def bare_local() -> None:
        if int(os.environ["LOCAL_RANK"]) != 1:
            return
        print("never shown")

    torchrun = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "0",
        "GROUP_WORLD_SIZE": "1",
        "ROLE_RANK": "1",
        "TORCHELASTIC_RUN_ID": "bench",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
    }
    saved = dict(os.environ)
    rows = []
    try:
        # Rank 1 of a torchrun job, before init: global_print(..., global_rank=0).
        os.environ.update(torchrun)
        assert not dist.is_initialized()
        ours, theirs, ratio = paired(
            lambda: helios_log.global_print("never shown"), bare_global, number=20_000
        )
        rows.append(
            ("global_print on rank 1, before init, under torchrun", "RANK", ours, theirs, ratio)
        )
        # Local rank 0 with a live group: local_print(..., local_rank=1).
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
        helios_pg.init(backend="gloo")
        try:
            ours, theirs, ratio = paired(
                lambda: helios_log.local_print("never shown", local_rank=1),
                bare_local,
                number=20_000,
            )
        finally:
            helios_pg.shutdown()
        rows.append(
            (
                "local_print(local_rank=1) on local rank 0, live group",
                "LOCAL_RANK",
                ours,
                theirs,
                ratio,
            )
        )
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return [
        Row(
            f"print gate: {case}",
            case.split("(")[0].split(" ")[0],
            f"if int(os.environ[{variable!r}]) != ...: return",
            ours,
            theirs,
            "s",
            ratio,
            "helios / alternative",
            "<= 4",
            ratio <= 4,
        )
        for case, variable, ours, theirs, ratio in rows
    ]


# --------------------------------------------------------------------------- hostlist


def bench_hostlist() -> list[Row]:
    """``expand_hostlist`` against python-hostlist on 10,000 nodes in three shapes."""
    import functools

    import hostlist  # type: ignore[import-untyped]

    from helios_env._hostlist import expand_hostlist

    shapes = [
        ("one padded range", "n[00001-10000]"),
        ("100 items of 100", ",".join(f"rack{r:02d}-n[001-100]" for r in range(100))),
        ("two groups, 100 x 100", "rack[001-100]-n[001-100]"),
    ]
    rows = []
    for shape, nodelist in shapes:
        # python-hostlist removes duplicates unless told not to; Slurm (and helios) keep them.
        ours_fn = functools.partial(expand_hostlist, nodelist)
        theirs_fn = functools.partial(hostlist.expand_hostlist, nodelist, allow_duplicates=True)
        assert ours_fn() == theirs_fn()
        assert len(ours_fn()) == 10_000
        ours, theirs, ratio = paired(ours_fn, theirs_fn, number=5)
        rows.append(
            Row(
                f"hostlist: 10,000 nodes, {shape}",
                f"expand_hostlist({nodelist[:24]}{'...' if len(nodelist) > 24 else ''})",
                "hostlist.expand_hostlist (python-hostlist)",
                ours,
                theirs,
                "s",
                ratio,
                "helios / alternative",
                "10,000 nodes well under 5 ms",
                ours < 5e-3,
            )
        )
    return rows


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


def bench_ranks() -> list[Row]:
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


# --------------------------------------------------------------------------- multi-process


def _spawn_workers(case: str, world_size: int, timeout: float) -> list[dict[str, Any]]:
    finished = run_hand_started(
        Path(__file__).with_name("bench_workers.py"),
        world_size,
        args=[case],
        extra_env={"PYTHONWARNINGS": "ignore"},
        limit=timeout,
    )
    for item in finished:
        if item.returncode != 0:
            message = f"benchmark worker {case!r} failed with status {item.returncode}"
            raise RuntimeError(message)
    line = next(ln for ln in finished[0].stdout.splitlines() if ln.startswith("{"))
    return list(json.loads(line)["rows"])


# --------------------------------------------------------------------------- bus bandwidth

BUSBW_SIZES = [4 * 4**i for i in range(12)]
"""Message sizes in bytes: 4 B to 16 MiB by factors of 4, the main job's default sweep
without its two largest sizes, which would double the time of the case."""
BUSBW_ROUNDS = 5
"""Runs of each sweep; the order alternates from one round to the next."""
BUSBW_ITERS = 20
BUSBW_WARMUP = 5
"""Timed and warm-up calls per size: the main job's defaults, for both sweeps."""
BUSBW_RANKS = 2
BUSBW_LIMIT = 120.0
"""Seconds allowed to one torchrun run of either sweep."""

Point = dict[str, Any]


def _sweep_once(script_and_args: list[str], path: Path, what: str) -> dict[str, Any]:
    """Run one sweep under ``torchrun --standalone``; rank 0 writes its JSON to ``path``.

    ``--standalone`` serves the rendezvous on a port the kernel picks, so runs never
    collide with one another or with anything else on the machine.
    """
    path.unlink(missing_ok=True)
    env = base_env({"CUDA_VISIBLE_DEVICES": "", "PYTHONWARNINGS": "ignore"})
    env.pop("HELIOS_VALIDATE_COLLECTIVES", None)  # the main job measures plain calls
    command = torchrun_command("--standalone", f"--nproc-per-node={BUSBW_RANKS}")
    (finished,) = run_processes([([*command, *script_and_args], env)], limit=BUSBW_LIMIT)
    if finished.returncode != 0:
        message = f"{what} failed with status {finished.returncode}:\n{finished.stderr[-3000:]}"
        raise RuntimeError(message)
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def bench_busbw() -> CaseResult:
    """The main job's bus bandwidth against the same sweep on bare ``torch.distributed``."""
    sizes = ",".join(str(size) for size in BUSBW_SIZES)
    counts = ["--iters", str(BUSBW_ITERS), "--warmup", str(BUSBW_WARMUP)]
    runs: dict[str, list[dict[str, Any]]] = {"helios": [], "torch": []}
    with tempfile.TemporaryDirectory(prefix="hb-busbw-", dir="/tmp") as folder:
        helios_json = Path(folder) / "helios.json"
        torch_json = Path(folder) / "torch.json"
        helios_run = ["-m", "helios_collectives", "--backend", "gloo", "--sizes", sizes]
        helios_run += [*counts, "--json", str(helios_json)]
        worker = str(Path(__file__).with_name("bench_workers.py"))
        torch_run = [worker, "busbw", sizes, str(BUSBW_ITERS), str(BUSBW_WARMUP)]
        torch_run.append(str(torch_json))
        sweeps = {
            "helios": (helios_run, helios_json, "python -m helios_collectives"),
            "torch": (torch_run, torch_json, "the bare torch.distributed sweep"),
        }
        for round_ in range(BUSBW_ROUNDS):
            order = ("helios", "torch") if round_ % 2 == 0 else ("torch", "helios")
            for name in order:
                script_and_args, path, what = sweeps[name]
                runs[name].append(_sweep_once(script_and_args, path, what))
    sweep = _busbw_sweep(
        [run["benchmark"] for run in runs["helios"]], [run["benchmark"] for run in runs["torch"]]
    )
    data = {
        "rounds": BUSBW_ROUNDS,
        "iters": BUSBW_ITERS,
        "warmup": BUSBW_WARMUP,
        "calls": {"all_reduce": "dist.all_reduce", "all_gather": runs["torch"][0]["gather_call"]},
        "sweep": sweep,
    }
    return CaseResult(_busbw_rows(data), data)


def _busbw_sweep(helios: list[list[Point]], torch: list[list[Point]]) -> list[Point]:
    """Per operation and size: each sweep's best run, and the ratio of the two.

    Other work on the machine only ever slows a run down, so the fastest of the runs
    (the highest bus bandwidth) is the one least disturbed; the ratio is helios's best
    bus bandwidth over torch's. Every run's figure is kept alongside.
    """
    sweep: list[Point] = []
    keys = [(p["operation"], p["size_bytes"]) for p in helios[0]]
    for operation, size in keys:

        def at(run: list[Point], operation: str = operation, size: int = size) -> Point:
            return next(p for p in run if (p["operation"], p["size_bytes"]) == (operation, size))

        point: Point = {"operation": operation, "size_bytes": size}
        for name, runs in (("helios", helios), ("torch", torch)):
            found = [at(run) for run in runs]
            point[f"{name}_latency_us"] = min(p["latency_us"] for p in found)
            point[f"{name}_busbw_gbps"] = max(p["busbw_gbps"] for p in found)
            point[f"{name}_busbw_gbps_runs"] = [p["busbw_gbps"] for p in found]
        point["ratio"] = point["helios_busbw_gbps"] / point["torch_busbw_gbps"]
        sweep.append(point)
    return sweep


_OPERATION_NAMES = {"all_reduce": "all-reduce", "all_gather": "all-gather"}


def _geometric_mean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def _busbw_rows(data: dict[str, Any]) -> list[Row]:
    """Per operation: the whole sweep (geometric means), the smallest and the largest size.

    The geometric mean of the bus bandwidths over the sizes weighs every size alike, and
    the ratio of two such means is the geometric mean of the per-size ratios. The rows
    are reported, not judged: the main job's all-reduce makes the very call the bare loop
    makes, so their ratio shows how far the machine alone moves a run.
    """
    sweep: list[Point] = data["sweep"]
    rows = []
    for operation, name in _OPERATION_NAMES.items():
        points = [p for p in sweep if p["operation"] == operation]
        span = f"{_bytes(points[0]['size_bytes'])} to {_bytes(points[-1]['size_bytes'])}"
        measured = [
            (
                f"{name}, geometric mean over {len(points)} sizes, {span}",
                _geometric_mean([p["helios_busbw_gbps"] for p in points]),
                _geometric_mean([p["torch_busbw_gbps"] for p in points]),
            ),
            *(
                (
                    f"{name} of {_bytes(p['size_bytes'])}",
                    p["helios_busbw_gbps"],
                    p["torch_busbw_gbps"],
                )
                for p in (points[0], points[-1])
            ),
        ]
        for label, helios, torch in measured:
            rows.append(
                Row(
                    f"bus bandwidth, {label}, 2 ranks",
                    "python -m helios_collectives",
                    f"{data['calls'][operation]} loop",
                    helios,
                    torch,
                    "GB/s",
                    helios / torch,
                    "helios / alternative bandwidth",
                    "report",
                    True,
                )
            )
    return rows


def busbw_markdown(header: str, data: dict[str, Any]) -> str:
    """The whole sweep as a Markdown table, under its run's header line."""
    sweep: list[Point] = data["sweep"]
    lines = [
        header,
        "",
        f"Two ranks, float32, {data['iters']} timed calls after {data['warmup']} warm-up calls "
        f"per size, the slowest rank's time; the best of {data['rounds']} runs of each sweep, "
        "alternating. The ratio is helios's bus bandwidth over torch's (above 1: helios "
        "is faster).",
        "",
        "| operation | size | helios time | torch time | helios bus bandwidth "
        "| torch bus bandwidth | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in sweep:
        lines.append(
            f"| {_OPERATION_NAMES[p['operation']]} | {_bytes(p['size_bytes'])} "
            f"| {_fmt(p['helios_latency_us'] * 1e-6, 's')} "
            f"| {_fmt(p['torch_latency_us'] * 1e-6, 's')} "
            f"| {_bandwidth(p['helios_busbw_gbps'])} | {_bandwidth(p['torch_busbw_gbps'])} "
            f"| {p['ratio']:.3g} |"
        )
    return "\n".join(lines) + "\n"


def busbw_svg(data: dict[str, Any]) -> str:
    """Bus bandwidth over message size: both sweeps, both operations."""
    sweep: list[Point] = data["sweep"]
    colors = {"all_reduce": "#2a6fb0", "all_gather": "#d4731c"}
    series = []
    for operation, name in _OPERATION_NAMES.items():
        points = [p for p in sweep if p["operation"] == operation]
        for source, label, dashed in (
            ("helios", "python -m helios_collectives", False),
            ("torch", f"{data['calls'][operation]} loop", True),
        ):
            series.append(
                Series(
                    f"{name}: {label}",
                    [(float(p["size_bytes"]), p[f"{source}_busbw_gbps"]) for p in points],
                    colors[operation],
                    dashed=dashed,
                )
            )
    sizes = sorted({float(p["size_bytes"]) for p in sweep if p["operation"] == "all_reduce"})
    return svg_plot(
        series,
        title="Bus bandwidth over message size, 2 ranks, gloo over 127.0.0.1",
        x_label="message size",
        y_label="bus bandwidth",
        x_ticks=[(size, _bytes(size)) for size in sizes[::2]],
        y_format=_bandwidth,
    )


# --------------------------------------------------------------------------- SVG plot


@dataclass(frozen=True)
class Series:
    """One line of a plot: its legend label, its (x, y) points, colour and dash."""

    label: str
    points: Sequence[tuple[float, float]]
    color: str
    dashed: bool = False


def svg_plot(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_ticks: Sequence[tuple[float, str]],
    y_format: Callable[[float], str],
    width: int = 760,
    height: int = 470,
) -> str:
    """A line plot with both axes logarithmic, as a standalone SVG document.

    Args:
        series: The lines; every point must be positive.
        title: The text above the plot.
        x_label: The horizontal axis's name.
        y_label: The vertical axis's name.
        x_ticks: Where the horizontal axis is labelled, and with what.
        y_format: How a value of the vertical axis is written; the axis is labelled at
            every power of ten in range.
        width: The document's width in pixels.
        height: The document's height in pixels.

    Returns:
        The SVG text.

    Raises:
        ValueError: A point is not positive, or there are no points at all.
    """
    xs = [x for s in series for x, _ in s.points]
    ys = [y for s in series for _, y in s.points]
    if not xs or min(xs) <= 0 or min(ys) <= 0:
        message = "svg_plot needs at least one point, and only positive x and y on log axes"
        raise ValueError(message)
    left, right, top, bottom = 92, 24, 46, 58
    plot_w, plot_h = width - left - right, height - top - bottom
    pad = 0.08 * (math.log10(max(xs)) - math.log10(min(xs)) or 1.0)
    x_lo, x_hi = math.log10(min(xs)) - pad, math.log10(max(xs)) + pad
    y_lo, y_hi = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    if y_hi == y_lo:
        y_hi += 1

    def px(x: float) -> float:
        return left + (math.log10(x) - x_lo) / (x_hi - x_lo) * plot_w

    def py(y: float) -> float:
        return top + (y_hi - math.log10(y)) / (y_hi - y_lo) * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="13">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{left + plot_w / 2:.1f}" y="26" text-anchor="middle" font-size="15" '
        f'fill="#222222">{escape(title)}</text>',
    ]
    for exponent in range(y_lo, y_hi + 1):
        y = py(10.0**exponent)
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#e2e2e2"/>'
        )
        out.append(
            f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end" fill="#333333">'
            f"{escape(y_format(10.0**exponent))}</text>"
        )
    for x_value, label in x_ticks:
        x = px(x_value)
        out.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" stroke="#e2e2e2"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{top + plot_h + 20}" text-anchor="middle" fill="#333333">'
            f"{escape(label)}</text>"
        )
    out.append(
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" '
        'stroke="#555555"/>'
    )
    out.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 12}" text-anchor="middle" '
        f'fill="#222222">{escape(x_label)} (log scale)</text>'
    )
    out.append(
        f'<text x="18" y="{top + plot_h / 2:.1f}" text-anchor="middle" fill="#222222" '
        f'transform="rotate(-90 18 {top + plot_h / 2:.1f})">{escape(y_label)} (log scale)'
        "</text>"
    )

    def marker(x: float, y: float, s: Series) -> str:
        # Dashed lines get open squares, solid lines filled dots: told apart without colour.
        if s.dashed:
            return (
                f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6" fill="#ffffff" '
                f'stroke="{s.color}" stroke-width="1.5"/>'
            )
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{s.color}"/>'

    for s in series:
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s.points)
        dash = ' stroke-dasharray="7 4"' if s.dashed else ""
        out.append(
            f'<polyline points="{coords}" fill="none" stroke="{s.color}" stroke-width="2"{dash}/>'
        )
        out.extend(marker(px(x), py(y), s) for x, y in s.points)
    row_h = 20
    legend_w = 12 + 36 + 8 + 7 * max(len(s.label) for s in series) + 12
    out.append(
        f'<rect x="{left + 12}" y="{top + 12}" width="{legend_w}" '
        f'height="{row_h * len(series) + 12}" fill="#ffffff" fill-opacity="0.92" '
        'stroke="#bbbbbb"/>'
    )
    for i, s in enumerate(series):
        y = top + 12 + 6 + row_h * i + row_h / 2
        x0 = left + 24
        dash = ' stroke-dasharray="7 4"' if s.dashed else ""
        out.append(
            f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + 36}" y2="{y:.1f}" stroke="{s.color}" '
            f'stroke-width="2"{dash}/>'
        )
        out.append(marker(x0 + 18, y, s))
        out.append(f'<text x="{x0 + 44}" y="{y + 4:.1f}" fill="#222222">{escape(s.label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- driver


CASES: dict[str, Callable[[argparse.Namespace], CaseResult]] = {
    "import": lambda a: CaseResult(bench_import(a.repeat)),
    "gating": lambda a: CaseResult(bench_gating()),
    "init": lambda a: CaseResult(bench_init(a.repeat)),
    "call-cost": lambda a: CaseResult(bench_call_cost()),
    "print-gates": lambda a: CaseResult(bench_print_gates()),
    "collectives": lambda a: CaseResult(
        [Row(**r) for r in _spawn_workers("collectives", 2, a.timeout)]
    ),
    "hostlist": lambda a: CaseResult(bench_hostlist()),
    "ranks": lambda a: CaseResult(bench_ranks()),
    "busbw": lambda a: bench_busbw(),
}


def to_markdown(rows: list[Row]) -> str:
    lines = [
        "| case | helios | alternative | helios | alternative | ratio | goal | met |",
        "|---|---|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        ratio = _fmt(r.ratio, "s") if r.ratio_meaning.startswith("added") else f"{r.ratio:.3g}"
        lines.append(
            f"| {r.case} | `{r.helios}` | `{r.alternative}` | {_fmt(r.helios_value, r.unit)} "
            f"| {_fmt(r.alternative_value, r.unit)} | {ratio} ({r.ratio_meaning}) "
            f"| {r.goal} | {'yes' if r.met else 'no'} |"
        )
    return "\n".join(lines)


def current_meta() -> dict[str, str]:
    """What a run is measured on: Python, torch, the machine, and the date."""
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "date": time.strftime("%Y-%m-%d"),
    }


def _setup(meta: dict[str, str]) -> str:
    return f"Python {meta['python']}, torch {meta['torch']}, {meta['machine']}"


def header_line(cases: dict[str, dict[str, Any]]) -> str:
    """One line naming the run or runs behind the cases, in the order of ``CASES``.

    A single run reads ``Python 3.11.7, torch 2.5.1, x86_64, 2 CPUs, gloo over
    127.0.0.1, 2026-12-01.``; cases measured in several runs list each run's date and
    cases (and its Python, torch and machine when those differ too).
    """
    runs: dict[tuple[str, str], list[str]] = {}
    for name in [n for n in CASES if n in cases]:
        meta = cases[name]["meta"]
        runs.setdefault((_setup(meta), meta["date"]), []).append(name)
    setups = {setup for setup, _ in runs}
    if len(runs) == 1:
        ((setup, day),) = runs
        return f"{setup}, gloo over 127.0.0.1, {day}."
    if len(setups) == 1:
        parts = [f"{day} ({', '.join(names)})" for (_, day), names in runs.items()]
        return f"{setups.pop()}, gloo over 127.0.0.1; measured on {'; '.join(parts)}."
    parts = [f"{setup}, {day} ({', '.join(names)})" for (setup, day), names in runs.items()]
    return f"Gloo over 127.0.0.1; measured with {'; '.join(parts)}."


def load_results(path: Path) -> dict[str, dict[str, Any]]:
    """The cases stored in ``bench.json``, by name; none when the file does not exist.

    Raises:
        ValueError: The file is not the per-case layout this tool writes.
    """
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    cases = data.get("cases") if isinstance(data, dict) else None
    if not isinstance(cases, dict):
        message = (
            f"{path} holds no 'cases' mapping, so its rows cannot be kept; run every case "
            "(uv run python tools/bench.py), which writes it afresh"
        )
        raise ValueError(message)
    return {name: entry for name, entry in cases.items() if name in CASES}


def write_outputs(out: Path, cases: dict[str, dict[str, Any]]) -> str:
    """Write ``bench.json``, ``bench.md`` and the busbw table and plot; return bench.md."""
    ordered = {name: cases[name] for name in CASES if name in cases}
    rows = [Row(**r) for entry in ordered.values() for r in entry["rows"]]
    text = f"{header_line(ordered)}\n\n{to_markdown(rows)}\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps({"cases": ordered}, indent=2) + "\n")
    (out / "bench.md").write_text(text)
    busbw = ordered.get("busbw")
    if busbw is not None:
        header = header_line({"busbw": busbw})
        (out / "busbw.md").write_text(busbw_markdown(header, busbw["data"]))
        (out / "busbw.svg").write_text(busbw_svg(busbw["data"]))
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description="helios benchmarks, as ratios in one run")
    parser.add_argument("cases", nargs="*", choices=[*CASES, []], help="default: all")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--repeat", type=int, default=7, help="repetitions per measurement")
    parser.add_argument("--timeout", type=float, default=600, help="limit per worker run, s")
    parser.add_argument(
        "--no-run",
        action="store_true",
        help="measure nothing: rewrite bench.md, busbw.md and busbw.svg from bench.json",
    )
    args = parser.parse_args()
    if args.no_run and args.cases:
        parser.error("--no-run measures nothing: give it no case names")
    selected = [] if args.no_run else args.cases or list(CASES)
    # Every case measured now replaces its stored entry; running them all starts afresh.
    stored = {} if set(selected) == set(CASES) else load_results(args.out / "bench.json")
    for name in selected:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        result = CASES[name](args)
        meta: dict[str, Any] = {**current_meta(), "seconds": round(time.monotonic() - started)}
        stored[name] = {"meta": meta, "rows": [asdict(r) for r in result.rows]}
        if result.data:
            stored[name]["data"] = result.data
    print(write_outputs(args.out, stored), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
