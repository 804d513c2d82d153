"""Tell a collective broken by a peer from a rank's own failure: by type and origin.

A rank whose collective failed because another rank went away is a victim; its
report names the culprit instead of itself. What it raised is told by where it came
from, never by the words of its message (a rank's own ``TimeoutError("reading shard
17 timed out")`` is its own failure):

- an exception that says so itself (a true ``helios_peer_failure`` attribute: the
  errors of helios-collectives that a rank raises because another rank's arguments
  were wrong, or another rank never came);
- torch's distributed errors (``torch.distributed.DistError`` and its subclasses);
- a ``RuntimeError`` or ``OSError`` that torch's C++ tagged with a source file of its
  collectives' transports (gloo's, NCCL's, c10d's): a connection closed or reset, a
  receive that timed out, wherever the traceback ends (``work.wait()`` in the
  program's own code, DistributedDataParallel's all-reduce in ``backward``).

A collective's own argument checks (``ProcessGroupGloo::allgather: invalid tensor
size``), an out-of-memory error inside a collective, and whatever the program raises
itself stay the rank's own failure.
"""

from __future__ import annotations

import contextlib
import re
import sys
from typing import Any

__all__ = ["is_peer_failure"]

# How torch's C++ prefixes a transport's error with the source file that raised it:
# [../third_party/gloo/gloo/transport/tcp/pair.cc:545], [.../ProcessGroupNCCL.cpp:1234].
_TRANSPORT_SOURCE = re.compile(
    r"^\[[^\]\n]*(gloo/transport|ProcessGroupNCCL|NCCLUtils|c10d/(TCPStore|socket))[^\]\n]*\]",
    re.IGNORECASE,
)


def _tagged_by_a_transport(exc: BaseException) -> bool:
    text: object = ""
    with contextlib.suppress(Exception):
        text = str(exc)
    return isinstance(text, str) and _TRANSPORT_SOURCE.match(text) is not None


def is_peer_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is a collective broken by a peer.

    Args:
        exc: The exception.

    Returns:
        True for an exception marked as a peer's failure, torch's distributed errors,
        and a transport's error tagged by torch's C++; False for what the program or a
        collective's argument checks raised.
    """
    dist: Any = sys.modules.get("torch.distributed")
    dist_error = getattr(dist, "DistError", None)
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if getattr(current, "helios_peer_failure", False) is True:
            return True
        if isinstance(dist_error, type) and isinstance(current, dist_error):
            return True
        if isinstance(current, RuntimeError | OSError) and _tagged_by_a_transport(current):
            return True
        current = current.__cause__ or current.__context__
    return False
