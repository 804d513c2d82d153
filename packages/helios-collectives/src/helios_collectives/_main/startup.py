"""The main job's start-up section: when each node's ranks started, step by step.

Each rank sends its :func:`helios_pg.startup_moments` and when the job's first
collective returned on it (one ``gather_objects``). Rank 0 prints, per node, its slowest
rank's moments in seconds after the job's first process started: the process's start,
``import helios_pg``, torch loaded, ``init`` called, the store reached, the group
formed, the first collective done. A node that started late stands out in its row; the
warning ``init`` gives for late ranks (``helios_pg.StartupWarning``) says which step.
Moments compare the hosts' clocks, as exact as they agree (NTP: milliseconds).
"""

from __future__ import annotations

import socket
from dataclasses import asdict, dataclass
from typing import Any

from helios_collectives._main.table import table
from helios_collectives._objects import gather_objects
from helios_env.integration import ranks_on
from helios_pg import startup_moments

__all__ = ["STEPS", "Startup", "gather_startup"]

STEPS = (
    ("process_started", "process"),
    ("helios_imported", "helios"),
    ("torch_loaded", "torch"),
    ("init_called", "init"),
    ("store_reached", "store"),
    ("group_formed", "group"),
    ("first_collective", "first op"),
)
"""Each moment, in order, and its column's header."""


@dataclass(frozen=True, slots=True)
class Startup:
    """Every rank's start-up moments, wall-clock seconds (None where not noted).

    Attributes:
        ranks: Each rank's moments by name (:data:`STEPS`) and its ``host``, by rank.
    """

    ranks: list[dict[str, Any]]

    @property
    def origin(self) -> float:
        """The job's first moment: its earliest process start (else import)."""
        firsts = [float(r["process_started"] or r["helios_imported"]) for r in self.ranks]
        return min(firsts)

    def by_node(self) -> list[dict[str, Any]]:
        """Per node, in the order of its first rank: its ranks and each moment's latest."""
        hosts = [str(r["host"]) for r in self.ranks]
        rows = []
        for host in dict.fromkeys(hosts):
            mine = [rank for rank, h in enumerate(hosts) if h == host]
            row: dict[str, Any] = {"host": host, "ranks": mine}
            for name, _ in STEPS:
                noted = [self.ranks[rank][name] for rank in mine if self.ranks[rank][name]]
                row[name] = round(max(noted) - self.origin, 3) if noted else None
            rows.append(row)
        return rows

    def format(self) -> str:
        """The section as text: one row per node."""
        hosts = [str(r["host"]) for r in self.ranks]
        rows = [
            [
                ranks_on(node["ranks"], hosts),
                *("-" if node[name] is None else f"{node[name]:.2f}" for name, _ in STEPS),
            ]
            for node in self.by_node()
        ]
        headers = ["node", *(header for _, header in STEPS)]
        return (
            "start-up (seconds after the job's first process started; each node's slowest "
            "rank)\n" + table(headers, rows, set(range(1, len(headers))))
        )

    def as_dict(self) -> dict[str, Any]:
        """For ``--json``: the origin, every rank's moments, and the nodes' rows."""
        return {"origin": self.origin, "ranks": self.ranks, "nodes": self.by_node()}


def gather_startup(first_collective: float) -> Startup:
    """Every rank's start-up moments, on every rank (one ``gather_objects``).

    Args:
        first_collective: When the job's first collective returned on this rank.

    Returns:
        The moments of every rank.
    """
    mine = asdict(startup_moments()) | {"first_collective": first_collective}
    mine["host"] = socket.gethostname()
    return Startup(list(gather_objects(mine)))
