"""The one stack-dump mechanism: faulthandler writes every thread's stack to a file."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from helios_pg._reports._stackdump import StackDump


def test_a_signal_dumps_every_thread_after_the_header(tmp_path: Path) -> None:
    path = tmp_path / "stacks"
    dump = StackDump(path, header="rank 3, main thread 0x1", signal_number=signal.SIGUSR2)
    try:
        os.kill(os.getpid(), signal.SIGUSR2)
        text = path.read_text()
    finally:
        dump.close()
    assert text.startswith("rank 3, main thread 0x1\n"), text
    assert "test_a_signal_dumps_every_thread_after_the_header" in text, text


def test_an_armed_timer_dumps_unless_disarmed(tmp_path: Path) -> None:
    path = tmp_path / "stacks"
    dump = StackDump(path)
    try:
        dump.arm(0.05)
        deadline = time.monotonic() + 10
        while "Timeout" not in path.read_text():
            assert time.monotonic() < deadline, "the armed dump never came"
            time.sleep(0.02)
        dumped = path.read_text()
        dump.arm(0.05)
        dump.disarm()
        time.sleep(0.3)
        assert path.read_text() == dumped
    finally:
        dump.close()
    dump.close()  # twice is safe
