"""Decorators that run a function on one global or one local rank only."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from helios_log._ranks import check_rank, current_rank

__all__ = ["on_global_rank", "on_local_rank"]

P = ParamSpec("P")
R = TypeVar("R")


def _gate(
    rank: object, *, local: bool, name: str
) -> Callable[[Callable[P, R]], Callable[P, R | None]]:
    if callable(rank):
        message = (
            f"@{name} needs parentheses: write @{name}() or @{name}(rank=N), "
            f"not @{name} (got the function {rank!r} as the rank)"
        )
        raise TypeError(message)
    chosen = check_rank(rank, "rank")

    def decorate(func: Callable[P, R]) -> Callable[P, R | None]:
        @functools.wraps(func)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R | None:
            if current_rank(local=local) != chosen:
                return None
            return func(*args, **kwargs)

        return wrapper

    return decorate


def on_global_rank(rank: int = 0) -> Callable[[Callable[P, R]], Callable[P, R | None]]:
    """Make a function run on one global rank only; elsewhere it returns None.

    The rank is read at each call through helios-env (the live process group, else the
    launcher's variables, else 0), so the decorated function needs no setup and a
    plain process always runs it (with the default ``rank=0``). On every other rank the
    call returns None without calling the function, so its return type becomes
    ``R | None``. For an ``async def`` function the call returns None there instead of
    a coroutine: check for None before awaiting.

    Example::

        from helios_log import on_global_rank

        @on_global_rank()
        def save_checkpoint(path: str) -> int: ...

        written = save_checkpoint("ckpt.pt")  # int on rank 0, None on the others

    Args:
        rank: The global rank that runs the function. Defaults to 0.

    Returns:
        A decorator that keeps the function's parameters (``ParamSpec``) and turns its
        return type ``R`` into ``R | None``.

    Raises:
        TypeError: ``rank`` is not an ``int``, or the decorator was used without
            parentheses (``@on_global_rank`` instead of ``@on_global_rank()``).
        ValueError: ``rank`` is negative.
    """
    return _gate(rank, local=False, name="on_global_rank")


def on_local_rank(rank: int = 0) -> Callable[[Callable[P, R]], Callable[P, R | None]]:
    """Make a function run on one local rank only (once per node); elsewhere it returns None.

    The local rank is read at each call through helios-env (the launcher's
    ``LOCAL_RANK``, else the global rank on a single node, else 0), so a plain process
    always runs the function (with the default ``rank=0``). On every other rank the
    call returns None without calling the function, so its return type becomes
    ``R | None``. For an ``async def`` function the call returns None there instead of
    a coroutine: check for None before awaiting.

    Example::

        from helios_log import on_local_rank

        @on_local_rank()
        def download_dataset(root: str) -> None: ...

        download_dataset("data/")  # once per node: on local rank 0

    Args:
        rank: The rank on each node that runs the function. Defaults to 0.

    Returns:
        A decorator that keeps the function's parameters (``ParamSpec``) and turns its
        return type ``R`` into ``R | None``.

    Raises:
        TypeError: ``rank`` is not an ``int``, or the decorator was used without
            parentheses (``@on_local_rank`` instead of ``@on_local_rank()``).
        ValueError: ``rank`` is negative.
    """
    return _gate(rank, local=True, name="on_local_rank")
