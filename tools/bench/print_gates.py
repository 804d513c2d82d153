"""Case ``print-gates``: ``global_print`` and ``local_print`` on a rank that does not
print, against a bare ``int(os.environ[...])`` test.
"""

from __future__ import annotations

import os

from tools.bench.rows import CaseResult, Row, Settings
from tools.bench.timing import paired

__all__ = ["run"]


def measure() -> list[Row]:
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


def run(settings: Settings) -> CaseResult:
    return CaseResult(measure())
