"""SLURM hostlists: expanded as ``scontrol show hostnames`` does, python-hostlist as oracle.

python-hostlist (module ``hostlist``) differs from Slurm in ways the comparison allows for:

- it removes duplicates unless ``allow_duplicates=True``; Slurm keeps them, so the oracle
  is always called with ``allow_duplicates=True`` (and ``sort=False``, its default);
- with three or more bracket groups in one item it varies the leftmost group slowest,
  Slurm the group just before the last (``_push_range_list`` in Slurm's hostlist.c
  loops over the groups before the last from right to left; Slurm's test2.20 lists
  ``row[0,1]_rack[2-3]_blade[4,5]`` in that order). Items with up to two groups are
  compared as they are; for more, python-hostlist's expansion of the item is reordered
  into Slurm's loop order (``slurm_order``), the names themselves still come from it;
- it does not split on whitespace ("a b" is one host to it), Slurm does: the generator
  uses no whitespace, and Slurm's rule has its own test;
- it skips empty items (``a,,b``) and caps a range at 100,000 hosts; helios rejects
  empty items and caps the whole list at 1,000,000 hosts: the generator makes neither.
"""

from __future__ import annotations

import itertools
import pickle
from dataclasses import dataclass

import hostlist  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helios_env import HostlistError, _hostlist
from helios_env._hostlist import expand_hostlist, first_host

# No per-example deadline: a loaded CI machine must not turn slowness into failures.
many = settings(max_examples=500, deadline=None)

# Literal text around bracket groups: no separator, no bracket; '%' checks that names
# are never used as format strings.
TEXT = st.text(alphabet="abnxz019-_.%", max_size=4)


@dataclass(frozen=True)
class Item:
    """One comma-separated item: ``texts[0] [groups[0]] texts[1] ... [groups[-1]] texts[-1]``."""

    texts: tuple[str, ...]
    groups: tuple[str, ...]  # the text between each pair of brackets

    def __str__(self) -> str:
        parts = [self.texts[0]]
        for group, text in zip(self.groups, self.texts[1:], strict=True):
            parts += (f"[{group}]", text)
        return "".join(parts)


# Strategies are built once, here: built inside each draw, hypothesis builds and
# validates them anew every time (this file took 18 s instead of 12, the same examples).
LOW, PAD, SPAN, HIGH_PAD = (
    st.integers(0, 120),
    st.integers(0, 3),
    st.integers(0, 8),
    st.integers(0, 2),
)
SINGLE = st.booleans()


@st.composite
def numbers(draw: st.DrawFn) -> str:
    """A bracket entry: N or LO-HI, zero-padded or not, the high bound any width."""
    lo = draw(LOW)
    lo_text = str(lo).zfill(len(str(lo)) + draw(PAD))
    if draw(SINGLE):
        return lo_text
    hi = lo + draw(SPAN)
    return f"{lo_text}-{str(hi).zfill(len(str(hi)) + draw(HIGH_PAD))}"


GROUP = st.lists(numbers(), min_size=1, max_size=3).map(",".join)
GROUPS = st.integers(0, 3)
LONE_TEXT = st.text(alphabet="abnxz019-_.%", min_size=1, max_size=6)


@st.composite
def items(draw: st.DrawFn) -> Item:
    groups = tuple(draw(GROUP) for _ in range(draw(GROUPS)))
    texts = tuple(draw(TEXT) for _ in range(len(groups) + 1))
    if not groups and not texts[0]:
        texts = (draw(LONE_TEXT),)
    return Item(texts, groups)


NODELISTS = st.lists(items(), min_size=1, max_size=5)


def oracle(item: Item) -> list[str]:
    return list(hostlist.expand_hostlist(str(item), allow_duplicates=True))


def slurm_order(item: Item) -> list[str]:
    """python-hostlist's expansion of one item, in Slurm's order.

    python-hostlist's list is the product of the groups with the first varying slowest;
    Slurm nests its loops as groups[-2], groups[-3], ..., groups[0], groups[-1].
    """
    names = oracle(item)
    sizes = [len(oracle(Item(("", ""), (group,)))) for group in item.groups]
    if len(sizes) < 3:
        return names
    strides = [1] * len(sizes)
    for k in range(len(sizes) - 2, -1, -1):
        strides[k] = strides[k + 1] * sizes[k + 1]
    loops = [*range(len(sizes) - 2, -1, -1), len(sizes) - 1]  # slowest first
    ordered = []
    for picked in itertools.product(*(range(sizes[k]) for k in loops)):
        ordered.append(names[sum(strides[k] * i for k, i in zip(loops, picked, strict=True))])
    return ordered


# --------------------------------------------------------------------------- generated


@many
@given(NODELISTS)
def test_expansion_matches_python_hostlist_in_slurm_order(nodelist: list[Item]) -> None:
    text = ",".join(map(str, nodelist))
    expected = [name for item in nodelist for name in slurm_order(item)]

    assert expand_hostlist(text) == expected


@many
@given(NODELISTS.filter(lambda nodelist: all(len(item.groups) <= 2 for item in nodelist)))
def test_up_to_two_groups_matches_python_hostlist_as_is(nodelist: list[Item]) -> None:
    text = ",".join(map(str, nodelist))

    assert expand_hostlist(text) == hostlist.expand_hostlist(text, allow_duplicates=True)


@many
@given(NODELISTS)
def test_first_host_is_the_first_of_the_expansion(nodelist: list[Item]) -> None:
    text = ",".join(map(str, nodelist))

    assert first_host(text) == expand_hostlist(text)[0]


@settings(max_examples=100, deadline=None)
@given(NODELISTS, st.lists(st.sampled_from([" ", "\t", "\n", ", ", " ,\t", "\n,"]), min_size=4))
def test_whitespace_separates_items_as_in_slurm(
    nodelist: list[Item], separators: list[str]
) -> None:
    # Slurm's hostlist_create_client splits on "\t, \n"; python-hostlist on ',' only.
    joined = str(nodelist[0])
    for item, separator in zip(nodelist[1:], itertools.cycle(separators)):
        joined += separator + str(item)

    assert expand_hostlist(f" {joined}\n") == expand_hostlist(",".join(map(str, nodelist)))


@settings(max_examples=200, deadline=None)
@given(NODELISTS, st.lists(st.integers(1, 3), min_size=1))
def test_spaces_after_commas_read_as_without(nodelist: list[Item], spaces: list[int]) -> None:
    # As hand-written job scripts and some tools write them: "c1, c2", "node[089, 100-110]".
    compact = ",".join(map(str, nodelist))
    widths = itertools.cycle(spaces)
    spaced = "".join(char + " " * next(widths) if char == "," else char for char in compact)

    assert expand_hostlist(spaced) == expand_hostlist(compact)
    assert first_host(spaced) == first_host(compact)


# --------------------------------------------------------------------------- explicit

# (nodelist, expected hosts), from Slurm's documentation and tests.
DOCUMENTED: list[object] = [
    # slurm.conf(5), NODE CONFIGURATION
    pytest.param("alpha,beta,gamma", ["alpha", "beta", "gamma"], id="slurm.conf-names"),
    pytest.param(
        "linux[0-64,128]", [f"linux{i}" for i in range(65)] + ["linux128"], id="slurm.conf-linux"
    ),
    pytest.param("lx[15,18,32-33]", ["lx15", "lx18", "lx32", "lx33"], id="slurm.conf-lx"),
    pytest.param(
        "rack[0-63]_blade[0-41]",
        [f"rack{r}_blade{b}" for r in range(64) for b in range(42)],
        id="slurm.conf-rack-blade",
    ),
    pytest.param(
        "linux[0000-1023]", [f"linux{i:04d}" for i in range(1024)], id="slurm.conf-padded"
    ),
    # scontrol(1), hostnames; hostlist.h, hostlist_create
    pytest.param("tux[1-3]", ["tux1", "tux2", "tux3"], id="scontrol-hostnames"),
    pytest.param(
        "tux[0-5,12,20-25]",
        [f"tux{i}" for i in [*range(6), 12, *range(20, 26)]],
        id="hostlist.h-tux",
    ),
    # scontrol(1), hostlist: "does not sort the node list or make it unique"
    pytest.param("tux2,tux1,tux2", ["tux2", "tux1", "tux2"], id="scontrol-duplicates-kept"),
    pytest.param("tux[2,1-2]", ["tux2", "tux1", "tux2"], id="bracket-duplicates-kept"),
    # testsuite/expect/test2.20
    pytest.param("rack[0-3]", ["rack0", "rack1", "rack2", "rack3"], id="test2.20-single"),
    pytest.param(
        "rack[0-1]_blade[2,3]",
        ["rack0_blade2", "rack0_blade3", "rack1_blade2", "rack1_blade3"],
        id="test2.20-double",
    ),
    pytest.param(
        "row[0,1]_rack[2-3]_blade[4,5]",
        [
            "row0_rack2_blade4",
            "row0_rack2_blade5",
            "row1_rack2_blade4",
            "row1_rack2_blade5",
            "row0_rack3_blade4",
            "row0_rack3_blade5",
            "row1_rack3_blade4",
            "row1_rack3_blade5",
        ],
        id="test2.20-triple-slurm-order",
    ),
    # Padding comes from the lower bound as written (Slurm: width = strlen(lo)).
    pytest.param("n[08-10]", ["n08", "n09", "n10"], id="pad-from-lower-bound"),
    pytest.param("n[1-010]", [f"n{i}" for i in range(1, 11)], id="high-bound-width-ignored"),
    pytest.param("n[001-010]", [f"n{i:03d}" for i in range(1, 11)], id="pad-width-3"),
    pytest.param("n[9-11]", ["n9", "n10", "n11"], id="no-padding"),
    pytest.param("n[1,3-5,07]", ["n1", "n3", "n4", "n5", "n07"], id="comma-list"),
    pytest.param("n[1-2]-ib", ["n1-ib", "n2-ib"], id="suffix"),
    pytest.param(
        "rack[1-2]-node[01-03]",
        [f"rack{r}-node{n:02d}" for r in (1, 2) for n in (1, 2, 3)],
        id="two-groups-leftmost-slowest",
    ),
    pytest.param("a[1-2][3-4]", ["a13", "a14", "a23", "a24"], id="adjacent-groups"),
    pytest.param("[1-3]", ["1", "2", "3"], id="no-prefix"),
    pytest.param("n007", ["n007"], id="plain-name-kept-verbatim"),
    pytest.param("a%d[1-2]%s", ["a%d1%s", "a%d2%s"], id="percent-in-names"),
    pytest.param("a b\tc\nd", ["a", "b", "c", "d"], id="whitespace-separates"),
    pytest.param(" a , b ", ["a", "b"], id="whitespace-around-commas"),
    pytest.param("c1, c2", ["c1", "c2"], id="space-after-comma"),
    pytest.param(
        "node[089, 100-102]",
        ["node089", "node100", "node101", "node102"],
        id="space-after-comma-in-brackets",
    ),
    pytest.param("n[1,   3-4],m", ["n1", "n3", "n4", "m"], id="spaces-after-comma-in-brackets"),
    pytest.param("n[18446744073709551615]", ["n18446744073709551615"], id="largest-number"),
    pytest.param("n[00000000000000000000001]", ["n00000000000000000000001"], id="long-padding"),
]


@pytest.mark.parametrize(("nodelist", "expected"), DOCUMENTED)
def test_documented_forms(nodelist: str, expected: list[str]) -> None:
    assert expand_hostlist(nodelist) == expected
    assert first_host(nodelist) == expected[0]


def test_the_size_limit_is_one_million_hosts() -> None:
    assert len(expand_hostlist("n[1-1000000]")) == 1_000_000
    assert first_host("n[1-999999],m") == "n1"
    for nodelist in ("n[1-1000001]", "n[1-999999],m,o", "a[1-1000]b[1-1001]"):
        with pytest.raises(HostlistError, match="more than 1,000,000 hosts"):
            expand_hostlist(nodelist)
        with pytest.raises(HostlistError, match="more than 1,000,000 hosts"):
            first_host(nodelist)


def test_absurd_sizes_fail_before_expanding() -> None:
    # 10**40 hosts: the count is checked before anything is built.
    with pytest.raises(HostlistError, match="more than"):
        expand_hostlist("n" + "[0-9999999999]" * 4)


def test_first_host_expands_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("first_host expanded the hostlist")

    monkeypatch.setattr(_hostlist, "_expand_into", refuse)
    monkeypatch.setattr(_hostlist, "_heads", refuse)
    monkeypatch.setattr(_hostlist, "_names", refuse)

    assert first_host("gpu[0007-0999,2000]-ib,login1") == "gpu0007-ib"
    assert first_host("row[3-9]_rack[12-80]_blade[05-40]") == "row3_rack12_blade05"


# --------------------------------------------------------------------------- malformed

MALFORMED: list[object] = [
    pytest.param("", "no host names", id="empty"),
    pytest.param(" \t\n", "no host names", id="only-whitespace"),
    pytest.param(",", "empty item before the ',' at offset 0", id="only-comma"),
    pytest.param(",n1", "empty item before the ',' at offset 0", id="leading-comma"),
    pytest.param("n1,", "empty item after the ',' at offset 2", id="trailing-comma"),
    pytest.param("n1,,n2", "empty item between the ',' at offsets 2 and 3", id="double-comma"),
    pytest.param("n1, ,n2", "empty item between", id="blank-item"),
    pytest.param("n[1-2", "'[' at offset 1 has no matching ']'", id="unclosed-bracket"),
    pytest.param("n[1-2],m[3", "'[' at offset 8 has no matching ']'", id="unclosed-later"),
    pytest.param("n1-2]", "']' at offset 4 has no matching '['", id="stray-close"),
    pytest.param("n[1-2]]", "']' at offset 6 has no matching '['", id="extra-close"),
    pytest.param("n[1[2]]", "nested", id="nested"),
    pytest.param("n[]", "empty brackets at offset 1", id="empty-brackets"),
    pytest.param("n[1,,2]", "an empty range at offset 4", id="empty-range"),
    pytest.param("n[1,]", "an empty range", id="trailing-comma-in-brackets"),
    pytest.param("n[5-3]", "range 5-3 in the brackets at offset 1 runs backwards", id="lo-gt-hi"),
    pytest.param("n[a-b]", "range 'a-b' is not N or LO-HI", id="letters"),
    pytest.param("n[1-x]", "range '1-x' is not N or LO-HI", id="letter-high"),
    pytest.param("n[1-]", "range '1-' is not N or LO-HI", id="no-high"),
    pytest.param("n[-1]", "range '-1' is not N or LO-HI", id="no-low"),
    pytest.param("n[--1]", "range '--1' is not N or LO-HI", id="negative"),
    pytest.param("n[1-2-3]", "range '1-2-3' is not N or LO-HI", id="two-dashes"),
    pytest.param("n[+1]", "range '+1' is not N or LO-HI", id="plus-sign"),
    pytest.param("n[ 1]", "range ' 1' is not N or LO-HI at offset 2", id="space-in-brackets"),
    pytest.param("n[1 ,2]", "range '1 ' is not N or LO-HI at offset 2", id="space-before-comma"),
    pytest.param("n[1,  2 ]", "range '2 ' is not N or LO-HI at offset 6", id="space-after-range"),
    pytest.param("n[1,\t2]", "range '\\t2' is not N or LO-HI at offset 4", id="tab-after-comma"),
    pytest.param("n[1, ]", "an empty range at offset 5", id="space-only-range"),
    pytest.param("n[1, x]", "range 'x' is not N or LO-HI at offset 5", id="letter-after-space"),
    pytest.param("n[1x2]", "range '1x2' is not N or LO-HI", id="slurm-box"),
    pytest.param("n[\u0663]", "is not N or LO-HI", id="not-ascii-digit"),
    pytest.param("n[18446744073709551616]", "does not fit in 64 bits", id="over-64-bits"),
    pytest.param("n[1-2]x[3-1]", "in the brackets at offset 7 runs backwards", id="bad-second"),
    pytest.param("n1,m[2-1]", "runs backwards", id="bad-second-item"),
]


@pytest.mark.parametrize(("nodelist", "reason"), MALFORMED)
def test_malformed_hostlists_raise_naming_the_input(nodelist: str, reason: str) -> None:
    for function in (expand_hostlist, first_host):
        with pytest.raises(HostlistError) as caught:
            function(nodelist)

        assert isinstance(caught.value, ValueError)
        assert caught.value.nodelist == nodelist
        assert reason in caught.value.reason
        assert str(caught.value) == f"invalid hostlist {nodelist!r}: {caught.value.reason}"


def test_the_error_survives_pickling() -> None:
    with pytest.raises(HostlistError) as caught:
        expand_hostlist("n[1-")

    copy = pickle.loads(pickle.dumps(caught.value))

    assert type(copy) is HostlistError
    assert (copy.nodelist, copy.reason, str(copy)) == (
        caught.value.nodelist,
        caught.value.reason,
        str(caught.value),
    )
