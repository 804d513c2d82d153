"""Fixtures for the helios-pg tests: a plain process that never keeps a process group."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest
import torch.distributed as dist

import helios_pg
from tests.support.procs import free_port, is_launcher_variable


@pytest.fixture(autouse=True)
def plain_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run each test as a plain process, and fail it if it leaves a process group.

    The environment is restored after the test, also what the code under test set
    (``init_dist`` may set ``MASTER_ADDR``, say). A group left alive would change what
    every later test sees, so it is destroyed before the failure is reported.
    """
    for name in list(os.environ):
        if is_launcher_variable(name):
            monkeypatch.delenv(name)
    # Gloo picks its interface from the host name; keep in-process groups on loopback.
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    assert not dist.is_initialized(), "a process group was left by an earlier test"
    environ = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(environ)
    if dist.is_initialized():
        helios_pg.shutdown()  # without gloo's teardown deadlock before torch 2.8
        pytest.fail("the test left the default process group initialized")


@pytest.fixture
def unused_port() -> int:
    """A free loopback port on which nothing listens."""
    return free_port()


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port that this test holds listening, so nobody else can bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])
