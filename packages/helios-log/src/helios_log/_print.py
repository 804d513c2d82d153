"""``print`` on one global or one local rank only."""

from __future__ import annotations

from typing import Literal, Protocol, cast, overload

from helios_env import get_global_rank, get_local_rank
from helios_log._ranks import check_rank

__all__ = ["SupportsWrite", "SupportsWriteAndFlush", "global_print", "local_print"]


class SupportsWrite(Protocol):
    """A text stream that ``print`` can write to, such as ``sys.stdout``."""

    def write(self, s: str, /) -> object:
        """Write ``s`` to the stream."""


class SupportsWriteAndFlush(SupportsWrite, Protocol):
    """A text stream that ``print(..., flush=True)`` can write to and flush."""

    def flush(self) -> object:
        """Flush the stream."""


def _print(
    args: tuple[object, ...],
    sep: str | None,
    end: str | None,
    file: SupportsWrite | None,
    flush: bool,
) -> None:
    if flush:
        # The overloads of the public functions guarantee a flushable file here.
        print(*args, sep=sep, end=end, file=cast("SupportsWriteAndFlush | None", file), flush=True)
    else:
        print(*args, sep=sep, end=end, file=file)


@overload
def global_print(
    *args: object,
    global_rank: int = 0,
    sep: str | None = " ",
    end: str | None = "\n",
    file: SupportsWrite | None = None,
    flush: Literal[False] = False,
) -> None: ...
@overload
def global_print(
    *args: object,
    global_rank: int = 0,
    sep: str | None = " ",
    end: str | None = "\n",
    file: SupportsWriteAndFlush | None = None,
    flush: bool,
) -> None: ...
def global_print(
    *args: object,
    global_rank: int = 0,
    sep: str | None = " ",
    end: str | None = "\n",
    file: SupportsWrite | None = None,
    flush: bool = False,
) -> None:
    """Print on one global rank only: ``print(*args, ...)`` there, nothing elsewhere.

    The rank is read at each call through helios-env (the live process group, else the
    launcher's variables, else 0), so under torchrun exactly one process prints, before
    and after the process group exists, and a plain process always prints. On every
    other rank the call writes nothing and does not call ``print``; a rank that the run
    does not have never prints.

    Args:
        *args: The objects to print, as for ``print``.
        global_rank: The global rank that prints. Defaults to 0.
        sep: Passed to ``print``.
        end: Passed to ``print``.
        file: Passed to ``print``; ``sys.stdout`` when None.
        flush: Passed to ``print``.

    Raises:
        TypeError: ``global_rank`` is not an ``int``.
        ValueError: ``global_rank`` is negative.
        helios_env.LauncherEnvError: A launcher variable such as ``RANK`` is malformed.

    Example:
        >>> from helios_log import global_print
        >>> global_print("starting")  # a plain process is rank 0
        starting
        >>> global_print("rank 1 here", global_rank=1)  # no rank 1: prints nothing
    """
    if type(global_rank) is not int or global_rank < 0:
        check_rank(global_rank, "global_rank")  # raises, naming the bad value
    if get_global_rank() == global_rank:
        _print(args, sep, end, file, flush)


@overload
def local_print(
    *args: object,
    local_rank: int = 0,
    sep: str | None = " ",
    end: str | None = "\n",
    file: SupportsWrite | None = None,
    flush: Literal[False] = False,
) -> None: ...
@overload
def local_print(
    *args: object,
    local_rank: int = 0,
    sep: str | None = " ",
    end: str | None = "\n",
    file: SupportsWriteAndFlush | None = None,
    flush: bool,
) -> None: ...
def local_print(
    *args: object,
    local_rank: int = 0,
    sep: str | None = " ",
    end: str | None = "\n",
    file: SupportsWrite | None = None,
    flush: bool = False,
) -> None:
    """Print on one local rank only: once per node, nothing on the node's other ranks.

    The local rank is read at each call through helios-env (the launcher's
    ``LOCAL_RANK``, else the global rank on a single node, else 0), so a plain process
    always prints. On every other rank the call writes nothing and does not call
    ``print``; a local rank that no node has never prints.

    Args:
        *args: The objects to print, as for ``print``.
        local_rank: The rank on each node that prints. Defaults to 0.
        sep: Passed to ``print``.
        end: Passed to ``print``.
        file: Passed to ``print``; ``sys.stdout`` when None.
        flush: Passed to ``print``.

    Raises:
        TypeError: ``local_rank`` is not an ``int``.
        ValueError: ``local_rank`` is negative.
        helios_env.LauncherEnvError: A launcher variable such as ``LOCAL_RANK`` is
            malformed.
    """
    if type(local_rank) is not int or local_rank < 0:
        check_rank(local_rank, "local_rank")  # raises, naming the bad value
    if get_local_rank() == local_rank:
        _print(args, sep, end, file, flush)
