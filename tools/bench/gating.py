"""Case ``gating``: ``helios_log.global_print`` on a rank that does not print, against
helios-ml 2.0.1's ``global_print`` with its group live.

helios-ml is installed from PyPI with ``--no-deps`` into ``.bench/`` and its
``helios/core/distributed.py`` (which imports only torch) is loaded by path: the
package's ``__init__`` pulls in opencv, matplotlib and onnx, none of which the
compared function uses.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from tools.bench.rows import CaseResult, Row, Settings
from tools.bench.timing import interleaved

BENCH_DIR = Path(__file__).resolve().parents[2] / ".bench"
HELIOS_ML = "helios-ml==2.0.1"

__all__ = ["run"]


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


def measure() -> list[Row]:
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


def run(settings: Settings) -> CaseResult:
    return CaseResult(measure())
