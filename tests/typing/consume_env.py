"""A downstream module that uses every public name of helios_env; read by mypy only.

Nothing here runs: pytest does not collect this file (its name does not start with
``test_``) and ``consume`` is never called. mypy --strict checks that the public API
has the exact types downstream code relies on, from the installed package's
``py.typed`` inline annotations.
"""

from __future__ import annotations

from collections.abc import Mapping

from typing_extensions import assert_type  # typing's from Python 3.11 on

import helios_env
from helios_env import (
    DistributedInfo,
    EnvironmentReport,
    Launcher,
    LauncherEnvError,
    detect_launcher,
    get_dist_info,
    get_global_rank,
    get_local_rank,
    get_local_world_size,
    get_world_size,
    inspect_environment,
    is_using_torchrun,
)


def consume(environ: Mapping[str, str]) -> None:
    """Call every public function the way a user's program would."""
    assert_type(is_using_torchrun(), bool)
    assert_type(is_using_torchrun(environ), bool)
    assert_type(is_using_torchrun(environ=environ), bool)
    assert_type(is_using_torchrun({"RANK": "0"}), bool)

    launcher = detect_launcher()
    assert_type(launcher, Launcher)
    assert_type(detect_launcher(environ=environ), Launcher)
    assert_type(launcher.value, str)
    assert_type(str(launcher), str)
    assert_type(launcher is Launcher.TORCHRUN, bool)

    info = get_dist_info()
    assert_type(info, DistributedInfo)
    assert_type(info.local_rank, int)
    assert_type(info.rank, int)
    assert_type(info.local_world_size, int)
    assert_type(info.world_size, int)
    assert_type(info.is_main_process, bool)
    assert_type(info.is_local_main_process, bool)
    assert_type(info.is_distributed, bool)
    assert_type(info.node_rank, int | None)
    assert_type(info.num_nodes, int | None)
    assert_type(DistributedInfo(), DistributedInfo)
    assert_type(DistributedInfo(0, 1, 2, 4), DistributedInfo)
    assert_type(
        DistributedInfo(local_rank=0, rank=1, local_world_size=2, world_size=4), DistributedInfo
    )

    assert_type(get_local_rank(), int)
    assert_type(get_global_rank(), int)
    assert_type(get_local_world_size(), int)
    assert_type(get_world_size(), int)

    report = inspect_environment()
    assert_type(report, EnvironmentReport)
    assert_type(inspect_environment(environ), EnvironmentReport)
    assert_type(report.info, DistributedInfo)
    assert_type(report.launcher, Launcher)
    assert_type(report.sources, Mapping[str, str])
    assert_type(report.process_group, bool)
    assert_type(report.node_rank, int | None)
    assert_type(report.num_nodes, int | None)
    assert_type(report.master_addr, str | None)
    assert_type(report.master_port, int | None)
    assert_type(report.rendezvous, str | None)
    assert_type(report.as_dict(), dict[str, object])
    assert_type(report.format(), str)

    try:
        get_world_size()
    except LauncherEnvError as error:
        assert_type(error, LauncherEnvError)
        assert_type(error.variable, str)
        assert_type(error.value, str | None)
        value_error: ValueError = error
        print(value_error)

    assert_type(helios_env.__all__, list[str])
    assert_type(helios_env.__version__, str)


def misuse(info: DistributedInfo) -> None:
    """Mistakes the types must reject; strict mode fails if an ignore goes unused."""
    info.rank = 1  # type: ignore[misc]
    is_using_torchrun({"RANK": 0})  # type: ignore[dict-item]
    get_world_size(1)  # type: ignore[call-arg]
    inspect_environment(environ=["RANK=0"])  # type: ignore[arg-type]
    DistributedInfo(rank="0")  # type: ignore[arg-type]
