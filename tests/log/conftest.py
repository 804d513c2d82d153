"""Fixtures for helios-log's unit tests: one process, launcher variables set by each test."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator

import pytest

from helios_log import HANDLER_NAME
from tests.support.procs import is_launcher_variable

SetRanks = Callable[..., None]


class RecordingFile:
    """A text file that records every write and flush, to prove what a call wrote."""

    def __init__(self) -> None:
        self.writes: list[str] = []
        self.flushes = 0

    def write(self, s: str, /) -> int:
        self.writes.append(s)
        return len(s)

    def flush(self) -> None:
        self.flushes += 1

    @property
    def text(self) -> str:
        return "".join(self.writes)


@pytest.fixture(autouse=True)
def plain_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start every test as a plain process: no launcher variable set."""
    for name in filter(is_launcher_variable, list(os.environ)):
        monkeypatch.delenv(name)


@pytest.fixture
def set_ranks(monkeypatch: pytest.MonkeyPatch) -> SetRanks:
    """Set RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE as a launcher would."""

    def set_them(*, rank: int, world_size: int, local_rank: int, local_world_size: int) -> None:
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", str(world_size))
        monkeypatch.setenv("LOCAL_RANK", str(local_rank))
        monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_world_size))

    return set_them


@pytest.fixture
def recording_file() -> RecordingFile:
    return RecordingFile()


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    """The root logger, without helios-log's handler and at its old level after the test."""
    root = logging.getLogger()
    level = root.level
    yield root
    for handler in root.handlers[:]:
        if handler.get_name() == HANDLER_NAME:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


@pytest.fixture
def fresh_logger(request: pytest.FixtureRequest) -> Iterator[logging.Logger]:
    """A logger of this test's own, emptied after the test.

    It propagates to the root logger, where pytest captures it: pytest also attaches its
    handlers to non-propagating loggers, which would spoil counts of handlers.
    """
    logger = logging.getLogger(f"tests.log.{request.node.name}")
    yield logger
    for handler in logger.handlers[:]:
        logger.removeHandler(handler)
        handler.close()
    logger.filters.clear()
    logger.setLevel(logging.NOTSET)
