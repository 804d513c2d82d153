"""Every rank of every recorded launcher environment, replayed and checked.

``tests/env/recorded/*.json`` were recorded from the real launchers on this project's
private SLURM cluster, Open MPI and MPICH (``python -m tests.launchers.record``);
``recorded/documented/*.json`` were written from the documentation of the launchers
that cannot run here (LSF, Kubeflow, MVAPICH2, Intel MPI, multi-node SLURM). Each
rank carries what helios must answer: the launcher and values, the rendezvous
address, or the variables an error or a warning must name.
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
FILES = sorted([*RECORDED.glob("*.json"), *RECORDED.glob("documented/*.json")])
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

    assert len(FILES) >= 40
    assert len(documented) >= 20
    assert len(FILES) - len(documented) >= 15


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


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.stem)
def test_the_ranks_of_one_job_derive_one_rendezvous(path: Path) -> None:
    reports = []
    for rank in load(path)["ranks"]:
        if "error" in rank["expect"]:
            return  # a misconfiguration: these ranks never meet
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LauncherEnvWarning)
            reports.append(inspect_environment(rank["environ"]))
    meeting = {(report.master_addr, report.master_port, report.job) for report in reports}
    worlds = {report.info.world_size for report in reports}

    if worlds == {len(reports)} and reports[0].launcher.value != "none":
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
