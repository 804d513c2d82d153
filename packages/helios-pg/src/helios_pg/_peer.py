"""Tell a collective broken by a peer from a rank's own failure: by type and origin.

A rank whose collective failed because another rank went away is a victim; its
report names the culprit instead of itself. What it raised is told by where it came
from, never by the words of its message (a rank's own ``TimeoutError("reading shard
17 timed out")`` is its own failure):

- an exception that says so itself (a true ``helios_peer_failure`` attribute: the
  errors of helios-collectives that a rank raises because another rank's arguments
  were wrong, or another rank never came);
- torch's distributed errors (``torch.distributed.DistError`` and its subclasses), or
- a ``RuntimeError`` or ``OSError`` that torch raised (the innermost frame of its
  traceback is torch's code, not the program's) inside a collective: its traceback
  passes through ``torch.distributed`` or ``torch.nn.parallel``, or torch's C++ tagged
  it with a source file of its collectives' backends (gloo's transport, NCCL, c10d),
  as it does for a collective that DistributedDataParallel issues during ``backward``.
"""

from __future__ import annotations

import contextlib
import re
import sys
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["is_peer_failure"]

# How torch's C++ prefixes an error with the source file that raised it.
_BACKEND_SOURCE = re.compile(r"^\[[^\]\n]*(gloo|c10d|nccl|ProcessGroup)[^\]\n]*\]", re.IGNORECASE)
_COLLECTIVE_DIRECTORIES = ("distributed", "nn/parallel")


def _frames(tb: TracebackType | None) -> list[str]:
    files = []
    while tb is not None:
        files.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    return files


def _raised_by_torch_in_a_collective(exc: BaseException, torch_dir: str) -> bool:
    files = _frames(exc.__traceback__)
    if not files or not files[-1].startswith(torch_dir):
        return False  # raised by the program itself
    entries = tuple(str(Path(torch_dir, name)) for name in _COLLECTIVE_DIRECTORIES)
    if any(name.startswith(entries) for name in files):
        return True
    text: object = ""
    with contextlib.suppress(Exception):
        text = str(exc)
    return isinstance(text, str) and _BACKEND_SOURCE.match(text) is not None


def is_peer_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is a collective broken by a peer.

    Args:
        exc: The exception.

    Returns:
        True for an exception marked as a peer's failure, torch's distributed errors,
        and a ``RuntimeError`` or ``OSError`` raised by torch inside a collective; False
        for what the program raised itself.
    """
    torch: Any = sys.modules.get("torch")
    dist: Any = sys.modules.get("torch.distributed")
    torch_file = getattr(torch, "__file__", None)
    torch_dir = str(Path(torch_file).parent) if isinstance(torch_file, str) else "\0"
    dist_error = getattr(dist, "DistError", None)
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if getattr(current, "helios_peer_failure", False) is True:
            return True
        if isinstance(dist_error, type) and isinstance(current, dist_error):
            return True
        if isinstance(current, RuntimeError | OSError) and _raised_by_torch_in_a_collective(
            current, torch_dir
        ):
            return True
        current = current.__cause__ or current.__context__
    return False
