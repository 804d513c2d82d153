"""Fixtures for the helios-env tests: a process with no launcher and no process group."""

from __future__ import annotations

import os
import sys

import pytest

from tests.env.launchers import FakeDistributed, LiveGroup
from tests.support.procs import is_launcher_variable


@pytest.fixture(autouse=True)
def plain_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run each test as a plain process: no launcher variables, no ``torch.distributed``."""
    for name in list(os.environ):
        if is_launcher_variable(name):
            monkeypatch.delenv(name)
    # Another package's tests may have imported torch in this pytest process; helios_env
    # must then behave as if torch.distributed had never been imported.
    monkeypatch.delitem(sys.modules, "torch.distributed", raising=False)


@pytest.fixture
def live_group(monkeypatch: pytest.MonkeyPatch) -> LiveGroup:
    """Install a stand-in for ``torch.distributed`` in ``sys.modules``.

    These tests must run without torch, so a real group is out of reach here; the
    stand-in offers exactly what helios_env reads, ``group.WORLD``. tests/pg checks the
    same paths against a real gloo group.
    """

    def install(
        rank: int = 0,
        world_size: int = 1,
        *,
        available: bool = True,
        initialized: bool = True,
        error: Exception | None = None,
    ) -> FakeDistributed:
        fake = FakeDistributed(
            rank=rank,
            world_size=world_size,
            available=available,
            initialized=initialized,
            error=error,
        )
        monkeypatch.setitem(sys.modules, "torch.distributed", fake)
        return fake

    return install
