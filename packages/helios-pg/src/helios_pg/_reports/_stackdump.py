"""Every thread's stack, written by faulthandler to a file: on a signal, or at a deadline.

The one stack-dump mechanism of helios-pg: the hang watchdog's per-rank dumps and the
ranks plugin's hang report both use it. faulthandler writes from C, so a dump comes
even while the main thread holds the GIL in C, where no Python code can run.
"""

from __future__ import annotations

import contextlib
import faulthandler
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RankDumpFile", "StackDump"]

_FRAME = re.compile(r'^\s*File "(.+)", line (\d+) in (\S+)')


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


@dataclass(frozen=True, slots=True)
class RankDumpFile:
    """One rank's faulthandler dump in a report folder: its name, its header, its reading.

    The hang watchdog and the ranks plugin write it; the roll call's verdict and the
    plugin's hang report read it, through this one definition.

    Attributes:
        directory: The report folder, on the rank's host.
        rank: The rank whose stacks it holds.
    """

    directory: Path
    rank: int

    @property
    def path(self) -> Path:
        """The file."""
        return self.directory / f"rank-{self.rank}.faulthandler.txt"

    def header(self, main: int) -> str:
        """The first line: faulthandler names threads by id, so say which is the main one."""
        return f"helios: rank {self.rank}, main thread 0x{main:016x}"

    def open(self, main: int, *, signal_number: int | None = None) -> StackDump:
        """Create (or empty) the file, with its header, for faulthandler to write to.

        Args:
            main: The id of the rank's main thread (``threading.get_ident()`` there).
            signal_number: A signal that dumps the stacks at once, or None for none.

        Raises:
            OSError: The file cannot be written.
        """
        return StackDump(self.path, header=self.header(main), signal_number=signal_number)

    def threads(self) -> tuple[str, list[str]]:
        """The main thread's id as the header gives it, and each dumped thread's block.

        Both are empty where the file is missing or holds no header.
        """
        try:
            text = self.path.read_text(errors="replace")
        except OSError:
            return "", []
        header, _, body = text.partition("\n")
        if not header.startswith("helios: rank "):
            return "", []
        blocks = [block for block in body.rstrip().split("\n\n") if block.strip()]
        return header.rsplit(" ", 1)[-1], blocks

    def main_frame(self) -> str | None:
        """The main thread's innermost frame as ``file.py:LINE in function``, if dumped."""
        main, blocks = self.threads()
        inside = False
        for line in "\n".join(blocks).splitlines() if main else ():
            if line.startswith(("Thread ", "Current thread ")):
                inside = main in line
            match = _FRAME.match(line) if inside else None
            if match is not None:
                name, number, function = match.groups()
                return f"{Path(name).name}:{number} in {function}"
        return None
