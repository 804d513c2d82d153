"""Every thread's stack, written by faulthandler to a file: on a signal, or at a deadline.

The one stack-dump mechanism of helios-pg: the hang watchdog's per-rank dumps and the
ranks plugin's hang report both use it. faulthandler writes from C, so a dump comes
even while the main thread holds the GIL in C, where no Python code can run.
"""

from __future__ import annotations

import contextlib
import faulthandler
from pathlib import Path

__all__ = ["StackDump"]


class StackDump:
    """A file that faulthandler writes every thread's stack to.

    Args:
        path: The file, created or emptied.
        header: A first line (faulthandler names threads by id: say which is which).
        signal_number: A signal that dumps the stacks at once, or None for none.

    Raises:
        OSError: The file cannot be written.
    """

    def __init__(self, path: Path, *, header: str = "", signal_number: int | None = None) -> None:
        self.path = path
        self._file = path.open("w")
        self._header = header.rstrip("\n") + "\n" if header else ""
        if header:
            self._file.write(self._header)
            self._file.flush()
        self._signal_number = signal_number
        if signal_number is not None:
            faulthandler.register(signal_number, file=self._file, all_threads=True, chain=False)

    def arm(self, seconds: float) -> None:
        """Dump the stacks in ``seconds`` unless re-armed or disarmed first.

        faulthandler keeps one such timer per process: arming replaces any other.
        """
        faulthandler.dump_traceback_later(seconds, file=self._file)

    @staticmethod
    def disarm() -> None:
        """Cancel the timer of :meth:`arm`."""
        faulthandler.cancel_dump_traceback_later()

    def untouched(self) -> bool:
        """Whether the file holds no dump: nothing past its header, or it is gone."""
        try:
            return self.path.stat().st_size <= len(self._header.encode())
        except OSError:
            return True

    def close(self) -> None:
        """Cancel the timer and the signal, and close the file; safe to call twice."""
        with contextlib.suppress(Exception):
            self.disarm()
            if self._signal_number is not None:
                faulthandler.unregister(self._signal_number)
                self._signal_number = None
        with contextlib.suppress(OSError):
            self._file.close()
