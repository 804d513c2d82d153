"""The launchers of clouds, Ray, Kubernetes and HPC sites beyond SLURM and plain MPI.

Their recorded environments (``recorded/documented``) are replayed value by value by
``test_recorded.py``; these tests pin what a recording cannot show: which launcher wins
where two set the same variables, the error for each malformed variable, what is not
known, and the meeting point read from a file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helios_env import Launcher, LauncherEnvError, detect_launcher, inspect_environment
from helios_env._report import main

DOCUMENTED = Path(__file__).parent / "recorded" / "documented"


def environ_of(name: str, index: int) -> dict[str, str]:
    data: dict[str, Any] = json.loads((DOCUMENTED / f"{name}.json").read_text())
    environ: dict[str, str] = data["ranks"][index]["environ"]
    return environ


PALS = environ_of("pals_polaris_mpiexec_N2x4", 5)
FLUX = environ_of("flux_run_N2x4", 5)
FLUX_PALS = environ_of("flux_run_cray_pals_N2x4", 5)
AZURE_MPI = environ_of("azureml_mpi_N2x4", 5)
SAGEMAKER = environ_of("sagemaker_python_2_hosts", 1)
SAGEMAKER_MPI = environ_of("sagemaker_mpi_N2x4", 5)


@pytest.mark.parametrize(
    ("environ", "winner", "general", "shared"),
    [
        (PALS, Launcher.PALS, Launcher.MPICH, "PMI_RANK and PMI_SIZE"),
        (FLUX, Launcher.FLUX, Launcher.MPICH, "PMI_RANK and PMI_SIZE"),
        (FLUX_PALS, Launcher.FLUX, Launcher.PALS, "PALS_RANKID"),
        (AZURE_MPI, Launcher.AZUREML_MPI, Launcher.OPEN_MPI, "OMPI_COMM_WORLD_RANK"),
        (SAGEMAKER_MPI, Launcher.SAGEMAKER_MPI, Launcher.OPEN_MPI, "OMPI_COMM_WORLD_RANK"),
    ],
)
def test_the_more_specific_launcher_wins_and_the_report_says_why(
    environ: dict[str, str], winner: Launcher, general: Launcher, shared: str
) -> None:
    report = inspect_environment(environ)

    assert report.launcher is winner
    why = report.sources["launcher"]
    assert f"{general}'s" in why
    assert shared in why
    assert "more specific" in why
    lines = report.format().splitlines()
    assert any(
        line.split()[:2] == ["launcher", str(winner)] and "more specific" in line for line in lines
    )


def test_without_its_own_variables_the_general_launcher_answers_with_no_reason() -> None:
    mpich = {name: value for name, value in PALS.items() if name.startswith("PMI_")}

    report = inspect_environment(mpich)

    assert report.launcher is Launcher.MPICH
    assert "launcher" not in report.sources


def test_hand_set_mpi_forces_the_specific_flavour_that_is_set() -> None:
    assert detect_launcher({**PALS, "HELIOS_LAUNCHER": "mpi"}) is Launcher.PALS


@pytest.mark.parametrize(
    ("environ", "variable", "value"),
    [
        ({**PALS, "PALS_NODEID": "abc"}, "PALS_NODEID", "abc"),
        ({**PALS, "PALS_RANKID": "-1"}, "PALS_RANKID", "-1"),
        ({**PALS, "PALS_RANKID": "8"}, "PALS_RANKID", "8"),
        ({**FLUX, "FLUX_JOB_NNODES": "0"}, "FLUX_JOB_NNODES", "0"),
        ({**FLUX_PALS, "PALS_NODEID": "2"}, "PALS_NODEID", "2"),
        ({**SAGEMAKER, "SM_HOSTS": "algo-1,algo-2"}, "SM_HOSTS", "algo-1,algo-2"),
        ({**SAGEMAKER, "SM_HOSTS": "[]"}, "SM_HOSTS", "[]"),
        ({**SAGEMAKER, "SM_CURRENT_HOST": "algo-3"}, "SM_CURRENT_HOST", "algo-3"),
        (
            {**AZURE_MPI, "AZ_BATCH_MASTER_NODE": "10.0.0.4:http"},
            "AZ_BATCH_MASTER_NODE",
            "10.0.0.4:http",
        ),
        ({**AZURE_MPI, "AZ_BATCH_MASTER_NODE": ":6105"}, "AZ_BATCH_MASTER_NODE", ":6105"),
        ({**AZURE_MPI, "AZUREML_NODE_COUNT": "two"}, "AZUREML_NODE_COUNT", "two"),
        (
            {**environ_of("kubeflow_trainer_v2_numnodes2_python", 1), "PET_MASTER_PORT": "70000"},
            "PET_MASTER_PORT",
            "70000",
        ),
        ({**environ_of("ray_train_torchtrainer_N2x4", 5), "NODE_RANK": "x"}, "NODE_RANK", "x"),
        ({**environ_of("azureml_pytorch_N2x4", 5), "NODE_RANK": "2"}, "NODE_RANK", "2"),
    ],
)
def test_a_malformed_variable_is_an_error_naming_it_and_its_value(
    environ: dict[str, str], variable: str, value: str
) -> None:
    with pytest.raises(LauncherEnvError) as caught:
        inspect_environment(environ)

    assert caught.value.variable == variable
    assert variable in str(caught.value)
    assert repr(value) in str(caught.value)


@pytest.mark.parametrize(
    ("environ", "field", "what"),
    [
        (FLUX, "node_rank", "flux does not say which node each rank runs on"),
        (PALS, "num_nodes", "pals does not say how many nodes there are"),
        (AZURE_MPI, "node_rank", "azureml-mpi does not say which node each rank runs on"),
        # Every rank has the master's SM_CURRENT_HOST: mpirun -x forwards it.
        (SAGEMAKER_MPI, "node_rank", "sagemaker-mpi does not say which node each rank runs on"),
        (
            environ_of("ray_train_torchtrainer_N2x4_without_node_rank", 5),
            "node_rank",
            "ray-train does not say which node each rank runs on",
        ),
        (
            environ_of("ray_train_torchtrainer_N2x4", 5),
            "num_nodes",
            "ray-train does not say how many nodes there are",
        ),
    ],
)
def test_what_no_variable_says_is_not_known_and_left_to_init(
    environ: dict[str, str], field: str, what: str
) -> None:
    report = inspect_environment(environ)

    assert getattr(report, field) is None
    assert report.sources[field] == f"not known: {what}; helios_pg.init() learns it"


def test_a_node_of_a_flux_job_is_never_assumed_to_be_the_only_one() -> None:
    report = inspect_environment(FLUX)

    assert (report.info.local_rank, report.info.local_world_size, report.num_nodes) == (1, 4, 2)
    assert report.sources["local_world_size"].startswith("assumed: the ranks spread evenly")


def test_pals_meets_at_the_first_host_of_the_pbs_node_file(tmp_path: Path) -> None:
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("x3006c0s13b0n0.hsn.cm.polaris.alcf.anl.gov\nx3006c0s13b1n0\n")

    report = inspect_environment({**PALS, "PBS_NODEFILE": str(nodefile)})

    assert report.master_addr == "x3006c0s13b0n0.hsn.cm.polaris.alcf.anl.gov"
    assert report.sources["master_addr"] == "derived: first host of PBS_NODEFILE"
    assert report.master_port is not None


def test_an_unreadable_pbs_node_file_names_itself_and_master_addr() -> None:
    report = inspect_environment(PALS)

    assert report.master_addr is None
    assert "PBS_NODEFILE" in report.sources["master_addr"]
    assert "MASTER_ADDR" in report.sources["master_addr"]


def test_variables_that_are_set_win_over_the_launchers_meeting_point() -> None:
    set_by_hand = {**AZURE_MPI, "MASTER_ADDR": "head", "MASTER_PORT": "29500"}

    report = inspect_environment(set_by_hand)

    assert (report.master_addr, report.master_port) == ("head", 29500)
    assert (report.sources["master_addr"], report.sources["master_port"]) == (
        "MASTER_ADDR",
        "MASTER_PORT",
    )


def test_one_pals_node_meets_on_loopback() -> None:
    one_node = {**PALS, "PALS_NODEID": "0", "PALS_LOCAL_RANKID": "5", "PMI_LOCAL_SIZE": "8"}

    report = inspect_environment(one_node)

    assert report.master_addr == "127.0.0.1"
    assert (report.node_rank, report.num_nodes) == (0, 1)


def test_the_report_command_names_the_launcher_and_exits_2_on_a_bad_host_list(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([], environ=SAGEMAKER) == 0
    assert "sagemaker" in capsys.readouterr().out

    assert main([], environ={**SAGEMAKER, "SM_CURRENT_HOST": "algo-9"}) == 2
    assert "SM_CURRENT_HOST='algo-9'" in capsys.readouterr().err
