"""Properties over many environments: valid ones resolve consistently, bad ones raise."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helios_env import DistributedInfo, LauncherEnvError, inspect_environment

RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
# No per-example deadline: a loaded CI machine must not turn slowness into failures.
checked = settings(deadline=None, max_examples=60)


@st.composite
def layouts(draw: st.DrawFn) -> DistributedInfo:
    """Any consistent set of ranks and sizes."""
    world_size = draw(st.integers(1, 4096))
    local_world_size = draw(st.integers(1, world_size))
    return DistributedInfo(
        local_rank=draw(st.integers(0, local_world_size - 1)),
        rank=draw(st.integers(0, world_size - 1)),
        local_world_size=local_world_size,
        world_size=world_size,
    )


def as_environ(info: DistributedInfo) -> dict[str, str]:
    return {
        "RANK": str(info.rank),
        "WORLD_SIZE": str(info.world_size),
        "LOCAL_RANK": str(info.local_rank),
        "LOCAL_WORLD_SIZE": str(info.local_world_size),
    }


def not_an_integer(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return True
    return False


def is_consistent(info: DistributedInfo) -> bool:
    return (
        0 <= info.rank < info.world_size
        and 0 <= info.local_rank < info.local_world_size <= info.world_size
    )


@checked
@given(layouts())
def test_any_valid_environment_resolves_to_its_values(info: DistributedInfo) -> None:
    report = inspect_environment(as_environ(info))

    assert report.info == info
    assert {report.sources[key] for key in ("rank", "world_size")} == {"RANK", "WORLD_SIZE"}


@checked
@given(layouts(), st.sets(st.sampled_from(("LOCAL_RANK", "LOCAL_WORLD_SIZE"))))
def test_missing_local_variables_still_give_a_consistent_layout(
    info: DistributedInfo, dropped: set[str]
) -> None:
    environ = as_environ(info)
    for name in dropped:
        del environ[name]

    resolved = inspect_environment(environ).info

    assert is_consistent(resolved)
    assert (resolved.rank, resolved.world_size) == (info.rank, info.world_size)


@checked
@given(st.integers(1, 16), st.integers(1, 8))
def test_every_rank_agrees_on_the_layout_without_local_rank(num_nodes: int, per_node: int) -> None:
    world_size = num_nodes * per_node
    seen = set()
    for rank in range(world_size):
        environ = {
            "RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(per_node),
        }
        report = inspect_environment(environ)
        assert (report.info.local_world_size, report.num_nodes) == (per_node, num_nodes)
        seen.add((report.node_rank, report.info.local_rank))

    assert len(seen) == world_size


@checked
@given(st.integers(1, 4096), st.integers(0, 4096))
def test_any_rank_at_or_above_world_size_raises(world_size: int, excess: int) -> None:
    rank = world_size + excess

    with pytest.raises(LauncherEnvError) as caught:
        inspect_environment({"RANK": str(rank), "WORLD_SIZE": str(world_size)})

    assert caught.value.variable == "RANK"
    assert f"RANK='{rank}'" in str(caught.value)


@checked
@given(layouts(), st.sampled_from(RANK_VARIABLES), st.integers(max_value=-1))
def test_any_negative_value_raises_naming_the_variable(
    info: DistributedInfo, name: str, value: int
) -> None:
    with pytest.raises(LauncherEnvError) as caught:
        inspect_environment(as_environ(info) | {name: str(value)})

    assert (caught.value.variable, caught.value.value) == (name, str(value))
    assert f"{name}='{value}'" in str(caught.value)


@checked
@given(layouts(), st.sampled_from(RANK_VARIABLES), st.text().filter(not_an_integer))
def test_any_non_integer_raises_naming_the_variable(
    info: DistributedInfo, name: str, value: str
) -> None:
    with pytest.raises(LauncherEnvError) as caught:
        inspect_environment(as_environ(info) | {name: value})

    assert (caught.value.variable, caught.value.value) == (name, value)
    assert f"{name}={value!r}" in str(caught.value)


@checked
@given(st.integers(1, 65535))
def test_any_master_port_in_1_to_65535_is_accepted(port: int) -> None:
    report = inspect_environment({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})

    assert report.master_port == port


@checked
@given(st.integers(max_value=0) | st.integers(min_value=65536))
def test_any_master_port_outside_1_to_65535_raises(port: int) -> None:
    with pytest.raises(LauncherEnvError) as caught:
        inspect_environment({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})

    assert (caught.value.variable, caught.value.value) == ("MASTER_PORT", str(port))


@st.composite
def slurm_task_counts(draw: st.DrawFn) -> list[tuple[int, int]]:
    """SLURM's run-length list of tasks per node: (tasks, repeated on this many nodes)."""
    return draw(st.lists(st.tuples(st.integers(1, 8), st.integers(1, 4)), min_size=1, max_size=5))


@checked
@given(slurm_task_counts(), st.data())
def test_slurm_tasks_per_node_gives_each_node_its_count(
    runs: list[tuple[int, int]], data: st.DataObject
) -> None:
    text = ",".join(f"{tasks}(x{times})" if times > 1 else str(tasks) for tasks, times in runs)
    per_node = [tasks for tasks, times in runs for _ in range(times)]
    node = data.draw(st.integers(0, len(per_node) - 1), label="node")
    local_rank = data.draw(st.integers(0, per_node[node] - 1), label="local_rank")
    rank = sum(per_node[:node]) + local_rank
    environ = {
        "SLURM_PROCID": str(rank),
        "SLURM_STEP_NUM_TASKS": str(sum(per_node)),
        "SLURM_LOCALID": str(local_rank),
        "SLURM_NODEID": str(node),
        "SLURM_STEP_TASKS_PER_NODE": text,
    }

    info = inspect_environment(environ).info

    assert info == DistributedInfo(
        local_rank, rank, per_node[node], sum(per_node), node, len(per_node)
    )
