"""Failure and hang reports: who failed first and why, and the hang roll call.

Owns the failure reporter, the job's ledger, the watchdog and its verdicts, and the tap
on ``torch.distributed`` (its wrappers and hooks) that the straggler report reads too. May import
helios-pg's shared modules only; the rest of helios-pg reaches it through this module.
"""

from helios_pg._reports._hang_settings import (
    DIRECTORY_VARIABLE,
    SIGNAL_VARIABLE,
    hang_timeout_from,
)
from helios_pg._reports._records import Answer
from helios_pg._reports._reporter import OPT_OUT_VARIABLE as FAILURE_REPORT
from helios_pg._reports._reporter import init_succeeded, unreported_failure
from helios_pg._reports._stackdump import RankDumpFile
from helios_pg._reports._tap import STRAGGLERS, close_tap, open_tap
from helios_pg._reports._verdict import decide
from helios_pg._reports._watch import (
    WATCHDOG_SOURCE,
    named_hung,
    start_watchdog,
    stop_reports,
    watch,
)

__all__ = [
    "DIRECTORY_VARIABLE",
    "FAILURE_REPORT",
    "SIGNAL_VARIABLE",
    "STRAGGLERS",
    "WATCHDOG_SOURCE",
    "Answer",
    "RankDumpFile",
    "close_tap",
    "decide",
    "hang_timeout_from",
    "init_succeeded",
    "named_hung",
    "open_tap",
    "start_watchdog",
    "stop_reports",
    "unreported_failure",
    "watch",
]
