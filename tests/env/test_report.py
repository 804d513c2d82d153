"""``python -m helios_env`` and the ``helios-env`` script: the report of what was detected."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from helios_env._report import main
from tests.env.launchers import torchrun_env

LIMIT = 30.0
TWO_NODES = torchrun_env(
    rank=3, world_size=4, node_rank=1, num_nodes=2, master_addr="10.1.2.3", master_port=29411
)
INVALID = {"RANK": "0", "WORLD_SIZE": "0"}
KEYS = {
    "valid",
    "launcher",
    "process_group",
    "local_rank",
    "rank",
    "local_world_size",
    "world_size",
    "node_rank",
    "num_nodes",
    "attempt",
    "host",
    "pid",
    "master_addr",
    "master_port",
    "job",
    "gloo_interface",
    "sources",
    "fingerprint",
}


def run_main(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(argv), environ=environ, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def run_command(
    command: Sequence[str], environ: Mapping[str, str]
) -> subprocess.CompletedProcess[str]:
    # os.environ holds no launcher variable here (see conftest.py).
    return subprocess.run(
        list(command),
        env={**os.environ, **environ},
        capture_output=True,
        text=True,
        timeout=LIMIT,
        check=False,
    )


def test_report_shows_launcher_ranks_sizes_node_and_rendezvous() -> None:
    status, out, err = run_main([], TWO_NODES)

    assert (status, err) == (0, "")
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "torchrun" in lines["launcher"]
    assert "3 of 4" in lines["rank"]
    assert "[RANK, WORLD_SIZE]" in lines["rank"]
    assert "1 of 2  [LOCAL_RANK, LOCAL_WORLD_SIZE]" in lines["local"]
    assert "1 of 2  [GROUP_RANK, GROUP_WORLD_SIZE]" in lines["node"]
    assert "10.1.2.3:29411" in lines["rendezvous"]


def test_report_of_a_plain_process_shows_defaults_and_no_rendezvous() -> None:
    status, out, _ = run_main([], {})

    assert status == 0
    assert "0 of 1  [default, default]" in out
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    # A world of one needs no rendezvous (helios_pg.init runs it on a local store), and
    # no launcher means no job, said without a double negative.
    assert lines["rendezvous"].split(None, 1)[1] == (
        "not needed  [one process: helios_pg.init uses a local store]"
    )
    assert lines["job"].split(None, 1)[1] == "none  [no launcher, so no job]"


def test_report_asks_for_the_rendezvous_only_where_several_processes_meet() -> None:
    _, out, _ = run_main([], {"RANK": "0", "WORLD_SIZE": "2"})

    assert "unknown (set MASTER_ADDR and MASTER_PORT)" in out


def test_report_says_when_a_single_node_is_assumed() -> None:
    _, out, _ = run_main([], {"RANK": "1", "WORLD_SIZE": "2"})

    assert "1 of 2  [assumed: one node, assumed: one node]" in out


def test_report_never_assumes_against_slurm_s_node_and_tasks_per_node() -> None:
    # No node list and no node count: SLURM_NODEID and SLURM_NTASKS_PER_NODE still say it.
    environ = {
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
        "SLURM_NTASKS": "4",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_STEP_NUM_TASKS": "4",
    }

    _, out, _ = run_main([], environ)

    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "1 of 2  [SLURM_LOCALID, SLURM_NTASKS_PER_NODE]" in lines["local"]
    assert lines["node"].split(None, 1)[1] == (
        "1 of 2  [SLURM_NODEID, derived: SLURM_STEP_NUM_TASKS / SLURM_NTASKS_PER_NODE]"
    )


def test_report_shows_the_node_that_group_rank_states_without_a_node_count() -> None:
    environ = {**TWO_NODES}
    del environ["GROUP_WORLD_SIZE"]

    _, out, _ = run_main([], environ)

    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert (
        lines["node"]
        .split(None, 1)[1]
        .startswith(
            "1 of unknown  [GROUP_RANK, not known: torchrun does not say how many nodes there are"
        )
    )


def test_json_report_holds_every_value_and_its_source() -> None:
    status, out, _ = run_main(["--json"], TWO_NODES)

    data = json.loads(out)
    assert status == 0
    assert set(data) == KEYS
    assert data["valid"] is True
    assert data["launcher"] == "torchrun"
    assert (data["rank"], data["world_size"]) == (3, 4)
    assert (data["local_rank"], data["local_world_size"]) == (1, 2)
    assert (data["node_rank"], data["num_nodes"]) == (1, 2)
    assert (data["master_addr"], data["master_port"]) == ("10.1.2.3", 29411)
    assert data["process_group"] is False
    assert data["sources"]["rank"] == "RANK"
    assert data["sources"]["node_rank"] == "GROUP_RANK"


def test_invalid_environment_exits_2_and_names_the_variable() -> None:
    status, out, err = run_main([], INVALID)

    assert status == 2
    assert out == ""
    assert "WORLD_SIZE='0'" in err


def test_invalid_environment_as_json_says_valid_false() -> None:
    status, out, err = run_main(["--json"], INVALID)

    data = json.loads(out)
    assert status == 2
    assert data["valid"] is False
    assert (data["variable"], data["value"]) == ("WORLD_SIZE", "0")
    assert "WORLD_SIZE='0'" in data["error"]
    assert "WORLD_SIZE='0'" in err


def test_python_m_helios_env_prints_the_report() -> None:
    done = run_command([sys.executable, "-m", "helios_env"], TWO_NODES)

    assert done.returncode == 0, done.stderr
    for expected in (
        "launcher",
        "torchrun",
        "3 of 4  [RANK, WORLD_SIZE]",
        "1 of 2  [LOCAL_RANK, LOCAL_WORLD_SIZE]",
        "1 of 2  [GROUP_RANK, GROUP_WORLD_SIZE]",
        "rendezvous",
        "10.1.2.3:29411",
    ):
        assert expected in done.stdout


def test_python_m_helios_env_json_parses() -> None:
    done = run_command([sys.executable, "-m", "helios_env", "--json"], TWO_NODES)

    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert set(data) == KEYS
    assert data["pid"] != os.getpid()


def test_python_m_helios_env_exits_2_on_an_invalid_environment() -> None:
    done = run_command([sys.executable, "-m", "helios_env"], {"RANK": "abc", "WORLD_SIZE": "2"})

    assert done.returncode == 2
    assert "RANK='abc'" in done.stderr


def test_python_m_helios_env_json_reports_an_invalid_environment() -> None:
    done = run_command([sys.executable, "-m", "helios_env", "--json"], {"MASTER_PORT": "70000"})

    assert done.returncode == 2
    assert json.loads(done.stdout)["variable"] == "MASTER_PORT"


SCRIPT = Path(sys.executable).with_name("helios-env")
needs_script = pytest.mark.skipif(
    not SCRIPT.exists(), reason=f"no helios-env console script next to {sys.executable}"
)


@needs_script
def test_console_script_prints_the_json_report() -> None:
    done = run_command([str(SCRIPT), "--json"], TWO_NODES)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rank"] == 3


@needs_script
def test_console_script_exits_2_on_an_invalid_environment() -> None:
    done = run_command([str(SCRIPT)], {"LOCAL_RANK": "0"})

    assert done.returncode == 2
    assert "LOCAL_RANK='0'" in done.stderr


def test_a_report_built_without_a_node_claims_what_its_info_says() -> None:
    from helios_env import DistributedInfo, EnvironmentReport, Launcher

    several = EnvironmentReport(DistributedInfo(1, 3, 2, 4), Launcher.OPEN_MPI)
    one = EnvironmentReport(DistributedInfo(1, 1, 2, 2), Launcher.OPEN_MPI)

    assert (several.node_rank, several.num_nodes) == (None, None)  # two of four ranks here
    assert (one.node_rank, one.num_nodes) == (0, 1)
