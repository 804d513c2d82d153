"""A digest of the main script as the interpreter loaded it, not as its file reads now.

A script edited between the launch of one rank and another's runs two programs under
one name: the file on disk says only what the last rank to start read. The code object
of ``__main__``'s module frame is what this process runs; its digest covers the
bytecode, the names and the constants, recursively, and leaves out what does not change
the program: the file's path and the line numbers (a comment or a blank line). Where
that frame is not on the stack (a spawned child runs ``__mp_main__``), the file's
source compiled now gives the same digest. The bytecode of one source is the same
within one Python major.minor, which the ranks compare first, as long as no patch
release changes the compiler's output.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from types import CodeType, FrameType

__all__ = ["code_digest", "loaded_main_code"]

_SCALAR = (str, bytes, int, float, complex, bool, type(None), type(Ellipsis))


def loaded_main_code() -> CodeType | None:
    """The code of ``__main__`` that runs in this process, where its frame is live.

    Returns:
        The module-level code object of ``__main__`` from the main thread's stack (a
        script, or a module run with ``python -m``), else None.
    """
    main = sys.modules.get("__main__")
    ident = threading.main_thread().ident
    frame: FrameType | None = sys._current_frames().get(ident) if ident is not None else None
    namespace = getattr(main, "__dict__", None)
    while frame is not None:
        if frame.f_globals is namespace and frame.f_code.co_name == "<module>":
            return frame.f_code
        frame = frame.f_back
    return None


def _constant(value: object) -> str:
    """A representation of a constant that is the same in every process."""
    if isinstance(value, _SCALAR):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, tuple):
        return "(" + ",".join(_constant(item) for item in value) + ")"
    if isinstance(value, frozenset):  # its repr's order follows string hashing
        return "{" + ",".join(sorted(_constant(item) for item in value)) + "}"
    return type(value).__name__


def _feed(code: CodeType, digest: hashlib._Hash) -> None:
    digest.update(code.co_code)
    for names in (code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars):
        digest.update(repr(names).encode())
    digest.update(f"{code.co_name}:{code.co_argcount}:{code.co_kwonlyargcount}".encode())
    for value in code.co_consts:
        if isinstance(value, CodeType):
            _feed(value, digest)
        else:
            digest.update(_constant(value).encode())


def code_digest(code: CodeType) -> str:
    """The sha256 of ``code``'s bytecode, names and constants, nested code included.

    Args:
        code: A code object.

    Returns:
        The hexadecimal digest.
    """
    digest = hashlib.sha256()
    _feed(code, digest)
    return digest.hexdigest()
