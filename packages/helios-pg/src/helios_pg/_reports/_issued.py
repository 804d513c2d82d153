"""Collectives that no wrapper sees, noted through torch's process-group hooks.

The watchdog's wrappers of ``torch.distributed`` note the collective the main thread
is in while the call lasts. Two kinds of collective escape them: those torch issues
from C++ (DistributedDataParallel's gradient buckets, its broadcasts at construction)
and those issued with ``async_op=True``, whose wait comes later, outside the call.
Where the torch has them (``ProcessGroup.register_post_hook``; torch 2.4 has none), a
post-hook, called in the issuing thread just after a collective is issued, with the
issuer's Python stack still in place, notes each such collective and drops it when its
work completes, through the work's future. A collective a wrapper covers costs the
hook's call and one check.

While the straggler report runs (``helios_pg._stragglers``), each collective the hook
sees on the default group at which every rank waits for every other (:data:`COMPARED`) is
noted in the rank's arrivals
(:class:`helios_pg._arrivals.Arrivals`) from its issue to its completion; when only the
report runs, nothing else is noted.

The hooks sit on the default group and on the groups made through
``torch.distributed.new_group`` and its relatives while the tap is open (the watchdog or
the straggler report runs: ``helios_pg._reports._tap``); groups that
torch makes internally (a ``DeviceMesh``'s) are not seen.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import sys
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from threading import get_ident
from types import CodeType, FrameType
from typing import Any

from helios_pg._arrivals import Arrivals, op_code

__all__ = [
    "COMPARED",
    "HOOK_ID",
    "MAX_NOTED",
    "IssuedWork",
    "Place",
    "group_name",
    "hooks_supported",
]

HOOK_ID = 0x4E11
"""The id helios's hooks are registered under on each group."""
MAX_NOTED = 4096
"""Collectives noted at most at once; past it, the oldest are forgotten."""
# torch's names of the operations, as torch.distributed's functions spell them.
_NAMES = {
    "ALLREDUCE": "all_reduce",
    "ALLREDUCE_COALESCED": "all_reduce_coalesced",
    "ALLGATHER": "all_gather",
    "ALLGATHER_BASE": "all_gather_into_tensor",
    "ALLGATHER_COALESCED": "all_gather_coalesced",
    "ALLGATHER_INTO_TENSOR_COALESCED": "all_gather_into_tensor_coalesced",
    "ALLTOALL": "all_to_all",
    "ALLTOALL_BASE": "all_to_all_single",
    "REDUCE_SCATTER": "reduce_scatter",
    "REDUCE_SCATTER_BASE": "reduce_scatter_tensor",
    "REDUCE_SCATTER_TENSOR_COALESCED": "reduce_scatter_tensor_coalesced",
}
COMPARED = frozenset({
    "all_reduce",
    "all_reduce_coalesced",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_coalesced",
    "all_gather_into_tensor_coalesced",
    "all_gather_object",
    "all_gather_single",
    "all_to_all",
    "all_to_all_single",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced",
    "barrier",
})  # fmt: skip
"""The operations whose arrivals are noted: those at which every rank of the group waits
for every other. A rooted one (a broadcast, a gather) lets a rank go once the root
reached it, and a point-to-point one involves two ranks: neither says who came last."""


def hooks_supported() -> bool:
    """Whether this torch's process groups take post-hooks (called once a collective is issued)."""
    import torch.distributed as dist

    group = getattr(dist, "ProcessGroup", None)
    return hasattr(group, "register_post_hook") and hasattr(group, "unregister_post_hook")


def group_name(group: Any) -> str:
    """How a report names a group: nothing for the default group (None)."""
    if group is None:
        return ""
    try:
        name = getattr(group, "group_name", None)
    except ReferenceError:  # a hook's reference to a group since destroyed
        name = None
    return f"group {name}" if name else "a subgroup"


@dataclass(slots=True)
class Place:
    """A collective a rank is in: what costs nothing to take, formatted when reported.

    The caller's code object and line, the group object (None for the default group)
    and one clock reading; ``op`` is None when the rank is in no collective.
    """

    seq: int = 0
    op: str | None = None
    group_arg: Any = None
    code: CodeType | None = None
    line: int = 0
    since: float = 0.0
    key: int = -1
    """The issued work's own number; -1 for a call a wrapper noted."""
    failures: int = 0
    """Collectives noted through this place that raised or completed with an error."""
    completed: int = 0
    """Synchronous collectives of the wrappers that returned without an error."""
    arrivals: Arrivals | None = None
    """Where each collective on the default group is noted, while the straggler report runs."""

    @property
    def site(self) -> str:
        """The caller's ``file:line``; empty for a collective issued from C++ alone."""
        if self.code is None:
            return ""
        return f"{Path(self.code.co_filename).name}:{self.line}"

    @property
    def group(self) -> str:
        """The group the collective runs on, where not the default group."""
        return group_name(self.group_arg)

    @property
    def wall(self) -> float:
        """When the collective began, as ``time.time()``."""
        return time.time() - (time.monotonic() - self.since)


def _backend_name(group: Any) -> str:
    """The group's backend, lower case; empty where torch cannot say."""
    import torch.distributed as dist

    try:
        return str(dist.get_backend(group)).lower()
    except Exception:
        return ""


def _op_name(name: Any) -> str:
    raw = str(getattr(name, "name", name))
    return _NAMES.get(raw, raw.lower())


@functools.cache
def _skipped() -> tuple[str, str]:
    """The directories whose frames are not a call site: torch's and helios_pg's."""
    import torch

    return str(Path(torch.__file__).parent), str(Path(__file__).parent)


def _caller() -> FrameType | None:
    """The innermost frame of this thread outside torch and helios_pg."""
    try:
        frame: FrameType | None = sys._getframe(2)
    except ValueError:  # issued from C++ on a thread with no Python frame
        return None
    skipped = _skipped()
    while frame is not None and frame.f_code.co_filename.startswith(skipped):
        frame = frame.f_back
    return frame


@dataclass
class IssuedWork:
    """The collectives issued outside the wrappers, per rank, while the watchdog runs.

    Args:
        current: The collective the main thread is in, as the wrappers note it (its
            ``op`` is None outside them).
        main: The main thread's ident. A synchronous collective that the main thread
            issues inside a wrapper is the wrapper's to note; the hook returns at once.
        notes: Whether the collectives are noted for the hang watchdog (a roll call asks
            where each rank is); off while only the straggler report runs.
    """

    current: Place
    main: int
    notes: bool = True
    noted: dict[int, Place] = field(default_factory=dict)
    groups: list[weakref.ref[Any]] = field(default_factory=list)
    counter: itertools.count[int] = field(default_factory=itertools.count)

    def install(self, group: Any, *, default: bool) -> bool:
        """Hook ``group``; a group already hooked is left as it is. False if it cannot be."""
        if any(ref() is group for ref in self.groups):
            return True
        group_arg = None if default else weakref.proxy(group)
        current, main, post = self.current, self.main, self._post
        # An nccl collective returns once queued on the GPU: its work is followed to
        # its completion even where a wrapper saw the call.
        queued = _backend_name(group) == "nccl"

        def hook(args: Any) -> None:
            # Called on every collective of the group: the common case, a wrapped call,
            # is answered here, with the cheapest test first (args.async_op goes to C++).
            waited_here = current.op is not None and get_ident() == main and not queued
            if waited_here and not args.async_op:
                return
            post(args, group_arg, default)

        try:
            group.register_post_hook(HOOK_ID, hook)
        except Exception:  # this group or this torch takes no hooks
            return False
        self.groups.append(weakref.ref(group))
        return True

    def install_all(self, result: object) -> None:
        """Hook every process group in what a group-making function returned."""
        import torch.distributed as dist

        if isinstance(result, dist.ProcessGroup):
            self.install(result, default=False)
        elif isinstance(result, (tuple, list)):
            for item in result:
                self.install_all(item)

    def remove(self) -> None:
        """Take the hooks off every group still alive; forget what was noted."""
        for ref in self.groups:
            group = ref()
            if group is not None:
                with contextlib.suppress(Exception):
                    group.unregister_post_hook(HOOK_ID)
        self.groups.clear()
        self.noted.clear()

    def oldest(self) -> Place | None:
        """The collective issued longest ago that has not completed, if any."""
        return min(list(self.noted.values()), key=lambda place: place.since, default=None)

    def _post(self, args: Any, group_arg: Any, default: bool) -> None:
        arrivals = self.current.arrivals if default else None
        op = _op_name(args.name) if arrivals is not None or self.notes else ""
        if op not in COMPARED:
            arrivals = None
        if arrivals is None and not self.notes:
            return
        try:
            future = args.work.get_future()
        except Exception:  # a work without a future cannot be followed
            return
        now = time.monotonic()
        number = -1 if arrivals is None else arrivals.issue(op_code(op), now)
        key = next(self.counter)
        if self.notes:
            self._note(key, args, op, group_arg, now)
        # Runs at once when the work is already complete, else on torch's thread.
        future.add_done_callback(lambda done: self._done(key, done, arrivals, number))

    def _note(self, key: int, args: Any, op: str, group_arg: Any, since: float) -> None:
        """Keep where a collective was issued until it completes, for a roll call."""
        frame = _caller()
        place = Place(
            seq=int(args.op_id),
            op=op,
            group_arg=group_arg,
            code=frame.f_code if frame is not None else None,
            line=frame.f_lineno if frame is not None else 0,
            since=since,
            key=key,
        )
        del frame
        self.noted[key] = place
        if len(self.noted) > MAX_NOTED:
            with contextlib.suppress(KeyError, StopIteration, RuntimeError):
                del self.noted[next(iter(self.noted))]

    def _done(self, key: int, future: Any, arrivals: Arrivals | None, number: int) -> None:
        if arrivals is not None:
            arrivals.done(number, time.monotonic())
        try:
            future.value()  # raises the collective's error
        except Exception:
            self.current.failures += 1  # counted before the work is dropped
        self.noted.pop(key, None)
