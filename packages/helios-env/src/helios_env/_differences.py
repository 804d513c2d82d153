"""Where the ranks' fingerprints differ, and how to say it: groups of ranks and their hosts.

Pure functions over :class:`helios_env._fingerprint.Fingerprint`, shared by ``init``'s
agreement check (:mod:`helios_pg._setup._agreement`) and the main job's consistency section.
A group of ranks is named with its hosts, such as ``ranks 2-3 (node1)``; the groups of
one difference are listed with rank 0's last, so the odd ones come first:
``ranks 2-3 (node1) run torch 2.5.1, ranks 0-1 (node0) torch 2.6.0``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from helios_env._fingerprint import Fingerprint, compared, must_agree

__all__ = [
    "OPT_OUT",
    "Difference",
    "describe",
    "differences",
    "disagreement_message",
    "group_ranks",
    "ranks_on",
    "settings_message",
    "span",
]

OPT_OUT = "pass check_agreement=False to init or set HELIOS_AGREEMENT_CHECK=0"
"""How to turn the agreement check off, in the words of every message that offers it."""
_LABELS = {"python": "Python", "cuda": "CUDA", "nccl": "NCCL", "script": "the main script"}
_HOSTS_SHOWN = 3


@dataclass(frozen=True, slots=True)
class Difference:
    """One name whose value differs between the ranks.

    Attributes:
        name: The fingerprint's item, such as ``"torch"`` or ``"NCCL_SOCKET_IFNAME"``.
        groups: Each value and the ranks that have it: rank 0's group last, the others
            by their first rank.
        must_agree: Whether ranks that differ here run different code (an error).
    """

    name: str
    groups: tuple[tuple[str, tuple[int, ...]], ...]
    must_agree: bool


def span(ranks: Sequence[int]) -> str:
    """Name ranks compactly: ``rank 3``, ``ranks 0-1``, ``ranks 0-2, 5``.

    Args:
        ranks: The ranks, in any order.

    Returns:
        The words.
    """
    ordered = sorted(set(ranks))
    runs: list[list[int]] = []
    for rank in ordered:
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    parts = [str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs]
    return f"{'rank' if len(ordered) == 1 else 'ranks'} {', '.join(parts)}"


def ranks_on(ranks: Sequence[int], hosts: Sequence[str], *, where: str = "") -> str:
    """Name ranks with their hosts: ``ranks 2-3 (node1)``, ``rank 0 (node0)``.

    Args:
        ranks: The ranks.
        hosts: Every rank's host, by rank; an empty name is not shown.
        where: Words before the hosts: ``"expected on "``.

    Returns:
        The words; the first few hosts are named, and how many more there are.
    """
    named = (hosts[rank] for rank in sorted(ranks) if rank < len(hosts))
    names = list(dict.fromkeys(name for name in named if name))
    if not names:
        return span(ranks)
    shown = ", ".join(names[:_HOSTS_SHOWN])
    if len(names) > _HOSTS_SHOWN:
        shown += f" and {len(names) - _HOSTS_SHOWN} more hosts"
    return f"{span(ranks)} ({where}{shown})"


def group_ranks(
    fingerprints: Mapping[int, Fingerprint],
) -> list[tuple[Fingerprint, tuple[int, ...]]]:
    """Group the ranks by their whole fingerprint, in the order of each group's first rank.

    Args:
        fingerprints: Each rank's fingerprint.

    Returns:
        Each distinct fingerprint and the ranks that have it.
    """
    groups: dict[Fingerprint, list[int]] = {}
    for rank in sorted(fingerprints):
        groups.setdefault(fingerprints[rank], []).append(rank)
    return [(found, tuple(ranks)) for found, ranks in groups.items()]


def differences(fingerprints: Mapping[int, Fingerprint]) -> list[Difference]:
    """Each name whose compared value differs between the ranks, in the fingerprints' order.

    Python differs only in major.minor and the script only in its digest
    (:func:`helios_env._fingerprint.compared`); a name one rank lacks is
    ``"not set"`` there.

    Args:
        fingerprints: Each rank's fingerprint.

    Returns:
        The differences; empty when the ranks agree.
    """
    names = list(dict.fromkeys(name for f in fingerprints.values() for name, _ in f.items))
    first = min(fingerprints, default=0)
    found = []
    for name in names:
        groups: dict[str, tuple[str, list[int]]] = {}
        for rank in sorted(fingerprints):
            value = fingerprints[rank].value(name)
            groups.setdefault(compared(name, value), (value, []))[1].append(rank)
        if len(groups) < 2:
            continue
        ordered = sorted(groups.values(), key=lambda group: (first in group[1], group[1][0]))
        found.append(Difference(name, tuple((v, tuple(r)) for v, r in ordered), must_agree(name)))
    return found


def describe(difference: Difference, hosts: Sequence[str]) -> str:
    """Say one difference: ``ranks 2-3 (node1) run torch 2.5.1, ranks 0-1 (node0) torch 2.6.0``.

    A setting is named first: ``NCCL_SOCKET_IFNAME: rank 1 (node1) eth1, rank 0 (node0)
    not set``.

    Args:
        difference: The difference.
        hosts: Every rank's host, by rank.

    Returns:
        The words.
    """
    parts = [(ranks_on(ranks, hosts), value) for value, ranks in difference.groups]
    if difference.must_agree:
        label = _LABELS.get(difference.name, difference.name)
        (who, value), *rest = parts
        verb = "runs" if len(difference.groups[0][1]) == 1 else "run"
        head = f"{who} {verb} {label} {value}"
        return ", ".join([head, *(f"{w} {label} {v}" for w, v in rest)])
    return f"{difference.name}: " + ", ".join(f"{who} {value}" for who, value in parts)


def disagreement_message(found: Sequence[Difference], hosts: Sequence[str]) -> str:
    """The error of ranks that run different code: each difference, and the way out.

    Args:
        found: The differences that must not be (``must_agree``).
        hosts: Every rank's host, by rank.

    Returns:
        The message.
    """
    named = "; ".join(describe(difference, hosts) for difference in found)
    return (
        f"the ranks do not run the same software: {named}. Install the same Python "
        "(major.minor), torch and helios versions and the same main script on every node, "
        f"or, to start anyway, {OPT_OUT}"
    )


def settings_message(
    found: Sequence[Difference], hosts: Sequence[str], unchecked: Sequence[int] = ()
) -> str:
    """The warning of ranks whose settings differ: each variable and its groups of ranks.

    Args:
        found: The differences in settings (not ``must_agree``).
        hosts: Every rank's host, by rank.
        unchecked: Ranks that did not take part in the check.

    Returns:
        The message.
    """
    parts = [describe(difference, hosts) for difference in found]
    if unchecked:
        off = "check_agreement=False or HELIOS_AGREEMENT_CHECK=0 there"
        parts.append(f"{ranks_on(unchecked, hosts)} did not take part in the check ({off})")
    return (
        f"the ranks' settings differ: {'; '.join(parts)}. A setting that differs by node "
        "can slow a job down or hang it: set it alike on every node unless that is meant "
        "(python -m helios_env shows a rank's), or silence this warning with "
        "warnings.filterwarnings('ignore', category=helios_pg.AgreementWarning)"
    )
