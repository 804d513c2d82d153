"""What the links section found: node-by-node tables, the slowest link and the weak node.

A link's bandwidth is the slower of its two ways. A link is slow when its bandwidth is
under :data:`SLOW_RATIO` times less than the fastest link's; the node common to every
slow link, when there is exactly one (two slow links or more), is the weak spot. A
single slow link names its two ends, each fast elsewhere: the link, not a node, is
slow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from helios_collectives._main.table import table

__all__ = ["SLOW_RATIO", "Link", "Links", "format_rate"]

SLOW_RATIO = 4.0
"""A link is slow under the fastest link's bandwidth divided by this."""


def format_rate(gbps: float) -> str:
    """A rate in GB/s as text with its unit: ``2.1 GB/s``, ``12.3 MB/s``, ``640 kB/s``."""
    for scale, unit in ((1.0, "GB/s"), (1e-3, "MB/s"), (1e-6, "kB/s")):
        if gbps >= scale:
            return f"{gbps / scale:.3g} {unit}"
    return f"{gbps * 1e9:.3g} B/s"


@dataclass(frozen=True, slots=True)
class Link:
    """One pair of endpoints and what was measured between them.

    Attributes:
        a: The lower endpoint's name.
        b: The higher endpoint's name.
        latency_us: Half the median round trip of one float, in microseconds.
        up_gbps: Bandwidth from ``a`` to ``b``, GB/s.
        down_gbps: Bandwidth from ``b`` to ``a``, GB/s.
    """

    a: str
    b: str
    latency_us: float = math.nan
    up_gbps: float = math.nan
    down_gbps: float = math.nan

    @property
    def bandwidth_gbps(self) -> float:
        """The slower way's bandwidth."""
        return min(self.up_gbps, self.down_gbps)

    def with_value(self, kind: str, value: float) -> Link:
        """This link with ``"latency"`` (seconds), ``"up"`` or ``"down"`` (GB/s) set."""
        if kind == "latency":
            return replace(self, latency_us=value * 1e6)
        if kind == "up":
            return replace(self, up_gbps=value)
        return replace(self, down_gbps=value)

    def name(self) -> str:
        """``a <-> b``."""
        return f"{self.a} <-> {self.b}"


@dataclass(frozen=True, slots=True)
class Links:
    """Every measured link between the endpoints.

    Attributes:
        scope: ``"nodes"`` (one rank per node) or ``"local ranks"`` (one node).
        names: The endpoints' names.
        ranks: The rank that stands for each endpoint.
        links: Every pair's link, in endpoint order.
        rounds: How many rounds the pairs ran in.
        seconds: How long the measurement took on this rank.
    """

    scope: str
    names: list[str]
    ranks: list[int]
    links: list[Link]
    rounds: int
    seconds: float

    def slowest(self) -> Link | None:
        """The link with the lowest bandwidth, or None without links."""
        return min(self.links, key=lambda link: link.bandwidth_gbps, default=None)

    def slow(self) -> list[Link]:
        """The links under the fastest link's bandwidth divided by :data:`SLOW_RATIO`."""
        if not self.links:
            return []
        best = max(link.bandwidth_gbps for link in self.links)
        return [link for link in self.links if link.bandwidth_gbps * SLOW_RATIO < best]

    def weak_node(self) -> str | None:
        """The one endpoint on every slow link, when two links or more are slow."""
        slow = self.slow()
        if len(slow) < 2:
            return None
        common = set.intersection(*({link.a, link.b} for link in slow))
        return common.pop() if len(common) == 1 else None

    def verdict(self) -> str:
        """One line: the slowest link, and the weak node or why none is named."""
        slowest = self.slowest()
        if slowest is None:
            return "one rank: no link to measure"
        head = (
            f"slowest link {slowest.name()}: {format_rate(slowest.bandwidth_gbps)}, "
            f"{slowest.latency_us:.3g} us"
        )
        if len(self.links) == 1:
            return f"{head}; one link, nothing to compare it with"
        best = format_rate(max(link.bandwidth_gbps for link in self.links))
        slow, weak = self.slow(), self.weak_node()
        if weak is not None:
            tail = f"{weak} is on every slow link ({len(slow)} of {len(self.links)})"
        elif len(slow) == 1:
            tail = f"only this link is slow: {slowest.a} and {slowest.b} are fast elsewhere"
        elif slow:
            tail = f"{len(slow)} slow links share no node"
        else:
            tail = f"no link under 1/{SLOW_RATIO:g} of the fastest, no node named"
        return f"{head} (fastest {best}); {tail}"

    def _matrix(self, cell: str) -> str:
        values: dict[tuple[str, str], str] = {}
        for link in self.links:
            if cell == "bandwidth":
                values[link.a, link.b] = format_rate(link.up_gbps)
                values[link.b, link.a] = format_rate(link.down_gbps)
            else:
                values[link.a, link.b] = values[link.b, link.a] = f"{link.latency_us:.3g}"
        rows = [[a, *(values.get((a, b), "-") for b in self.names)] for a in self.names]
        return table(["from \\ to", *self.names], rows, set(range(1, len(self.names) + 1)))

    def format(self) -> str:
        """The section as text: two node-by-node tables and the verdict."""
        if not self.links:
            return f"links\n  {self.verdict()}"
        one = "one rank per node" if self.scope == "nodes" else "one node: its ranks"
        lines = [
            f"links (point to point, {one}: {len(self.names)} {self.scope}, "
            f"{self.rounds} round{'' if self.rounds == 1 else 's'}, {self.seconds:.1f} s)",
            "bandwidth, from the row to the column",
            self._matrix("bandwidth"),
            "latency (us, half a round trip)",
            self._matrix("latency"),
            self.verdict(),
        ]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        """The section as JSON-ready data."""
        slowest = self.slowest()
        return {
            "scope": self.scope,
            "endpoints": [
                {"name": n, "rank": r} for n, r in zip(self.names, self.ranks, strict=True)
            ],
            "links": [
                {
                    "a": link.a,
                    "b": link.b,
                    "latency_us": link.latency_us,
                    "a_to_b_gbps": link.up_gbps,
                    "b_to_a_gbps": link.down_gbps,
                }
                for link in self.links
            ],
            "slowest": None if slowest is None else [slowest.a, slowest.b],
            "slow": [[link.a, link.b] for link in self.slow()],
            "weak_node": self.weak_node(),
            "verdict": self.verdict(),
            "rounds": self.rounds,
            "seconds": self.seconds,
        }
