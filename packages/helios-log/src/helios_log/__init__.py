"""Rank-gated printing and logging for PyTorch distributed programs, without torch.

``global_print`` and ``local_print`` print on one rank only; ``on_global_rank`` and
``on_local_rank`` run a function on one rank only; ``RankFilter``,
``RankFieldsFilter`` and ``setup_rank_logging`` bring ranks to stdlib ``logging``.
Every rank is read when the call happens, through ``helios_env`` (the live process
group, else the launcher's variables, else a single process), so nothing needs to be
set up first. ``helios_log`` never imports torch.
"""

from helios_log._decorators import on_global_rank, on_local_rank
from helios_log._logging import (
    HANDLER_NAME,
    RANK_LOG_FORMAT,
    RankFieldsFilter,
    RankFilter,
    setup_rank_logging,
)
from helios_log._print import SupportsWrite, SupportsWriteAndFlush, global_print, local_print

__all__ = [
    "HANDLER_NAME",
    "RANK_LOG_FORMAT",
    "RankFieldsFilter",
    "RankFilter",
    "SupportsWrite",
    "SupportsWriteAndFlush",
    "global_print",
    "local_print",
    "on_global_rank",
    "on_local_rank",
    "setup_rank_logging",
]

__version__ = "0.1.0"
