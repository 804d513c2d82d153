"""One line from each rank, gathered through a store in O(1) requests a rank.

Each rank appends its line (``RANK<TAB>...``) to one key and counts itself in; the rank
that gathers waits for the count and reads that one key once. A store written in
Python without ``append`` gets a key per rank instead. Used by init's exchange of host
names and by the straggler report's rounds.
"""

from __future__ import annotations

from typing import Any

__all__ = ["arrived", "read_lines", "send_line"]


def send_line(store: Any, prefix: str, rank: int, line: str) -> None:
    """Send this rank's line under ``prefix`` and count it in: two requests.

    Args:
        store: The store.
        prefix: The keys of this gathering.
        rank: This rank.
        line: What it sends, without the rank and without a newline.
    """
    text = f"{rank}\t{line}"
    try:
        store.append(f"{prefix}/entries", text + "\n")
    except (RuntimeError, NotImplementedError):  # a store written in Python, without append
        store.set(f"{prefix}/entry/{rank}", text)
    store.add(f"{prefix}/count", 1)


def arrived(store: Any, prefix: str) -> int:
    """How many ranks have sent their line under ``prefix``: one request."""
    return int(store.add(f"{prefix}/count", 0))


def _text(store: Any, key: str) -> str:
    return bytes(store.get(key)).decode(errors="replace")


def read_lines(store: Any, prefix: str, world_size: int) -> dict[int, list[str]]:
    """Every line sent under ``prefix`` so far, by rank, each without its rank.

    Args:
        store: The store.
        prefix: The keys of this gathering.
        world_size: The ranks that may have sent one: the key of each rank not found in
            the appended lines is looked at too.

    Returns:
        Each sending rank's lines (more than one where a rank was given to two processes).
    """
    key = f"{prefix}/entries"
    found: dict[int, list[str]] = {}
    for text in _text(store, key).splitlines() if store.check([key]) else []:
        number, tab, rest = text.partition("\t")
        if number.isdigit() and tab:
            found.setdefault(int(number), []).append(rest)
    for rank in range(world_size):
        own = f"{prefix}/entry/{rank}"
        if rank not in found and store.check([own]):
            said, tab, rest = _text(store, own).partition("\t")
            if said == str(rank) and tab:
                found[rank] = [rest]
    return found
