"""The tap's wrappers: note the collective the main thread is in, as it is called.

While the tap is open (the hang watchdog or the straggler report runs:
``helios_pg._reports._tap``), the collectives of ``torch.distributed``
(:data:`COLLECTIVES`) are called through thin wrappers that note, in the tap's
:class:`~helios_pg._reports._issued.Place`, a sequence number, the operation and the group; the
call site is read off the main thread's stack only when a roll call asks. Where the
torch has process-group hooks, the groups that ``torch.distributed``'s group makers
(:data:`GROUP_MAKERS`) return get the hooks of :class:`~helios_pg._reports._issued.IssuedWork`.
:func:`unwrap` puts the original functions back and takes the hooks off.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from threading import get_ident
from time import monotonic
from types import CodeType
from typing import Any

from helios_pg._arrivals import op_code
from helios_pg._reports._issued import COMPARED, IssuedWork, Place

__all__ = ["COLLECTIVES", "GROUP_MAKERS", "unwrap", "wrap"]

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_gather_single",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "gather_object",
    "isend",
    "irecv",
    "monitored_barrier",
    "recv",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "scatter_object_list",
    "send",
)
"""The ``torch.distributed`` functions whose calls the watchdog notes."""
GROUP_MAKERS = ("new_group", "new_subgroups", "new_subgroups_by_enumeration", "split_group")
"""The ``torch.distributed`` functions whose groups get the watchdog's hooks."""


_NOWHERE = 1 << 30
"""Where the group sits among the positional arguments of a function that takes none."""


def _positions(function: Callable[..., Any], *names: str) -> list[int]:
    """Where each of ``names`` sits among ``function``'s positional arguments, else a huge index."""
    try:
        known = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        known = []
    return [known.index(name) if name in known else _NOWHERE for name in names]


def wrap(
    dist: Any,
    current: Place,
    main: int,
    originals: dict[str, Callable[..., Any]],
    issued: IssuedWork | None,
    *,
    world: Any = None,
) -> CodeType | None:
    """Route the collectives of ``torch.distributed`` through the bookkeeping.

    While ``current.arrivals`` is set, each synchronous call the main thread waits in on
    the default group (``world``) at which every rank waits for every other (``COMPARED``)
    is noted there too, from the wrapper's entry to its return. The group and
    ``async_op`` are read by name or by position; a function whose signature cannot be
    read is not noted (a subgroup it was given could not be told from the default group).

    Args:
        dist: ``torch.distributed``, or a stand-in with its functions.
        current: Where the wrappers note the collective the main thread is in.
        main: The main thread's ident: a call from another thread passes straight through.
        originals: The functions replaced, by name; a name already there is left as it is.
        issued: The hooks for the groups that the group makers return, if any.
        world: The default group, as ``torch.distributed.group.WORLD`` was when wrapped.

    Returns:
        The wrappers' code, by which a roll call finds the wrapper's frame on the main
        thread's stack; None when no collective was wrapped.
    """
    code = None
    for name in COLLECTIVES:
        original = getattr(dist, name, None)
        if original is None or name in originals:
            continue
        at, async_at = _positions(original, "group", "async_op")

        def wrapper(
            *args: Any,
            _name: str = name,
            _call: Callable[..., Any] = original,
            _main: int = main,
            _code: int = op_code(name),
            _at: int = at,
            _async_at: int = async_at,
            _timed: bool = name in COMPARED and at != _NOWHERE,
            **kwargs: Any,
        ) -> Any:
            if current.op is not None or get_ident() != _main:
                return _call(*args, **kwargs)  # nested, or not the main thread
            # The call site is found when a roll call asks (see Watchdog.place): taking
            # the caller's frame here costs more than the rest of the bookkeeping.
            current.seq += 1
            group = kwargs.get("group") if len(args) <= _at else args[_at]
            current.group_arg = group
            current.since = since = monotonic()
            current.op = _name
            try:
                result = _call(*args, **kwargs)
            except BaseException:
                current.failures += 1  # a hang this rank waited in did not end well
                raise
            else:
                if not (kwargs.get("async_op") if len(args) <= _async_at else args[_async_at]):
                    current.completed += 1  # its peers were there too
                    arrivals = current.arrivals
                    if arrivals is not None and _timed and (group is None or group is world):
                        arrivals.add(_code, since, monotonic())
                return result
            finally:
                current.op = None
                current.group_arg = None  # nothing kept alive

        code = wrapper.__code__
        functools.update_wrapper(wrapper, original)
        originals[name] = original
        setattr(dist, name, wrapper)

    if issued is not None:
        _hook_new_groups(dist, issued, originals)
    return code


def _hook_new_groups(
    dist: Any, issued: IssuedWork, originals: dict[str, Callable[..., Any]]
) -> None:
    """Hook the groups that ``torch.distributed``'s group makers return."""
    for name in GROUP_MAKERS:
        original = getattr(dist, name, None)
        if original is None or name in originals:
            continue

        def maker(*args: Any, _call: Callable[..., Any] = original, **kwargs: Any) -> Any:
            result = _call(*args, **kwargs)
            issued.install_all(result)
            return result

        functools.update_wrapper(maker, original)
        originals[name] = original
        setattr(dist, name, maker)


def unwrap(dist: Any, originals: dict[str, Callable[..., Any]], issued: IssuedWork | None) -> None:
    """Put the original functions back and take the hooks off the groups.

    Args:
        dist: What :func:`wrap` wrapped.
        originals: The functions :func:`wrap` replaced; emptied here.
        issued: The hooks on the groups, if any.
    """
    for name, original in originals.items():
        setattr(dist, name, original)
    originals.clear()
    if issued is not None:
        issued.remove()
