"""Reading environment variables on a hot path, seeing every change at once.

``os.environ.get`` raises and catches ``KeyError`` twice for a variable that is not
set, which costs more than the rest of a rank query. On POSIX the mapping behind
``os.environ`` answers a miss with one dict lookup, and every write through
``os.environ`` (``monkeypatch.setenv`` too) updates it at once, so nothing is cached
and a changed variable is seen on the next call.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping

__all__ = ["ENVIRON_BYTES", "FILESYSTEM_ENCODING", "Getter", "environ_get", "getter_for"]

Getter = Callable[[str], "str | None"]

FILESYSTEM_ENCODING = sys.getfilesystemencoding()
"""How the names and values of the environment are encoded."""
_found = getattr(os.environ, "_data", None) if os.name == "posix" else None
ENVIRON_BYTES: dict[bytes, bytes] | None = _found if isinstance(_found, dict) else None
"""The live bytes mapping behind ``os.environ`` on POSIX (None elsewhere): read only."""


def _posix_get(name: str) -> str | None:
    assert ENVIRON_BYTES is not None
    raw = ENVIRON_BYTES.get(name.encode(FILESYSTEM_ENCODING, "surrogateescape"))
    return None if raw is None else raw.decode(FILESYSTEM_ENCODING, "surrogateescape")


environ_get: Getter = os.environ.get if ENVIRON_BYTES is None else _posix_get
"""Return the value of an environment variable of this process, or None."""


def getter_for(environ: Mapping[str, str] | None) -> Getter:
    """Return the lookup for ``environ``: :data:`environ_get` for this process's own.

    Args:
        environ: A mapping of variables, or None for ``os.environ``.

    Returns:
        A function from a variable's name to its value, or None when it is not set.
    """
    if environ is None or environ is os.environ:
        return environ_get
    return environ.get
