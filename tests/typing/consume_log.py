"""A downstream module that uses every public name of helios_log; read by mypy only.

Nothing here runs: pytest does not collect this file and ``consume`` is never called.
mypy --strict checks the print overloads (``flush=True`` needs a flushable file) and
that the rank-only decorators keep the decorated function's parameters (ParamSpec)
while making its result optional, as downstream code sees them from the wheel.
"""

from __future__ import annotations

import io
import logging
import sys

from typing_extensions import assert_type  # typing's from Python 3.11 on

import helios_log
from helios_log import (
    HANDLER_NAME,
    RANK_LOG_FORMAT,
    RankFieldsFilter,
    RankFilter,
    SupportsWrite,
    SupportsWriteAndFlush,
    global_print,
    local_print,
    on_global_rank,
    on_local_rank,
    setup_rank_logging,
)


class Sink:
    """A stream that can be written to but not flushed."""

    def write(self, s: str, /) -> int:
        return len(s)


@on_global_rank(0)
def save(path: str, *, step: int = 0) -> int:
    return step


@on_local_rank(1)
def download(url: str) -> bytes:
    return url.encode()


def consume() -> None:
    """Call every public name the way a user's program would."""
    assert_type(global_print("loss", 0.5), None)
    assert_type(global_print("loss", global_rank=1, sep=", ", end="", file=sys.stderr), None)
    assert_type(global_print("now", flush=True), None)
    assert_type(global_print("now", file=io.StringIO(), flush=True), None)
    assert_type(local_print("node ready"), None)
    assert_type(local_print("node ready", local_rank=0, file=Sink()), None)

    assert_type(save("ckpt.pt"), int | None)
    assert_type(save("ckpt.pt", step=3), int | None)
    assert_type(download("http://example.invalid"), bytes | None)

    rank_filter = RankFilter([0, 1], local=True, all_ranks_level="WARNING")
    assert_type(rank_filter, RankFilter)
    assert_type(RankFilter(), RankFilter)
    assert_type(rank_filter.filter(logging.makeLogRecord({})), bool)
    assert_type(RankFieldsFilter().filter(logging.makeLogRecord({})), bool)

    handler = setup_rank_logging(logging.INFO, rank=0, all_ranks_level=None, stream=Sink())
    assert_type(handler, logging.Handler)
    assert_type(setup_rank_logging("DEBUG", logger="train", fmt=RANK_LOG_FORMAT), logging.Handler)
    assert_type(HANDLER_NAME, str)

    sink: SupportsWrite = Sink()
    flushable: SupportsWriteAndFlush = io.StringIO()
    print(sink, flushable)
    assert_type(helios_log.__all__, list[str])


def misuse() -> None:
    """Mistakes the types must reject; strict mode fails if an ignore goes unused."""
    global_print("x", file=Sink(), flush=True)  # type: ignore[call-overload]
    save(3)  # type: ignore[arg-type]
    save("ckpt.pt", stepp=1)  # type: ignore[call-arg]
    on_global_rank("0")  # type: ignore[arg-type]
