"""Fixtures for helios-collectives: a world of one in this process, every in-process test
a plain process, and the environment of the runs that start processes of their own.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import helios_pg
from helios_collectives import VALIDATE_ENV_VAR
from tests.support.procs import is_launcher_variable

GROUP_TIMEOUT = 5.0
"""Process-group timeout of the multi-process runs, in seconds."""
CPU_RUN_ENV = {
    "HELIOS_TEST_PG_TIMEOUT": str(GROUP_TIMEOUT),
    VALIDATE_ENV_VAR: "0",
    # gloo on the CPU even where GPUs exist: helios_pg.init binds cuda:LOCAL_RANK
    # whenever CUDA is available, and there may be fewer GPUs than ranks.
    "CUDA_VISIBLE_DEVICES": "",
}
"""Environment of the CPU multi-process runs (on top of ``base_env``)."""


@pytest.fixture(autouse=True)
def plain_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start every in-process test as a plain process, with validation mode unset."""
    for name in filter(is_launcher_variable, list(os.environ)):
        monkeypatch.delenv(name)
    monkeypatch.delenv(VALIDATE_ENV_VAR, raising=False)


@pytest.fixture
def world_of_one() -> Iterator[None]:
    """A world-size-one gloo group in this process, destroyed after the test."""
    helios_pg.init(backend="gloo")
    try:
        yield
    finally:
        helios_pg.shutdown()
