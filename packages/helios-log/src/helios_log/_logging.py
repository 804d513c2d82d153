"""Stdlib ``logging`` by rank: a filter that chooses ranks, fields that name the rank."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from helios_env import get_global_rank, get_local_rank, get_local_world_size, get_world_size
from helios_log._print import SupportsWrite
from helios_log._ranks import check_rank, current_rank

__all__ = [
    "HANDLER_NAME",
    "RANK_LOG_FORMAT",
    "RankFieldsFilter",
    "RankFilter",
    "setup_rank_logging",
]

RANK_LOG_FORMAT = "%(rank_prefix)s %(levelname)s %(name)s: %(message)s"
"""The format :func:`setup_rank_logging` uses unless told otherwise."""

HANDLER_NAME = "helios_log"
"""The name of the handler :func:`setup_rank_logging` installs, and replaces when called again."""


def _level(value: object, name: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        number = logging.getLevelName(value.strip().upper())
        if isinstance(number, int):
            return number
    message = (
        f"{name} must be a logging level such as logging.INFO or 'WARNING', got {value!r}; "
        "use one of DEBUG, INFO, WARNING, ERROR, CRITICAL or an int"
    )
    raise ValueError(message)


def _fields() -> dict[str, object]:
    # The four values printed, each from its own query: a malformed variable that none
    # of them reads (MASTER_PORT, GROUP_RANK) never stops a log line.
    rank, world_size = get_global_rank(), get_world_size()
    return {
        "rank": rank,
        "world_size": world_size,
        "local_rank": get_local_rank(),
        "local_world_size": get_local_world_size(),
        "rank_prefix": f"[rank {rank}/{world_size}]",
    }


class RankFilter(logging.Filter):
    """Let log records through on chosen ranks only, and optionally on every rank from a level.

    The rank is read for each record through helios-env (the live process group, else
    the launcher's variables, else 0), so a plain process counts as rank 0. Attach the
    filter to a handler rather than to a logger: a logger's filters do not see records
    that propagate up from its children.

    Example::

        import logging
        from helios_log import RankFilter

        handler = logging.StreamHandler()
        handler.addFilter(RankFilter(0, all_ranks_level=logging.WARNING))

    In ``logging.config.dictConfig``::

        "filters": {"rank0": {"()": "helios_log.RankFilter", "all_ranks_level": "WARNING"}}

    Attributes:
        ranks: The ranks whose records pass.
        local: Whether ``ranks`` are local ranks (on each node) rather than global ranks.
        all_ranks_level: Records at this level or above pass on every rank; None when
            only the chosen ranks log.
    """

    def __init__(
        self,
        ranks: int | Iterable[int] = 0,
        *,
        local: bool = False,
        all_ranks_level: int | str | None = None,
    ) -> None:
        """Choose the ranks whose records pass.

        Args:
            ranks: One rank or several. Defaults to rank 0.
            local: Compare ``ranks`` with the local rank (on each node) instead of the
                global rank.
            all_ranks_level: Let records at this level or above through on every rank,
                such as ``logging.WARNING`` or ``"WARNING"``; None to let only the chosen
                ranks log.

        Raises:
            TypeError: A rank is not an ``int``.
            ValueError: A rank is negative, ``ranks`` is empty, or ``all_ranks_level`` is
                not a logging level.
        """
        super().__init__()
        chosen = (ranks,) if isinstance(ranks, int) else tuple(ranks)
        if not chosen:
            message = "ranks must name at least one rank, got an empty collection; pass ranks=0"
            raise ValueError(message)
        self.ranks: frozenset[int] = frozenset(check_rank(rank, "ranks") for rank in chosen)
        self.local: bool = local
        self.all_ranks_level: int | None = (
            None if all_ranks_level is None else _level(all_ranks_level, "all_ranks_level")
        )

    def filter(self, record: logging.LogRecord) -> bool:
        """Decide whether ``record`` is logged on this rank.

        Args:
            record: The record being handled.

        Returns:
            True on a chosen rank, or when the record's level is at least
            ``all_ranks_level``; False otherwise.

        Raises:
            helios_env.LauncherEnvError: A launcher variable is malformed.
        """
        if self.all_ranks_level is not None and record.levelno >= self.all_ranks_level:
            return True
        return current_rank(local=self.local) in self.ranks


class RankFieldsFilter(logging.Filter):
    """Add the rank to every record, for use in a format string; drops nothing.

    Each record gains ``rank``, ``world_size``, ``local_rank``, ``local_world_size``
    and ``rank_prefix`` (such as ``[rank 1/4]``), read through helios-env when the
    record is handled, so ``%(rank_prefix)s %(message)s`` works before and after the
    process group exists. Only the variables behind those four values are read and
    validated: a malformed ``MASTER_PORT``, say, never stops a log line. Attach it to
    the handler whose formatter uses the fields.

    Example::

        import logging
        from helios_log import RankFieldsFilter

        handler = logging.StreamHandler()
        handler.addFilter(RankFieldsFilter())
        logging.basicConfig(format="%(rank_prefix)s %(message)s", handlers=[handler])

    In ``logging.config.dictConfig``::

        "filters": {"rank_fields": {"()": "helios_log.RankFieldsFilter"}}
    """

    def __init__(self) -> None:
        """Create the filter; it takes no options."""
        super().__init__()

    def filter(self, record: logging.LogRecord) -> bool:
        """Add the rank fields to ``record``.

        Args:
            record: The record being handled.

        Returns:
            True: every record passes.

        Raises:
            helios_env.LauncherEnvError: A variable behind one of the four values (such
                as ``RANK`` or ``LOCAL_WORLD_SIZE``) is malformed.
        """
        record.__dict__.update(_fields())
        return True


def setup_rank_logging(
    level: int | str = logging.INFO,
    *,
    rank: int = 0,
    local: bool = False,
    all_ranks_level: int | str | None = logging.WARNING,
    fmt: str = RANK_LOG_FORMAT,
    datefmt: str | None = None,
    stream: SupportsWrite | None = None,
    logger: logging.Logger | str | None = None,
) -> logging.Handler:
    """Log from one rank at ``level`` and from every rank at ``all_ranks_level``, prefixed.

    Installs one stream handler, named :data:`HANDLER_NAME`, on the root logger (or
    ``logger``) with a :class:`RankFilter`, a :class:`RankFieldsFilter` and a formatter
    for ``fmt``, and sets the logger's level to the lower of ``level`` and
    ``all_ranks_level``. With the defaults, rank 0 logs INFO and above, every rank logs
    WARNING and above, and each line starts with ``[rank R/W]``. Calling it again
    replaces the handler it installed before (never two), so the last call's settings
    hold; other handlers are left alone.

    Args:
        level: The lowest level logged on the chosen rank, such as ``logging.INFO``
            or ``"DEBUG"``.
        rank: The rank that logs at ``level``. Defaults to 0.
        local: Make ``rank`` a local rank, so that one process per node logs.
        all_ranks_level: The lowest level logged on every rank; None to log from the
            chosen rank only.
        fmt: The ``%``-style format of each line; it may use ``%(rank)s``,
            ``%(world_size)s``, ``%(local_rank)s``, ``%(local_world_size)s`` and
            ``%(rank_prefix)s``.
        datefmt: The date format for ``%(asctime)s``.
        stream: Where lines go; ``sys.stderr`` when None.
        logger: The logger or logger name to configure; the root logger when None.

    Returns:
        The installed handler.

    Raises:
        TypeError: ``rank`` is not an ``int``.
        ValueError: ``rank`` is negative, or a level is not a logging level.
    """
    chosen = check_rank(rank, "rank")
    threshold = _level(level, "level")
    everyone = None if all_ranks_level is None else _level(all_ranks_level, "all_ranks_level")
    target = logger if isinstance(logger, logging.Logger) else logging.getLogger(logger)

    for old in [h for h in target.handlers if h.get_name() == HANDLER_NAME]:
        target.removeHandler(old)
        old.close()

    handler = logging.StreamHandler(stream)
    handler.set_name(HANDLER_NAME)
    # Rank first: records dropped here never pay for the fields.
    handler.addFilter(RankFilter(chosen, local=local, all_ranks_level=everyone))
    handler.addFilter(RankFieldsFilter())
    handler.setFormatter(logging.Formatter(fmt, datefmt))
    target.addHandler(handler)
    target.setLevel(threshold if everyone is None else min(threshold, everyone))
    return handler
