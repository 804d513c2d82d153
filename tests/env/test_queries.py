"""The single-value rank queries agree with get_dist_info, with and without a live group.

Each query reads only the variables its own answer needs, yet gives the answer
``get_dist_info()`` gives wherever both answer, and raises on the same malformed
variable whenever its answer is read from it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from hypothesis import given, settings
from hypothesis import strategies as st

from helios_env import (
    LauncherEnvError,
    get_dist_info,
    get_global_rank,
    get_local_rank,
    get_local_world_size,
    get_world_size,
)
from tests.env.launchers import FakeDistributed

checked = settings(deadline=None, max_examples=80)

QUERIES: dict[str, Callable[[], int]] = {
    "rank": get_global_rank,
    "world_size": get_world_size,
    "local_rank": get_local_rank,
    "local_world_size": get_local_world_size,
}
# The variables each answer is read from, with torchrun's names.
READS = {
    "rank": {"RANK"},
    "world_size": {"WORLD_SIZE"},
    "local_rank": {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    "local_world_size": {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
}
NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


@contextmanager
def environment(values: Mapping[str, str], group: tuple[int, int] | None) -> Iterator[None]:
    """Set exactly these rank variables, and a live group of (rank, size) or none."""
    saved = {name: os.environ.get(name) for name in (*NAMES, "MASTER_PORT")}
    saved_module = sys.modules.get("torch.distributed")
    try:
        for name in saved:
            os.environ.pop(name, None)
        os.environ.update(values)
        sys.modules.pop("torch.distributed", None)
        if group is not None:
            sys.modules["torch.distributed"] = FakeDistributed(
                rank=group[0], world_size=group[1], available=True, initialized=True, error=None
            )
        yield
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value
        sys.modules.pop("torch.distributed", None)
        if saved_module is not None:
            sys.modules["torch.distributed"] = saved_module


@st.composite
def layouts(draw: st.DrawFn) -> dict[str, str]:
    """A consistent torchrun-style layout, with some local variables left out."""
    world_size = draw(st.integers(1, 64))
    local_world_size = draw(st.integers(1, world_size))
    values = {
        "RANK": str(draw(st.integers(0, world_size - 1))),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(draw(st.integers(0, local_world_size - 1))),
        "LOCAL_WORLD_SIZE": str(local_world_size),
    }
    for name in draw(st.sets(st.sampled_from(("LOCAL_RANK", "LOCAL_WORLD_SIZE")))):
        del values[name]
    return values


groups = st.none() | st.integers(1, 64).flatmap(
    lambda size: st.tuples(st.integers(0, size - 1), st.just(size))
)


def same_size_group(values: Mapping[str, str]) -> st.SearchStrategy[tuple[int, int]]:
    size = int(values["WORLD_SIZE"])
    return st.integers(0, size - 1).map(lambda rank: (rank, size))


@checked
@given(st.data(), layouts(), st.sampled_from(["none", "any", "same size"]))
def test_every_query_gives_get_dist_infos_answer(
    data: st.DataObject, values: dict[str, str], kind: str
) -> None:
    group = None
    if kind == "any":
        group = data.draw(groups)
    elif kind == "same size":
        group = data.draw(same_size_group(values))
    with environment(values, group):
        info = get_dist_info()
        answers = {field: query() for field, query in QUERIES.items()}
    assert answers == {field: getattr(info, field) for field in QUERIES}


@checked
@given(groups)
def test_without_launcher_variables_every_query_gives_the_group_or_the_defaults(
    group: tuple[int, int] | None,
) -> None:
    with environment({}, group):
        answers = {field: query() for field, query in QUERIES.items()}
    rank, size = group if group is not None else (0, 1)
    assert answers == {
        "rank": rank,
        "world_size": size,
        "local_rank": rank,
        "local_world_size": size,
    }


@checked
@given(
    layouts(),
    st.sampled_from(NAMES),
    st.sampled_from(["-1", "abc", "1.5", "", " ", "٣"]),
    groups,
)
def test_a_malformed_variable_gets_the_same_verdict_from_every_query_that_reads_it(
    values: dict[str, str], name: str, bad: str, group: tuple[int, int] | None
) -> None:
    values = {**values, name: bad}
    with environment(values, group):
        full: str | None = None
        try:
            get_dist_info()
        except LauncherEnvError as error:
            full = error.variable
        verdicts: dict[str, str | None] = {}
        for field, query in QUERIES.items():
            try:
                query()
            except LauncherEnvError as error:
                verdicts[field] = error.variable
            else:
                verdicts[field] = None
    assert full == name
    for field, variable in verdicts.items():
        if name in READS[field] and field in ("rank", "world_size"):
            assert variable == name, (field, verdicts)
        elif name in READS[field]:
            # The local answers read all four: the first malformed one is named.
            assert variable is not None, (field, verdicts)
        else:
            assert variable is None, (field, verdicts)
