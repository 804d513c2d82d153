"""The main job's consistency section: every rank's fingerprint, grouped.

Each rank builds the fingerprint that ``helios_pg.init`` compares (versions, main
script, backend, device type, backend settings) and sends it with its host name to
every rank (one ``gather_objects``). Rank 0 prints the ranks grouped by fingerprint:
the first group's in full, each other group's only where it differs from the first,
then ``all ranks agree`` or each difference with its groups of ranks and hosts.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist

from helios_collectives._objects import gather_objects
from helios_env.integration import (
    Difference,
    Fingerprint,
    describe,
    differences,
    group_ranks,
    ranks_on,
)
from helios_pg.integration import own_fingerprint

__all__ = ["Consistency", "gather_consistency"]


@dataclass(frozen=True, slots=True)
class Consistency:
    """Every rank's fingerprint, grouped, and where the ranks differ.

    Attributes:
        hosts: Every rank's host, by rank.
        groups: Each distinct fingerprint and its ranks, in the order of their first rank.
        differences: The names whose compared values differ; empty when all ranks agree.
    """

    hosts: list[str]
    groups: list[tuple[Fingerprint, tuple[int, ...]]]
    differences: list[Difference]

    @property
    def software_differs(self) -> bool:
        """Whether ranks run different software (only possible with the check off at init)."""
        return any(difference.must_agree for difference in self.differences)

    def verdict(self) -> str:
        """``all ranks agree``, or each difference with its groups of ranks."""
        if not self.differences:
            return "all ranks agree"
        return "the ranks differ: " + "; ".join(
            describe(difference, self.hosts) for difference in self.differences
        )

    def format(self) -> str:
        """The section as text: the groups of ranks, their fingerprints, the verdict."""
        lines = ["consistency (what helios_pg.init compares)"]
        first: Fingerprint | None = None
        for found, ranks in self.groups:
            who = ranks_on(ranks, self.hosts)
            if first is None:
                first, head = found, who
                lines += [f"  {who}", found.format("    ")]
                continue
            changed = Fingerprint(tuple(item for item in found.items if item not in first.items))
            missing = [name for name, _ in first.items if name not in found.as_dict()]
            lines.append(f"  {who}: as {head}, but")
            if changed.items:
                lines.append(changed.format("    "))
            lines += [f"    {name}  not set" for name in missing]
        lines.append(f"  {self.verdict()}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        """The section as JSON-ready data."""
        return {
            "agree": not self.differences,
            "verdict": self.verdict(),
            "groups": [
                {
                    "ranks": list(ranks),
                    "hosts": list(dict.fromkeys(self.hosts[rank] for rank in ranks)),
                    "fingerprint": found.as_dict(),
                }
                for found, ranks in self.groups
            ],
            "differences": [
                {
                    "name": difference.name,
                    "must_agree": difference.must_agree,
                    "groups": [
                        {"value": value, "ranks": list(ranks)} for value, ranks in difference.groups
                    ],
                }
                for difference in self.differences
            ],
        }


def gather_consistency(device: torch.device) -> Consistency:
    """Gather every rank's fingerprint and host; a collective on the default group.

    Args:
        device: This rank's device.

    Returns:
        The section, the same on every rank.
    """
    mine = own_fingerprint(str(dist.get_backend()), device)
    gathered = gather_objects((socket.gethostname(), mine.encode()))
    hosts = [host for host, _ in gathered]
    fingerprints = {rank: Fingerprint.decode(text) for rank, (_, text) in enumerate(gathered)}
    return Consistency(hosts, group_ranks(fingerprints), differences(fingerprints))
