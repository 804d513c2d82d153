"""Benchmarks of helios against the alternatives, side by side in one run.

Every figure is a ratio measured in the same run on the same machine, so the table
compares like with like; absolute times are shown for context only. Run it with::

    uv run python tools/bench.py              # writes tools/results/bench.{md,json}

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
  against one that calls ``torch.multiprocessing.spawn``, per test, in whole sessions.

helios-ml is installed from PyPI with ``--no-deps`` into ``.bench/`` and its
``helios/core/distributed.py`` (which imports only torch) is loaded by path: the
package's ``__init__`` pulls in opencv, matplotlib and onnx, none of which the
compared function uses.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as ``python tools/bench.py``
    sys.path.insert(0, str(ROOT))

from tests.support.procs import free_port, plain_environment, run_hand_started  # noqa: E402

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


def _fmt(value: float, unit: str) -> str:
    if unit == "s":
        for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
            if value >= scale:
                return f"{value / scale:.3g} {name}"
        return f"{value * 1e9:.3g} ns"
    if unit == "MiB":
        return f"{value:.1f} MiB"
    return f"{value:.3g} {unit}"


# --------------------------------------------------------------------------- timing


def best_of(fn: Callable[[], object], *, number: int, repeat: int = 7) -> float:
    """Seconds per call: the minimum over ``repeat`` runs of ``number`` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return min(times)


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
        subprocess.run(command, cwd=root, env=env, check=True, capture_output=True, timeout=900)
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


# --------------------------------------------------------------------------- driver


CASES: dict[str, Callable[[argparse.Namespace], list[Row]]] = {
    "import": lambda a: bench_import(a.repeat),
    "gating": lambda a: bench_gating(),
    "init": lambda a: bench_init(a.repeat),
    "call-cost": lambda a: bench_call_cost(),
    "print-gates": lambda a: bench_print_gates(),
    "collectives": lambda a: [Row(**r) for r in _spawn_workers("collectives", 2, a.timeout)],
    "hostlist": lambda a: bench_hostlist(),
    "ranks": lambda a: bench_ranks(),
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


def main() -> int:
    parser = argparse.ArgumentParser(description="helios benchmarks, as ratios in one run")
    parser.add_argument("cases", nargs="*", choices=[*CASES, []], help="default: all")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--repeat", type=int, default=7, help="repetitions per measurement")
    parser.add_argument("--timeout", type=float, default=600, help="limit per worker run, s")
    args = parser.parse_args()
    rows: list[Row] = []
    for name in args.cases or list(CASES):
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        rows.extend(CASES[name](args))
    import torch

    meta = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "date": time.strftime("%Y-%m-%d"),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    table = to_markdown(rows)
    header = (
        f"Python {meta['python']}, torch {meta['torch']}, {meta['machine']}, gloo over "
        f"127.0.0.1, {meta['date']}."
    )
    (args.out / "bench.md").write_text(f"{header}\n\n{table}\n")
    (args.out / "bench.json").write_text(
        json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=2) + "\n"
    )
    print(header)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
