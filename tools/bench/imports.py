"""Case ``import``: ``import helios_env, helios_log`` against ``import torch.distributed``.

Time and resident memory, each the median of fresh ``python -I`` interpreters.
"""

from __future__ import annotations

import statistics
import subprocess
import sys

from tools.bench.rows import CaseResult, Row, Settings

__all__ = ["run"]


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


def run(settings: Settings) -> CaseResult:
    repeat = settings.repeat
    _, base_rss = _import_probe("pass", repeat)
    ours_t, ours_rss = _import_probe("import helios_env, helios_log", repeat)
    torch_t, torch_rss = _import_probe("import torch.distributed", repeat)
    ratio = ours_t / torch_t
    mem_ratio = (ours_rss - base_rss) / max(torch_rss - base_rss, 1e-9)
    rows = [
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
    return CaseResult(rows)
