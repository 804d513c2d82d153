"""Render an exception for a failure report, whatever the exception does.

A report must not depend on the exception behaving: its ``__str__`` or ``__repr__``
may raise or return something that is not a string, its message may hold characters
that the terminal's encoding cannot write, or a million of them. :func:`headline` and
:func:`callstack` always return text that can be written anywhere, bounded in length.
"""

from __future__ import annotations

import contextlib
import os
import re
import traceback
from pathlib import Path
from types import FrameType, TracebackType

__all__ = [
    "HEADLINE_LIMIT",
    "PART_LIMIT",
    "callstack",
    "headline",
    "program_frame",
    "safe_text",
]

_RERAISED = re.compile(r"Caught \w+ (?:in|at) (.+?)\.$")
"""The first line of an exception torch's ``ExceptionWrapper`` raised again."""

HEADLINE_LIMIT = 1000
"""Characters of an exception's message kept in a report's one-line headline."""
PART_LIMIT = 8000
"""Characters kept of each part of a formatted traceback (a frame, a message)."""
_PACKAGE = f"{Path(__file__).parents[1]}{os.sep}"
_START = "Traceback (most recent call last):\n"


def _bounded(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def _printable(text: str) -> str:
    """``text`` with what no encoding can write (lone surrogates) escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def safe_text(exc: BaseException) -> str:
    """``str(exc)``, else ``repr(exc)``, else a placeholder: never raises.

    Args:
        exc: The exception.

    Returns:
        The exception's message, with unwritable characters escaped.
    """
    for render in (str, repr):
        try:
            text = render(exc)
        except Exception:  # noqa: S112 - the next rendering is tried
            continue
        if isinstance(text, str):
            return _printable(text)
    return f"<{_type_name(exc)}: str() and repr() failed>"


def _type_name(exc: BaseException) -> str:
    name = getattr(type(exc), "__name__", None)
    return name if isinstance(name, str) else "exception"


def headline(exc: BaseException) -> str:
    """One line that names an exception: its type and its message's first line, bounded.

    Args:
        exc: The exception.

    Returns:
        ``Type: first line``, or ``Type`` for an empty message (saying which signal
        raises a ``KeyboardInterrupt``); for an exception that a
        DataLoader worker raised, the worker's own last line and where it was raised
        (``OSError: shard 20 is unreadable (in DataLoader worker process 0)``).
    """
    lines = safe_text(exc).strip().splitlines()
    name = _type_name(exc)
    if not lines and isinstance(exc, KeyboardInterrupt):
        return f"{name} (SIGINT: Ctrl-C, or kill -INT)"
    if not lines:
        return name
    reraised = _RERAISED.match(lines[0])
    if reraised is not None and len(lines) > 1 and not lines[-1].startswith(" "):
        # torch's ExceptionWrapper (a DataLoader worker's exception, raised again in the
        # main process): the worker's own last line says what went wrong.
        return f"{_bounded(lines[-1], HEADLINE_LIMIT)} (in {reraised.group(1)})"
    return f"{name}: {_bounded(lines[0], HEADLINE_LIMIT)}"


def _ours(frame: FrameType) -> bool:
    name = frame.f_code.co_filename
    return name.startswith(_PACKAGE) or name == contextlib.__file__


def program_frame(frame: FrameType | None) -> FrameType | None:
    """The first frame from ``frame`` outwards that is neither helios-pg's nor contextlib's.

    Args:
        frame: Where to start (a helios-pg frame, as ``shutdown()``'s).

    Returns:
        The program's frame that called into helios-pg (a ``with process_group()``
        block's), or None.
    """
    while frame is not None and _ours(frame):
        frame = frame.f_back
    return frame


def callstack(
    kind: type[BaseException],
    exc: BaseException,
    tb: TracebackType | None,
    *,
    outer: FrameType | None = None,
) -> str:
    """The formatted traceback of ``exc``, each part bounded in length.

    Args:
        kind: The exception's type.
        exc: The exception.
        tb: Its traceback.
        outer: Where the exception is met, when that is before it reached the program's
            outer frames (``process_group()``'s ``finally``): the frames of the program
            that lead there are put first, and helios-pg's own at the top of ``tb`` left
            out, so that the traceback reads as Python would print it at exit.

    Returns:
        What ``traceback.format_exception`` gives, or the headline alone where even
        that fails.
    """
    leading = ""
    program = program_frame(outer)
    if program is not None:
        callers: FrameType | None = program
        entry = tb
        while entry is not None and entry.tb_frame is not program:
            entry = entry.tb_next
        if entry is not None:  # it passed through the program: start there
            tb, callers = entry, program.f_back
        with contextlib.suppress(Exception):
            leading = "".join(traceback.format_list(traceback.extract_stack(callers)))
    try:
        parts = traceback.format_exception(kind, exc, tb)
    except Exception:  # a chained exception may misbehave too
        return headline(exc) + "\n"
    if leading:  # with the last traceback: the exception raised, after its causes
        at = max((i for i, part in enumerate(parts) if part == _START), default=None)
        if at is not None:
            parts.insert(at + 1, leading)
    kept = (_bounded(part, PART_LIMIT) for part in parts)
    return "".join(_printable(part if part.endswith("\n") else part + "\n") for part in kept)
