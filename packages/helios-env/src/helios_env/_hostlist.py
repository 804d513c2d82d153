"""SLURM's compressed hostlists (``SLURM_JOB_NODELIST``), expanded as ``scontrol`` does.

The syntax, as ``scontrol show hostnames`` reads it (Slurm's ``src/common/hostlist.c``,
``hostlist_create_client``):

- items are separated by ``,`` outside brackets; a space, a tab or a newline also
  separates items, as in Slurm, so ``c1, c2`` is ``c1,c2``;
- inside brackets, spaces after a comma are ignored (``node[089, 100-110]``), as
  Slurm's ``strtoul`` ignores them;
- an item is literal text with any number of bracket groups, each a comma-separated
  list of decimal numbers and ``LO-HI`` ranges: ``tux[0-5,12,20-25]``,
  ``rack[1-2]-node[01-03]``, ``n[1-2]-ib``;
- a range is zero-padded to the width of its lower bound as written: ``[001-010]``
  gives ``001`` .. ``010``, ``[1-010]`` gives ``1`` .. ``10``, ``[08-10]`` gives
  ``08``, ``09``, ``10``;
- duplicates are kept, in order, and nothing is sorted.

Several bracket groups in one item expand as a product, in Slurm's order: the last
group varies fastest, then the first, second, ... up to the one before the last, which
varies slowest (``_push_range_list`` loops over the groups before the last from right
to left). With two groups that is "leftmost slowest"; with three or more it is not
python-hostlist's order, which varies the leftmost group slowest:
``row[0-1]_rack[2-3]_blade[4-5]`` gives ``row0_rack2_blade4``, ``row0_rack2_blade5``,
``row1_rack2_blade4``, ... as Slurm's own test ``test2.20`` lists them.

Stricter than Slurm, which accepts (and mangles) these: an empty item (``a,,b``, a
leading or trailing comma), a ``]`` without ``[``, nested brackets, a range that is not
plain ASCII digits (Slurm's ``strtoul`` takes ``[ 1]``, ``[+1]`` and ``[1-]``), and a
number over 64 bits (Slurm saturates it) all raise :class:`HostlistError`, as do an
unclosed ``[``, empty brackets, ``LO > HI`` and an empty nodelist. Less strict than
Slurm, which rejects a range or a leading bracket group of over 65,536 hosts: here only
the whole list is capped, at 1,000,000 hosts. Slurm's
``{...}`` hostlist functions, which ``scontrol`` sends to the controller, are not
supported: ``{`` and ``}`` are ordinary characters here.
"""

from __future__ import annotations

import itertools
import re
from typing import NamedTuple

from helios_env._errors import HostlistError

__all__ = ["expand_hostlist", "first_host"]

# More hosts than this is taken for a mistake (or an attack), not a job's node list.
_MAX_HOSTS = 1_000_000
# Slurm reads bracket numbers with strtoul: an unsigned long, 64 bits on Linux.
_MAX_NUMBER = 2**64 - 1
# What ends a run of literal text: a bracket or a separator (Slurm's "\t, \n").
_SPECIAL = re.compile(r"[\[\], \t\n]")
# One entry of a bracket group: N or LO-HI, ASCII digits only.
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_DIGITS = "0123456789"


# (lo, hi, width): the numbers lo..hi, each zero-padded to width digits.
_Range = tuple[int, int, int]
_Group = tuple[_Range, ...]


class _Item(NamedTuple):
    """One comma-separated item: ``texts[0] group[0] texts[1] ... group[-1] texts[-1]``."""

    texts: tuple[str, ...]
    groups: tuple[_Group, ...]


def _number(nodelist: str, text: str, where: str) -> int:
    """The value of a run of ASCII digits, if it fits in Slurm's unsigned long."""
    if len(text) < 20:  # at most 19 digits: always below 2**64
        return int(text)
    significant = text.lstrip("0")
    if len(significant) > 20 or int(significant or "0") > _MAX_NUMBER:
        raise HostlistError(nodelist, f"number {text} {where} does not fit in 64 bits")
    return int(significant or "0")


def _parse_group(nodelist: str, offset: int) -> tuple[_Group, int, int]:
    """The bracket group that opens at ``offset``: its ranges, size and closing offset."""
    close = nodelist.find("]", offset + 1)
    if close < 0:
        raise HostlistError(nodelist, f"'[' at offset {offset} has no matching ']'")
    inner = nodelist[offset + 1 : close]
    nested = inner.find("[")
    if nested >= 0:
        raise HostlistError(
            nodelist, f"'[' at offset {offset + 1 + nested} is nested in the '[' at offset {offset}"
        )
    where = f"in the brackets at offset {offset}"
    if not inner:
        raise HostlistError(nodelist, f"empty brackets at offset {offset}")
    ranges: list[_Range] = []
    count = 0
    start = offset + 1  # where the current range begins, spaces included
    for index, written in enumerate(inner.split(",")):
        # A space after a comma, as hand-written lists have it, reads as without.
        part = written.lstrip(" ") if index else written
        at, start = start + len(written) - len(part), start + len(written) + 1
        match = _RANGE.fullmatch(part)
        if match is None:
            what = "an empty range" if not part else f"range {part!r} is not N or LO-HI"
            raise HostlistError(nodelist, f"{what} at offset {at} {where} (decimal digits only)")
        lo_text, hi_text = match.groups()
        lo = _number(nodelist, lo_text, where)
        hi = lo if hi_text is None else _number(nodelist, hi_text, where)
        if lo > hi:
            raise HostlistError(nodelist, f"range {part} {where} runs backwards ({lo} > {hi})")
        ranges.append((lo, hi, len(lo_text)))
        count += hi - lo + 1
    return tuple(ranges), count, close


def _parse(nodelist: str) -> list[_Item]:
    """The items of a hostlist, checked for syntax and size; O(len(nodelist))."""
    items: list[_Item] = []
    total = 0
    texts: list[str] = []
    groups: list[_Group] = []
    hosts = 1  # how many hosts the current item names so far
    literal_start = 0  # where the current run of literal text began
    last_comma = -1  # offset of the last comma seen
    item_since_comma = False  # whether an item ended since that comma (or the start)
    pos = 0
    while True:
        match = _SPECIAL.search(nodelist, pos)
        stop = len(nodelist) if match is None else match.start()
        char = "" if match is None else nodelist[stop]
        if char == "[":
            texts.append(nodelist[literal_start:stop])
            group, count, close = _parse_group(nodelist, stop)
            groups.append(group)
            hosts *= count
            if total + hosts > _MAX_HOSTS:
                raise HostlistError(nodelist, f"expands to more than {_MAX_HOSTS:,} hosts")
            literal_start = pos = close + 1
            continue
        if char == "]":
            raise HostlistError(nodelist, f"']' at offset {stop} has no matching '['")
        # A separator or the end: it ends the current item, if there is one.
        tail = nodelist[literal_start:stop]
        if groups or tail:
            texts.append(tail)
            total += hosts
            if total > _MAX_HOSTS:
                raise HostlistError(nodelist, f"expands to more than {_MAX_HOSTS:,} hosts")
            items.append(_Item(tuple(texts), tuple(groups)))
            texts = []
            groups = []
            hosts = 1
            item_since_comma = True
        if char == ",":
            if not item_since_comma:
                where = (
                    f"before the ',' at offset {stop}"
                    if last_comma < 0
                    else f"between the ',' at offsets {last_comma} and {stop}"
                )
                raise HostlistError(nodelist, f"empty item {where}")
            last_comma = stop
            item_since_comma = False
        elif not char:
            break
        literal_start = pos = stop + 1
    if not items:
        raise HostlistError(nodelist, "no host names")
    if not item_since_comma:
        raise HostlistError(nodelist, f"empty item after the ',' at offset {last_comma}")
    return items


def _names(head: str, lo: int, hi: int, width: int, tail: str) -> list[str]:
    """``head + number + tail`` for each number lo..hi, zero-padded to ``width`` digits."""
    if hi - lo < 20:
        number = f"%0{width}d"
        return [head + number % i + tail for i in range(lo, hi + 1)]
    # Format each ten once and append the last digit, a concatenation being several
    # times cheaper than a formatting: "%0{w}d" % (10 * tens + digit) is
    # "%0{w-1}d" % tens + digit, except that at width 1 the ten 0 is "" and not "0".
    ten = f"%0{width - 1}d"
    bases = [head + ten % tens for tens in range(lo // 10, hi // 10 + 1)]
    if width == 1 and lo < 10:
        bases[0] = head
    endings = [digit + tail for digit in _DIGITS]
    names = [base + ending for base in bases for ending in endings]
    return names[lo % 10 : len(names) - 9 + hi % 10]


def _group_names(head: str, group: _Group, tail: str) -> list[str]:
    """``head + number + tail`` for each number of a bracket group, in order."""
    names: list[str] = []
    for lo, hi, width in group:
        names += _names(head, lo, hi, width, tail)
    return names


def _heads(item: _Item) -> list[str]:
    """Everything before the last group's number, one per host prefix, in Slurm's order."""
    texts, groups = item.texts, item.groups
    if len(groups) == 2:
        return _group_names(texts[0], groups[0], texts[1])
    # Slurm loops over the groups before the last from right to left: the one just
    # before the last varies slowest, the first fastest.
    outer_first = [_group_names("", group, "") for group in reversed(groups[:-1])]
    heads = []
    for combination in itertools.product(*outer_first):
        parts = [texts[0]]
        for number, text in zip(reversed(combination), texts[1:-1], strict=True):
            parts += (number, text)
        heads.append("".join(parts))
    return heads


def _expand_into(item: _Item, out: list[str]) -> None:
    """Append the hosts of one item to ``out``."""
    texts, groups = item.texts, item.groups
    if not groups:
        out.append(texts[0])
    elif len(groups) == 1:
        out += _group_names(texts[0], groups[0], texts[1])
    else:
        endings = _group_names("", groups[-1], texts[-1])
        for head in _heads(item):
            out += [head + ending for ending in endings]


def expand_hostlist(nodelist: str) -> list[str]:
    """Expand a SLURM hostlist into host names, as ``scontrol show hostnames`` does.

    Args:
        nodelist: A compressed hostlist such as ``SLURM_JOB_NODELIST``, for example
            ``"gpu[001-004,010],login1"`` or ``"rack[1-2]-node[01-03]-ib"``.

    Returns:
        The host names in Slurm's order, duplicates kept.

    Raises:
        HostlistError: ``nodelist`` is empty, malformed (an empty item, unbalanced or
            nested brackets, empty brackets, a range that is not decimal digits or
            runs backwards, a number over 64 bits) or expands to more than 1,000,000
            hosts.

    Example:
        >>> expand_hostlist("n[08-10],login")
        ['n08', 'n09', 'n10', 'login']
    """
    hosts: list[str] = []
    for item in _parse(nodelist):
        _expand_into(item, hosts)
    return hosts


def first_host(nodelist: str) -> str:
    """The first host of a SLURM hostlist, without expanding the others.

    Equal to ``expand_hostlist(nodelist)[0]`` and raising where it raises, in time
    linear in the length of ``nodelist`` however many hosts it names.

    Args:
        nodelist: A compressed hostlist such as ``SLURM_JOB_NODELIST``.

    Returns:
        The first host name.

    Raises:
        HostlistError: As :func:`expand_hostlist`.

    Example:
        >>> first_host("gpu[007-512],login1")
        'gpu007'
    """
    item = _parse(nodelist)[0]
    parts = [item.texts[0]]
    for group, text in zip(item.groups, item.texts[1:], strict=True):
        lo, _, width = group[0]
        parts += (f"%0{width}d" % lo, text)
    return "".join(parts)
