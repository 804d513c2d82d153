"""The cases at world size one. ``import`` times fresh interpreters with hyperfine (Debian's
``hyperfine``); ``gating`` and ``hostlist`` pair helios with the alternative in this process;
``call-instructions`` counts what helios adds per call in instructions, the same from run to
run unlike times: each variant runs under ``valgrind --tool=callgrind --instr-atstart=no``
(``python -m tools.bench.single VARIANT N``), counting, in every thread, only its loop of
calls after :data:`WARMUP` uncounted ones; loops of :data:`CALLS` and of twice as many give
one call as their difference."""

from __future__ import annotations

import json
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from tools.bench.common import ROOT, Measured, paired, row, run_checked

__all__ = [
    "CALLS",
    "PAIRS",
    "WARMUP",
    "checkpoints",
    "gating",
    "hostlists",
    "imports",
    "instructions",
]

_PYTHON = [sys.executable, "-I", "-W", "ignore", "-c"]
_IMPORTS = ("pass", "import helios_env, helios_log", "import torch.distributed")
_RSS = "; import os; print(int(open('/proc/self/statm').read().split()[1])"
_RSS += " * os.sysconf('SC_PAGESIZE'))"


def imports() -> Measured:
    """Each import in a fresh ``python -I``, less the bare interpreter: time, and RSS."""
    if shutil.which("hyperfine") is None:
        raise RuntimeError("the import case needs hyperfine: apt-get install hyperfine")
    with tempfile.TemporaryDirectory() as folder:
        report, commands = Path(folder, "h.json"), [shlex.join([*_PYTHON, c]) for c in _IMPORTS]
        options = ["-N", "--style", "none", "--warmup", "1", "--runs", "7", "--export-json"]
        subprocess.run(["hyperfine", *options, str(report), *commands], check=True)
        base, *times = (r["median"] for r in json.loads(report.read_text())["results"])
    run = partial(subprocess.run, capture_output=True, check=True)
    base_rss, *rss = (int(run([*_PYTHON, code + _RSS]).stdout) for code in _IMPORTS)
    times, mib = [t - base for t in times], [(r - base_rss) / 2**20 for r in rss]
    return [
        row("import time", *_IMPORTS[1:], times, goal="<= 0.05", headline=True),
        row("import memory (RSS added)", *_IMPORTS[1:], mib, unit="MiB"),
    ], {}


def gating() -> Measured:
    """``global_print`` on a rank that does not print, in a live group, against helios-ml's:
    its ``helios/core/distributed.py`` (which imports only torch) installed into ``.bench/``
    and run by path, as the package's ``__init__`` imports opencv, matplotlib and onnx. Before
    that, ``get_dist_info()`` before init, from torchrun's variables, against helios-ml's."""
    import helios_pg
    from helios_env import get_dist_info
    from helios_log import global_print

    source = ROOT / ".bench" / "helios-ml" / "helios" / "core" / "distributed.py"
    if not source.exists():
        install = ["uv", "pip", "install", "-q", "--no-deps", "--target", str(source.parents[2])]
        subprocess.run([*install, "--python", sys.executable, "helios-ml==2.0.1"], check=True)
    namespace, saved = runpy.run_path(str(source)), dict(os.environ)
    theirs, their_info = namespace["global_print"], namespace["get_dist_info"]
    # Rank 0 of a group of one under torchrun: helios-ml reads these four variables.
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    try:
        queried = paired(get_dist_info, their_info, number=20_000)
        helios_pg.init(backend="gloo")
        try:
            prints = (partial(p, "never shown", global_rank=1) for p in (global_print, theirs))
            measured = paired(*prints, number=20_000)
        finally:
            helios_pg.shutdown()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    case, names = "gating: global_print on a rank that does not print", "helios_log.global_print"
    ml = "helios-ml 2.0.1 global_print"
    query = "rank query before init: get_dist_info() from torchrun's variables"
    return [
        row(case, names, ml, measured, goal="<= 1", headline=True),
        row(query, "helios_env.get_dist_info", "helios-ml 2.0.1 get_dist_info", queried),
    ], {}


def hostlists() -> Measured:
    """``expand_hostlist`` against python-hostlist on 10,000 nodes in three shapes."""
    import hostlist  # type: ignore[import-untyped]

    from helios_env._hostlist import expand_hostlist

    rows, racks = [], ",".join(f"rack{r:02d}-n[001-100]" for r in range(100))
    for shape, nodes in (
        ("one padded range", "n[00001-10000]"),
        ("100 items of 100", racks),
        ("two groups, 100 x 100", "rack[001-100]-n[001-100]"),
    ):
        # python-hostlist removes duplicates unless told not to; Slurm (and helios) keep them.
        ours = partial(expand_hostlist, nodes)
        theirs = partial(hostlist.expand_hostlist, nodes, allow_duplicates=True)
        assert ours() == theirs()
        assert len(ours()) == 10_000
        measured, case = paired(ours, theirs, number=5), f"hostlist: 10,000 nodes, {shape}"
        helios = f"expand_hostlist({nodes[:24]}{'...' if len(nodes) > 24 else ''})"
        other, first = "hostlist.expand_hostlist (python-hostlist)", nodes == "n[00001-10000]"
        rows.append(row(case, helios, other, measured, goal="helios <= 5 ms", headline=first))
    return rows, {}


CALLS, WARMUP = 500, 100
_WATCHDOG = "dist.all_reduce with init(hang_timeout=600)"
_STRAGGLERS = "dist.all_reduce with init(hang_timeout=600), the straggler report noting"
PAIRS = (
    ("all_reduce_tensors", "dist.all_reduce", "all-reduce of 1 element", "<= 1.1"),
    ("gather_into_tensor", "torch.empty + dist.all_gather_single", "gather of 1 element", "<= 1.1"),
    ("safe_barrier", "dist.barrier", "barrier", "<= 1.1"),
    (_WATCHDOG, "dist.all_reduce", "all-reduce of 1 element", "<= 1.05"),
    (_STRAGGLERS, _WATCHDOG, "all-reduce of 1 element", "<= 1.05"),
)
"""Each row: helios's variant, the alternative's, what they do, the goal."""


def _worker(variant: str, count: int) -> None:
    import torch
    import torch.distributed as dist

    import helios_pg
    from helios_collectives import all_reduce_tensors, gather_into_tensor, safe_barrier
    from helios_collectives._torch_api import gather_function_name

    watched = variant in (_WATCHDOG, _STRAGGLERS)
    helios_pg.init(backend="gloo", hang_timeout=600 if watched else None)
    if variant == _STRAGGLERS:  # what the report adds, which a world of one never starts
        from helios_pg._arrivals import Arrivals
        from helios_pg._reports import STRAGGLERS, open_tap

        open_tap(STRAGGLERS, Arrivals())
    t, gather = torch.rand(1), getattr(dist, gather_function_name(dist))
    calls: dict[str, Callable[[], object]] = {
        "all_reduce_tensors": lambda: all_reduce_tensors(t),
        "dist.all_reduce": lambda: dist.all_reduce(t),
        _WATCHDOG: lambda: dist.all_reduce(t),
        _STRAGGLERS: lambda: dist.all_reduce(t),
        "gather_into_tensor": lambda: gather_into_tensor(t, (1,)),
        # The simplest code a user would write for the same result.
        "torch.empty + dist.all_gather_single": lambda: gather(torch.empty(1), t),
        "safe_barrier": safe_barrier,
        "dist.barrier": dist.barrier,
    }
    call = calls[variant]
    for number, state in ((WARMUP, "on"), (count, "off")):
        for _ in range(number):
            call()
        run_checked(["callgrind_control", "-i", state, str(os.getpid())], os.environ, limit=60)
    helios_pg.shutdown()


def _count(variant: str, loops: int) -> int:
    """Instructions counted in ``loops`` x :data:`CALLS` calls of ``variant``, alone."""
    with tempfile.TemporaryDirectory(prefix="helios-callgrind-") as folder:
        out = Path(folder, "callgrind.out")
        # sys.executable as it is (a virtual environment's link): it finds the environment.
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
        command += [f"--callgrind-out-file={out}", sys.executable, "-m", __name__]
        run_checked([*command, variant, str(loops * CALLS)], os.environ, limit=900, cwd=str(ROOT))
        found = re.search(r"^totals:\s+(\d+)", out.read_text(), re.M)
        assert found is not None, out.read_text()
        return int(found.group(1))


def instructions() -> Measured:
    if shutil.which("valgrind") is None:
        raise RuntimeError("the call-instructions case needs valgrind: apt-get install valgrind")
    variants = sorted({v for pair in PAIRS for v in pair[:2]})
    with ThreadPoolExecutor(max_workers=2) as pool:
        short, long = ([*pool.map(_count, variants, [n] * len(variants))] for n in (1, 2))
    counted = {v: (b - a) / CALLS for v, a, b in zip(variants, short, long, strict=True)}
    rows, per_call = [], partial(row, unit="instructions")
    for ours, theirs, what, goal in PAIRS:
        kind = {_WATCHDOG: "hang watchdog: ", _STRAGGLERS: "straggler report: "}.get(ours, "")
        case = f"{kind}per-call instructions, {what}, "
        case, measured = case + "world size one (gloo)", (counted[ours], counted[theirs])
        rows.append(per_call(case, ours, theirs, measured, goal=goal, headline=ours == PAIRS[0][0]))
    return rows, {}


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]))


def checkpoints() -> Measured:
    """``Checkpoints.save`` of a 100 MB state against ``torch.save`` of it, in one process.

    Against a plain ``torch.save`` (what the goal compares), and against the same made
    durable by hand (``torch.save`` to a temporary file, fsync, rename), which is what
    Checkpoints adds beside the generators and the metadata.
    """
    import torch

    from helios_pg import Checkpoints

    state = {"weights": torch.randn(25 * 2**20)}  # 100 MiB of float32
    rows = []
    with tempfile.TemporaryDirectory(prefix="helios-bench-", dir=ROOT) as name:
        folder = Path(name)
        steps = iter(range(10**6))
        durable_saver = Checkpoints(folder / "helios", keep=1)
        quick_saver = Checkpoints(folder / "quick", keep=1, fsync=False)

        def ours() -> None:
            durable_saver.save(state, step=next(steps))

        def quick() -> None:
            quick_saver.save(state, step=next(steps))

        def plain() -> None:
            torch.save(state, folder / "plain.pt")

        def durable() -> None:
            partial = folder / "durable.pt.partial"
            with partial.open("wb") as handle:
                torch.save(state, handle)
                handle.flush()
                os.fsync(handle.fileno())
            partial.replace(folder / "durable.pt")

        for helios, mine, other, theirs, goal in (
            ("Checkpoints(fsync=False).save", quick, "torch.save", plain, "<= 1.05"),
            ("Checkpoints.save", ours, "torch.save", plain, "report"),
            ("Checkpoints.save", ours, "torch.save, fsync, rename", durable, "<= 1.05"),
        ):
            measured = paired(mine, theirs, number=1, repeat=11)
            case = "checkpoint: save a 100 MiB state, one process"
            rows.append(row(case, helios, other, measured, goal=goal))
    return rows, {}
