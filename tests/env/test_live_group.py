"""A live default process group, found through sys.modules, wins over the environment.

torch is not installed for these tests, so ``torch.distributed`` is a stand-in put into
``sys.modules`` (see conftest.py); tests/pg repeats the main cases with a real group.
"""

from __future__ import annotations

import sys
import types

import pytest

from helios_env import (
    DistributedInfo,
    get_dist_info,
    get_global_rank,
    get_world_size,
    inspect_environment,
)
from tests.env.launchers import LiveGroup, hand_set_env, set_environ, torchrun_env


def test_group_answers_without_any_launcher_variable(live_group: LiveGroup) -> None:
    # init_process_group(init_method="tcp://...", rank=1, world_size=3): no env vars.
    live_group(rank=1, world_size=3)

    assert get_dist_info() == DistributedInfo(
        local_rank=1, rank=1, local_world_size=3, world_size=3
    )


def test_group_rank_and_size_win_over_the_environment(
    monkeypatch: pytest.MonkeyPatch, live_group: LiveGroup
) -> None:
    set_environ(monkeypatch, hand_set_env(rank=0, world_size=2))
    live_group(rank=3, world_size=5)

    info = get_dist_info()

    assert (info.rank, info.world_size) == (3, 5)


def test_local_values_come_from_the_environment_when_its_world_size_matches(
    monkeypatch: pytest.MonkeyPatch, live_group: LiveGroup
) -> None:
    set_environ(monkeypatch, torchrun_env(rank=3, world_size=4, node_rank=1, num_nodes=2))
    live_group(rank=3, world_size=4)

    assert get_dist_info() == DistributedInfo(
        local_rank=1, rank=3, local_world_size=2, world_size=4, node_rank=1, num_nodes=2
    )


def test_local_values_assume_one_node_when_the_environment_describes_another_run(
    monkeypatch: pytest.MonkeyPatch, live_group: LiveGroup
) -> None:
    set_environ(monkeypatch, torchrun_env(rank=3, world_size=4, node_rank=1, num_nodes=2))
    live_group(rank=2, world_size=3)

    assert get_dist_info() == DistributedInfo(
        local_rank=2, rank=2, local_world_size=3, world_size=3
    )


def test_sources_name_the_process_group(
    monkeypatch: pytest.MonkeyPatch, live_group: LiveGroup
) -> None:
    set_environ(monkeypatch, torchrun_env(rank=1, world_size=2))
    live_group(rank=1, world_size=2)

    report = inspect_environment()

    assert report.process_group is True
    assert (report.sources["rank"], report.sources["world_size"]) == (
        "process group",
        "process group",
    )
    assert (report.sources["local_rank"], report.sources["local_world_size"]) == (
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
    )


def test_an_uninitialized_group_is_absent(
    monkeypatch: pytest.MonkeyPatch, live_group: LiveGroup
) -> None:
    set_environ(monkeypatch, hand_set_env(rank=1, world_size=2))
    fake = live_group(rank=7, world_size=8, initialized=False)

    assert get_dist_info().rank == 1
    assert fake.calls == 0


def test_an_unavailable_distributed_package_is_absent(live_group: LiveGroup) -> None:
    live_group(rank=7, world_size=8, available=False)

    assert get_dist_info() == DistributedInfo()


def test_a_group_that_raises_on_rank_is_absent(
    monkeypatch: pytest.MonkeyPatch, live_group: LiveGroup
) -> None:
    set_environ(monkeypatch, hand_set_env(rank=1, world_size=2))
    fake = live_group(
        rank=7, world_size=8, error=RuntimeError("Default process group has been destroyed")
    )

    assert get_dist_info() == DistributedInfo(
        local_rank=1, rank=1, local_world_size=2, world_size=2
    )
    assert fake.calls == 1
    assert inspect_environment().process_group is False


def test_a_half_imported_distributed_module_is_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch.distributed is in sys.modules before its body has defined anything.
    monkeypatch.setitem(sys.modules, "torch.distributed", types.ModuleType("torch.distributed"))

    assert get_world_size() == 1


def test_malformed_variables_still_raise_with_a_live_group(
    monkeypatch: pytest.MonkeyPatch, live_group: LiveGroup
) -> None:
    monkeypatch.setenv("RANK", "abc")
    monkeypatch.setenv("WORLD_SIZE", "2")
    live_group(rank=0, world_size=2)

    with pytest.raises(ValueError, match="RANK='abc'"):
        get_dist_info()


def test_a_group_is_asked_its_rank_once_however_often_it_is_queried(
    live_group: LiveGroup,
) -> None:
    fake = live_group(rank=1, world_size=2)

    ranks = {get_global_rank() for _ in range(100)}

    assert (ranks, fake.calls) == ({1}, 1)


def test_a_group_that_replaces_the_last_one_is_seen_at_once(live_group: LiveGroup) -> None:
    first = live_group(rank=1, world_size=2)
    assert (get_global_rank(), get_world_size()) == (1, 2)

    live_group(rank=3, world_size=4)
    replaced = (get_global_rank(), get_world_size())
    live_group(initialized=False)
    destroyed = (get_global_rank(), get_world_size())

    assert (replaced, destroyed) == ((3, 4), (0, 1))
    assert first.calls == 1
