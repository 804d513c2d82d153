"""What the roll call's ranks tell each other through the store: typed, with their encoding.

An :class:`Answer` is one rank's reply to a roll call (where it is, and its stack); a
:class:`Verdict` is what the calling rank decided from the answers. Each is a frozen
record that encodes itself to the JSON stored under the roll call's keys and decodes
from it, so that no untyped dictionary travels between the watchdog and the verdict.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

__all__ = ["Answer", "Collective", "Verdict"]


@dataclass(frozen=True, slots=True)
class Collective:
    """A collective as the ranks in it share it: its operation and its group.

    A rank's own call count and its call site may differ between ranks in the same
    collective, so neither is part of it.
    """

    op: str | None
    group: str = ""


@dataclass(frozen=True, slots=True)
class Answer:
    """One rank's answer to a roll call.

    Attributes:
        rank: The answering rank.
        where: Where it is, as the report says it (``in all_reduce #3 at t.py:9``).
        op: The collective it waits in, or None when it is in none.
        group: That collective's group, as the report names it (empty for the default).
        seq: Its call number of that collective, or None when it is in none.
        since: When it entered that collective (a Unix time), or None.
        host: The host it runs on.
        pid: Its process id.
        stack: Its main thread's stack, formatted.
    """

    rank: int
    where: str
    op: str | None = None
    group: str = ""
    seq: int | None = None
    since: float | None = None
    host: str = ""
    pid: int = 0
    stack: str = ""

    @property
    def waiting(self) -> bool:
        """Whether this rank waits in a collective."""
        return self.seq is not None

    @property
    def collective(self) -> Collective:
        """The collective this rank waits in (its operation, else where it is)."""
        return Collective(self.op if self.op is not None else self.where, self.group)

    def encode(self) -> str:
        """This answer as the JSON stored under the roll call's answer key."""
        return json.dumps(asdict(self))

    @classmethod
    def decode(cls, raw: bytes | str) -> Answer:
        """Read an answer that :meth:`encode` wrote.

        Raises:
            ValueError: The text is not an answer (not JSON, or no rank or place).
        """
        fields = json.loads(raw)
        if not isinstance(fields, dict) or "where" not in fields:
            message = f"not a roll-call answer: {raw!r:.200}"
            raise ValueError(message)
        since = fields.get("since")
        seq = fields.get("seq")
        op = fields.get("op")
        return cls(
            rank=int(fields.get("rank", -1)),
            where=str(fields["where"]),
            op=None if op is None else str(op),
            group=str(fields.get("group") or ""),
            seq=None if seq is None else int(seq),
            since=None if since is None else float(since),
            host=str(fields.get("host", "")),
            pid=int(fields.get("pid", 0)),
            stack=str(fields.get("stack", "")),
        )


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the rank that called the roll decided, for every rank's watchdog to read.

    Attributes:
        line: The grouped report (``ranks [0, 2] in all_reduce #57 ...; rank 1 ...``).
        culprits: The ranks the hang is on.
        began: When the hang began (a Unix time): the earliest waiting rank's entry.
        collective: The collective the calling rank waits in: the hang ends when its
            own call of it completes.
        entry: The number of the culprit's entry in the job's ledger, or None.
    """

    line: str
    culprits: tuple[int, ...]
    began: float
    collective: Collective = field(default_factory=lambda: Collective(None))
    entry: int | None = None

    def encode(self) -> str:
        """This verdict as the JSON stored under the roll call's verdict key."""
        return json.dumps(
            {
                "line": self.line,
                "culprits": list(self.culprits),
                "began": self.began,
                "collective": [self.collective.op, self.collective.group],
                "entry": self.entry,
            }
        )

    @classmethod
    def decode(cls, raw: bytes | str) -> Verdict:
        """Read a verdict that :meth:`encode` wrote.

        Raises:
            ValueError: The text is not a verdict.
        """
        fields = json.loads(raw)
        try:
            op, group = fields["collective"]
            entry = fields.get("entry")
            return cls(
                line=str(fields["line"]),
                culprits=tuple(int(rank) for rank in fields["culprits"]),
                began=float(fields["began"]),
                collective=Collective(None if op is None else str(op), str(group or "")),
                entry=None if entry is None else int(entry),
            )
        except (KeyError, TypeError) as exc:
            message = f"not a roll-call verdict: {raw!r:.200}"
            raise ValueError(message) from exc
