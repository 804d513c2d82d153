"""Case ``init``: ``helios_pg.init`` and ``shutdown`` at world size one (a ``HashStore``)
against ``init_process_group`` on a ``TCPStore`` at world size one.
"""

from __future__ import annotations

from datetime import timedelta

from tests.support.procs import free_port
from tools.bench.rows import CaseResult, Row, Settings
from tools.bench.timing import interleaved

__all__ = ["run"]


def measure(repeat: int) -> list[Row]:
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


def run(settings: Settings) -> CaseResult:
    return CaseResult(measure(settings.repeat))
