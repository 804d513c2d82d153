"""The test support's free ports (tests/support/procs.py): never one another run holds.

CI runs two nox sessions side by side: each picks ports at random and checks that they are free,
and its ranks listen on them a moment later; both could pick the same one in between.
"""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.support import procs
from tests.support.procs import REPO_ROOT, free_port

HOLDER = """
import sys, time
from tests.support.procs import _reserve
assert _reserve(int(sys.argv[1]))
print("held", flush=True)
time.sleep(60)
"""


def unused_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def only(port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``port`` the only one free_port may pick."""
    monkeypatch.setattr(procs, "port_range", lambda ephemeral: (port, 1))


def test_a_port_another_process_holds_is_never_handed_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = unused_port()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(port)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    with holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline() == "held\n"  # the child ends within 60 s
            only(port, monkeypatch)
            with pytest.raises(RuntimeError, match=rf"no free, unreserved TCP port.*{port}"):
                free_port()
        finally:
            holder.kill()
    assert free_port() == port


def test_a_process_hands_out_a_port_once_while_it_holds_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = unused_port()
    only(port, monkeypatch)
    assert free_port() == port
    with pytest.raises(RuntimeError, match="no free, unreserved TCP port"):
        free_port()
