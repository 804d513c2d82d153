"""Every rank of every recorded launcher environment, replayed and checked.

``tests/env/recorded/*.json`` were recorded from the real launchers on this project's
private SLURM cluster, Open MPI and MPICH (``python -m tests.launchers.record``);
``recorded/documented/*.json`` were written from the documentation or source of the
launchers that cannot run here (LSF, Kubeflow, MVAPICH2, Intel MPI, multi-node SLURM,
AzureML, Vertex AI, Ray Train, SageMaker, PALS, Flux), each citing it, and
``recorded/partial/*.json`` from the same documentation with only some of a launcher's
variables set, as wrappers and containers pass them on: what a variable states is
never overridden by an assumption. Each rank carries what helios must answer: the
launcher and values, the rendezvous address, where some values came from, or the
variables an error or a warning must name. One rank of each launcher also shows that
each rank query validates only the variables its answer reads.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helios_env import (
    LauncherEnvError,
    LauncherEnvWarning,
    get_dist_info,
    get_global_rank,
    get_local_rank,
    get_local_world_size,
    get_world_size,
    inspect_environment,
)
from tests.support.procs import is_launcher_variable

RECORDED = Path(__file__).parent / "recorded"
WRITTEN = ("documented", "partial")
FILES = sorted(
    [*RECORDED.glob("*.json"), *(p for w in WRITTEN for p in RECORDED.glob(f"{w}/*.json"))]
)
VALUES = ("rank", "world_size", "local_rank", "local_world_size", "node_rank", "num_nodes")


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def ranks() -> Iterator[Any]:
    for path in FILES:
        for index, rank in enumerate(load(path)["ranks"]):
            name = f"{path.relative_to(RECORDED).with_suffix('')}-{index}"
            yield pytest.param(rank["environ"], rank["expect"], id=name)


def test_at_least_forty_environments_from_real_launchers_and_documentation() -> None:
    documented = [path for path in FILES if path.parent.name == "documented"]
    partial = [path for path in FILES if path.parent.name == "partial"]

    assert len(FILES) - len(partial) >= 40
    assert len(documented) >= 20
    assert len(FILES) - len(documented) - len(partial) >= 15
    assert len(partial) >= 7


@pytest.mark.parametrize(("environ", "expect"), list(ranks()))
def test_every_recorded_rank_gets_its_answer(
    environ: dict[str, str], expect: dict[str, Any]
) -> None:
    if "error" in expect:
        with pytest.raises(LauncherEnvError) as caught:
            inspect_environment(environ)
        for name in expect["error"]:
            assert name in str(caught.value)
        return
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        report = inspect_environment(environ)
    named = [str(item.message) for item in seen if issubclass(item.category, LauncherEnvWarning)]
    if "warning" in expect:
        assert len(named) == 1
        for name in expect["warning"]:
            assert name in named[0]
    else:
        assert named == []
    got = {
        "launcher": str(report.launcher),
        "rank": report.info.rank,
        "world_size": report.info.world_size,
        "local_rank": report.info.local_rank,
        "local_world_size": report.info.local_world_size,
        "node_rank": report.node_rank,
        "num_nodes": report.num_nodes,
        "master_addr": report.master_addr,
    }
    assert got == {key: expect[key] for key in got}
    for field, source in expect.get("sources", {}).items():
        assert report.sources[field] == source, field


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.stem)
def test_the_ranks_of_one_job_derive_one_rendezvous(path: Path) -> None:
    reports = []
    for rank in load(path)["ranks"]:
        if "error" in rank["expect"]:
            pytest.skip("a misconfiguration: these ranks never meet")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LauncherEnvWarning)
            reports.append(inspect_environment(rank["environ"]))
    meeting = {(report.master_addr, report.master_port, report.job) for report in reports}
    worlds = {report.info.world_size for report in reports}

    if worlds != {len(reports)} or reports[0].launcher.value == "none":
        pytest.skip("the recording does not hold every rank of one job")
    assert sorted(report.info.rank for report in reports) == list(range(len(reports)))
    assert len(meeting) == 1, meeting


@pytest.fixture
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    import os

    for name in [name for name in os.environ if is_launcher_variable(name)]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("HELIOS_LAUNCHER", raising=False)
    return monkeypatch


@pytest.mark.parametrize(("environ", "expect"), list(ranks()))
def test_the_narrow_queries_agree_on_every_recorded_rank(
    clean_environ: pytest.MonkeyPatch, environ: dict[str, str], expect: dict[str, Any]
) -> None:
    for name, value in environ.items():
        clean_environ.setenv(name, value)
    if "error" in expect:
        # The narrow queries read only what their answer needs: a contradiction between
        # two launchers is for get_dist_info, which reads os.environ as init does.
        with pytest.raises(LauncherEnvError) as caught:
            get_dist_info()
        assert all(name in str(caught.value) for name in expect["error"])
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LauncherEnvWarning)
        info = get_dist_info()
    got = (get_global_rank(), get_world_size(), get_local_rank(), get_local_world_size())
    full = (info.rank, info.world_size, info.local_rank, info.local_world_size)

    assert got == full == tuple(expect[key] for key in VALUES[:4])


# Which answers read which of a launcher's four variables (its names for RANK,
# WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE).
QUERIES = {
    "rank": get_global_rank,
    "world_size": get_world_size,
    "local_rank": get_local_rank,
    "local_world_size": get_local_world_size,
}
READS = {
    "rank": {"rank"},
    "world_size": {"world_size"},
    "local_rank": {"rank", "world_size", "local_rank", "local_world_size"},
    "local_world_size": {"rank", "world_size", "local_rank", "local_world_size"},
}
# One process per listed host (SageMaker): the rank is this host's place in the list.
READS_LISTED = {**READS, "rank": {"rank", "world_size"}}


def one_rank_per_launcher() -> Iterator[Any]:
    """The first rank of the first plain (error-free, unforced) recording of each launcher."""
    seen = set()
    for path in FILES:
        rank = load(path)["ranks"][0]
        launcher = rank["expect"].get("launcher")
        plain = "error" not in rank["expect"] and "HELIOS_LAUNCHER" not in rank["environ"]
        if plain and launcher not in (None, "none") and launcher not in seen:
            seen.add(launcher)
            yield pytest.param(rank["environ"], id=launcher)


@pytest.mark.parametrize("environ", list(one_rank_per_launcher()))
def test_each_query_validates_only_the_variables_its_answer_reads(
    clean_environ: pytest.MonkeyPatch, environ: dict[str, str]
) -> None:
    from helios_env._detect import detect_launcher
    from helios_env._launcher import SPECS, names_for

    launcher = detect_launcher(environ)
    names = names_for(launcher)
    assert names is not None
    reads = READS_LISTED if SPECS[launcher].one_per_listed_host else READS
    for name, value in environ.items():
        clean_environ.setenv(name, value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LauncherEnvWarning)
        good = {field: query() for field, query in QUERIES.items()}
    for part, variable in names._asdict().items():
        if variable is None or variable not in environ:
            continue  # derived from other variables, or not set by this launcher
        clean_environ.setenv(variable, "abc")
        for field, query in QUERIES.items():
            if part in reads[field]:
                with pytest.raises(LauncherEnvError, match=variable):
                    query()
            else:
                assert query() == good[field], (variable, field)
        clean_environ.setenv(variable, environ[variable])
