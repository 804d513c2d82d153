"""The main job's consistency and links sections, from what the ranks measured."""

from __future__ import annotations

import itertools

import pytest

from helios_collectives._main.consistency import Consistency
from helios_collectives._main.link_report import Link, Links, format_rate
from helios_collectives._main.links import endpoints, rounds
from helios_env._differences import differences, group_ranks
from helios_env._fingerprint import Fingerprint

NODES = ["node1", "node2", "node3"]


@pytest.mark.parametrize("count", [2, 3, 4, 5, 8])
def test_rounds_pair_every_endpoint_once_with_each_in_one_pair_per_round(count: int) -> None:
    schedule = rounds(count)

    pairs = [pair for found in schedule for pair in found]
    assert sorted(pairs) == list(itertools.combinations(range(count), 2))
    for found in schedule:
        ends = [end for pair in found for end in pair]
        assert len(ends) == len(set(ends))
    assert len(schedule) == (count - 1 if count % 2 == 0 else count)


def test_one_endpoint_has_no_round() -> None:
    assert rounds(1) == []


def test_each_node_is_stood_for_by_its_first_rank() -> None:
    assert endpoints(["a", "a", "b", "c", "b"]) == ("nodes", [0, 2, 3], ["a", "b", "c"])


def test_on_one_node_every_rank_is_an_endpoint() -> None:
    assert endpoints(["a", "a", "a"]) == ("local ranks", [0, 1, 2], ["rank 0", "rank 1", "rank 2"])


def links(*bandwidths: float) -> Links:
    """Three nodes' links (1-2, 1-3, 2-3) at these GB/s, each way, 50 us each."""
    pairs = itertools.combinations(NODES, 2)
    found = [Link(a, b, 50.0, gbps, gbps) for (a, b), gbps in zip(pairs, bandwidths, strict=True)]
    return Links("nodes", NODES, [0, 1, 2], found, 3, 1.5)


def test_the_node_on_every_slow_link_is_named() -> None:
    found = links(2.0, 0.0025, 0.0024)

    assert found.weak_node() == "node3"
    assert found.verdict() == (
        "slowest link node2 <-> node3: 2.4 MB/s, 50 us (fastest 2 GB/s); "
        "node3 is on every slow link (2 of 3)"
    )


def test_links_of_one_speed_name_no_node() -> None:
    found = links(2.0, 1.1, 1.6)

    assert found.slow() == []
    assert found.weak_node() is None
    assert found.verdict().endswith("no link under 1/4 of the fastest, no node named")


def test_one_slow_link_names_the_link_not_a_node() -> None:
    found = links(2.0, 0.01, 1.9)

    assert found.weak_node() is None
    assert found.verdict().endswith("only this link is slow: node1 and node3 are fast elsewhere")


def test_a_link_is_as_fast_as_its_slower_way() -> None:
    link = Link("a", "b").with_value("up", 2.0).with_value("down", 0.5).with_value("latency", 1e-4)

    assert link.bandwidth_gbps == 0.5
    assert link.latency_us == pytest.approx(100.0)


def test_the_tables_read_from_the_row_to_the_column() -> None:
    found = Links("nodes", ["a", "b"], [0, 2], [Link("a", "b", 40.0, 2.0, 0.003)], 1, 0.4)

    text = found.format()

    assert "one rank per node: 2 nodes, 1 round, 0.4 s)" in text
    assert "\na               -  2 GB/s\nb          3 MB/s       -\n" in text
    assert text.splitlines()[-1].endswith("one link, nothing to compare it with")
    assert found.as_dict()["slowest"] == ["a", "b"]


def test_one_rank_has_no_link() -> None:
    found = Links("local ranks", ["rank 0"], [0], [], 0, 0.0)

    assert found.format() == "links\n  one rank: no link to measure"


@pytest.mark.parametrize(
    ("gbps", "text"), [(2.5, "2.5 GB/s"), (0.0123, "12.3 MB/s"), (6.4e-4, "640 kB/s")]
)
def test_rates_carry_their_unit(gbps: float, text: str) -> None:
    assert format_rate(gbps) == text


def consistency(*fingerprints: dict[str, str]) -> Consistency:
    found = {rank: Fingerprint(tuple(items.items())) for rank, items in enumerate(fingerprints)}
    return Consistency(["n1", "n1", "n2"], group_ranks(found), differences(found))


BASE = {"python": "3.11.7", "torch": "2.6.0", "backend": "gloo"}


def test_ranks_that_agree_are_one_group() -> None:
    found = consistency(BASE, BASE, BASE)

    assert found.format().splitlines()[1] == "  ranks 0-2 (n1, n2)"
    assert found.format().endswith("  all ranks agree")
    assert found.as_dict()["agree"] is True
    assert not found.software_differs


def test_a_group_that_differs_shows_only_what_differs() -> None:
    other = BASE | {"NCCL_SOCKET_IFNAME": "eth1"}
    found = consistency(BASE, BASE, other)

    text = found.format()
    assert "  rank 2 (n2): as ranks 0-1 (n1), but\n    NCCL_SOCKET_IFNAME  eth1" in text
    assert text.endswith(
        "the ranks differ: NCCL_SOCKET_IFNAME: rank 2 (n2) eth1, ranks 0-1 (n1) not set"
    )
    assert not found.software_differs
    assert consistency(BASE, BASE, BASE | {"torch": "2.5.1"}).software_differs
