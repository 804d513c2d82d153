"""What helios-env reports of a process, with each value's source, as JSON or a table."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from helios_env._endpoint import endpoint
from helios_env._info import DistributedInfo
from helios_env._launcher import Launcher

__all__ = ["EnvironmentReport"]


def _known(value: int | None) -> str:
    return "unknown" if value is None else str(value)


@dataclass(frozen=True, slots=True)
class EnvironmentReport:
    """What helios-env sees of the current process, and where each value came from.

    Attributes:
        info: The resolved ranks and world sizes.
        launcher: The launcher whose variables were found.
        sources: For each field of ``info`` and for ``node_rank``, ``num_nodes``,
            ``master_addr``, ``master_port`` and ``job``, the variable it was read from,
            ``"process group"``, ``"default"``, ``"assumed: one node"``, ``"derived"``
            (computed from the other values, assuming every node runs as many
            processes), or ``"derived: ..."`` / ``"assumed: ..."`` /
            ``"not derived: ..."`` saying how; an assumption is made only where no
            variable says otherwise. Where two variables that state one value
            disagree, the one used is named first and the other beside it
            (``"SLURM_STEP_NUM_NODES (SLURM_NNODES='3' says otherwise)"``).
        process_group: Whether a live default process group answered.
        node_rank: The node's index, from ``SLURM_NODEID`` in a SLURM step or
            ``GROUP_RANK`` (torchrun) wherever they are set, else from the layout
            ``helios_pg.init()`` learned from the group; 0 when every rank runs on one
            node; None when nothing says it (mpirun on several nodes, before init).
        num_nodes: The number of nodes, from ``SLURM_STEP_NUM_NODES``,
            ``SLURM_NNODES``, the nodes that ``SLURM_STEP_TASKS_PER_NODE`` or
            ``SLURM_TASKS_PER_NODE`` list, the tasks over ``SLURM_NTASKS_PER_NODE``, or
            ``GROUP_WORLD_SIZE``, else as ``node_rank``; None when not known. Where
            neither is given, both are ``info``'s: a report never claims a node that
            its ``DistributedInfo`` does not.
        master_addr: ``MASTER_ADDR``; when unset under srun or mpirun, the derived
            address (loopback on one node, the first host of the step's nodelist).
        master_port: ``MASTER_PORT``; when unset under srun or mpirun, a port derived
            from the job's identity, outside the kernel's ephemeral range.
        job: The identity of this process's job (``"SLURM job 7 step 0"``,
            ``"torchrun run ..."``), which every rank of the job shares; None when the
            launcher gives none.
        gloo_interface: The interface gloo binds: ``GLOO_SOCKET_IFNAME`` when set;
            when this host's name resolves to a loopback address and the job may span
            nodes, the interface that routes to ``master_addr``, which
            ``helios_pg.init()`` sets; None for gloo's own choice. Its source says
            why, and names the problem when no interface fits.
    """

    info: DistributedInfo
    launcher: Launcher
    sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    process_group: bool = False
    node_rank: int | None = None
    num_nodes: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    job: str | None = None
    gloo_interface: str | None = None

    def __post_init__(self) -> None:
        if self.node_rank is None and self.num_nodes is None:
            object.__setattr__(self, "node_rank", self.info.node_rank)
            object.__setattr__(self, "num_nodes", self.info.num_nodes)

    @property
    def rendezvous(self) -> str | None:
        """``address:port`` of the rendezvous, or None when either is unknown."""
        if self.master_addr is None or self.master_port is None:
            return None
        return endpoint(self.master_addr, self.master_port)

    def as_dict(self) -> dict[str, object]:
        """Turn this report into plain JSON-ready data.

        Returns:
            A dictionary of JSON types, with ``"valid": True``.
        """
        info = self.info
        return {
            "valid": True,
            "launcher": self.launcher.value,
            "process_group": self.process_group,
            "local_rank": info.local_rank,
            "rank": info.rank,
            "local_world_size": info.local_world_size,
            "world_size": info.world_size,
            "node_rank": self.node_rank,
            "num_nodes": self.num_nodes,
            "attempt": info.attempt,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "master_addr": self.master_addr,
            "master_port": self.master_port,
            "job": self.job,
            "gloo_interface": self.gloo_interface,
            "sources": dict(self.sources),
        }

    def format(self) -> str:
        """Render this report as an aligned, human-readable table.

        Returns:
            The text, one line per value, each with its source in brackets.
        """
        info = self.info
        src = self.sources
        rendezvous = self.rendezvous or "unknown (set MASTER_ADDR and MASTER_PORT)"
        where = f"{src.get('master_addr', 'not set')}; {src.get('master_port', 'not set')}"
        if self.rendezvous is None and info.world_size == 1:
            # helios_pg.init runs a world of one on a local store: nothing to meet at.
            rendezvous, where = "not needed", "one process: helios_pg.init uses a local store"
        group = "live default group" if self.process_group else "none"
        job_unknown = "none" if self.launcher is Launcher.NONE else "unknown"
        rows = [
            ("launcher", str(self.launcher), src.get("launcher", "")),
            ("process group", group, ""),
            ("rank", f"{info.rank} of {info.world_size}", f"{src['rank']}, {src['world_size']}"),
            (
                "local rank",
                f"{info.local_rank} of {info.local_world_size}",
                f"{src['local_rank']}, {src['local_world_size']}",
            ),
            (
                "node",
                (
                    "unknown"
                    if self.node_rank is None and self.num_nodes is None
                    else f"{_known(self.node_rank)} of {_known(self.num_nodes)}"
                ),
                (
                    src["node_rank"]
                    if src["node_rank"] == src["num_nodes"]
                    else f"{src['node_rank']}, {src['num_nodes']}"
                ),
            ),
            ("attempt", str(info.attempt), src.get("attempt", "")),
            ("host", f"{socket.gethostname()} (pid {os.getpid()})", ""),
            ("rendezvous", rendezvous, where),
            ("job", self.job or job_unknown, src.get("job", "")),
            (
                "interface",
                self.gloo_interface or "gloo's choice",
                src.get("gloo_interface", ""),
            ),
        ]
        width = max(len(name) for name, _, _ in rows)
        lines = ["helios-env: distributed environment of this process"]
        for name, value, source in rows:
            suffix = f"  [{source}]" if source else ""
            lines.append(f"  {name:<{width}}  {value}{suffix}")
        return "\n".join(lines)
