"""is_using_torchrun and detect_launcher: which launcher started this process."""

from __future__ import annotations

import pytest

from helios_env import (
    Launcher,
    LauncherEnvError,
    LauncherEnvWarning,
    detect_launcher,
    get_dist_info,
    inspect_environment,
    is_using_torchrun,
)
from tests.env.launchers import hand_set_env, open_mpi_env, slurm_env, torchrun_env

OPEN_MPI = open_mpi_env(rank=1, world_size=4, local_rank=1, local_world_size=2)
SLURM = slurm_env(rank=1, world_size=4, local_rank=1, node=0, tasks_per_node="2(x2)", num_nodes=2)


@pytest.mark.parametrize(
    "environ",
    [
        pytest.param(torchrun_env(rank=1, world_size=2, run_id="5c0ffee"), id="standalone"),
        pytest.param(
            torchrun_env(rank=3, world_size=4, node_rank=1, num_nodes=2, run_id="none"),
            id="static-multi-node",
        ),
        pytest.param(
            torchrun_env(rank=2, world_size=4, node_rank=1, num_nodes=2, run_id="job-7"),
            id="c10d",
        ),
        pytest.param(
            torchrun_env(rank=3, world_size=4, local_rank=0, local_world_size=2),
            id="virtual-local-rank",
        ),
    ],
)
def test_is_using_torchrun_is_true_for_torch_elastic_workers(environ: dict[str, str]) -> None:
    assert is_using_torchrun(environ) is True


def test_is_using_torchrun_is_false_in_a_plain_process() -> None:
    assert is_using_torchrun({}) is False


def test_is_using_torchrun_is_false_with_hand_set_rank_variables() -> None:
    environ = hand_set_env(rank=1, world_size=2) | {"LOCAL_RANK": "1"}

    assert is_using_torchrun(environ) is False


def test_is_using_torchrun_is_false_when_only_elastic_bookkeeping_is_left() -> None:
    # A program may export TORCHELASTIC_RUN_ID for its own use; without the worker's
    # rank variables no torch elastic agent started this process.
    environ = {"TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0"}

    assert is_using_torchrun(environ) is False


def test_is_using_torchrun_reads_the_process_environment_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert is_using_torchrun() is False
    for name, value in torchrun_env(rank=0, world_size=2).items():
        monkeypatch.setenv(name, value)

    assert is_using_torchrun() is True


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param({}, Launcher.NONE, id="none"),
        pytest.param(torchrun_env(rank=0, world_size=2), Launcher.TORCHRUN, id="torchrun"),
        pytest.param(hand_set_env(rank=0, world_size=2), Launcher.ENVIRONMENT, id="environment"),
        pytest.param(OPEN_MPI, Launcher.OPEN_MPI, id="open-mpi"),
        pytest.param(SLURM, Launcher.SLURM, id="slurm"),
    ],
)
def test_detect_launcher_names_each_launcher(environ: dict[str, str], expected: Launcher) -> None:
    assert detect_launcher(environ) is expected


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param(
            torchrun_env(rank=0, world_size=2) | OPEN_MPI | SLURM,
            Launcher.TORCHRUN,
            id="torchrun-over-mpi-and-slurm",
        ),
        pytest.param(
            hand_set_env(rank=0, world_size=2) | OPEN_MPI | SLURM,
            Launcher.ENVIRONMENT,
            id="environment-over-mpi-and-slurm",
        ),
        pytest.param(OPEN_MPI | SLURM, Launcher.OPEN_MPI, id="open-mpi-over-slurm"),
    ],
)
def test_detect_launcher_prefers_rank_variables_then_open_mpi_then_slurm(
    environ: dict[str, str], expected: Launcher
) -> None:
    assert detect_launcher(environ) is expected


def test_detect_launcher_ignores_a_slurm_batch_script_outside_srun() -> None:
    # sbatch sets SLURM_PROCID=0 for the script itself, but no step is running.
    environ = {"SLURM_JOB_ID": "4242", "SLURM_PROCID": "0", "SLURM_NNODES": "2"}

    assert detect_launcher(environ) is Launcher.NONE


def test_detect_launcher_sees_a_lone_local_rank_as_hand_set() -> None:
    assert detect_launcher({"LOCAL_RANK": "0"}) is Launcher.ENVIRONMENT


def test_detect_launcher_reads_the_process_environment_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "1")

    assert detect_launcher() is Launcher.OPEN_MPI


def test_launcher_values_are_stable_strings() -> None:
    assert [str(launcher) for launcher in Launcher] == [
        "none",
        "torchrun",
        "environment",
        "kubeflow",
        "open-mpi",
        "mvapich2",
        "lsf",
        "mpich",
        "slurm",
        "azureml",
        "azureml-mpi",
        "vertex-ai",
        "ray-train",
        "kubeflow-trainer",
        "sagemaker",
        "sagemaker-mpi",
        "pals",
        "flux",
    ]
    assert Launcher("open-mpi") is Launcher.OPEN_MPI


BOTH = hand_set_env(rank=5, world_size=8) | SLURM | OPEN_MPI


@pytest.mark.parametrize(
    ("forced", "expected"),
    [
        ("env", Launcher.ENVIRONMENT),
        ("slurm", Launcher.SLURM),
        ("mpi", Launcher.OPEN_MPI),
        ("none", Launcher.NONE),
        (" SLURM ", Launcher.SLURM),
    ],
)
def test_helios_launcher_forces_one_source(forced: str, expected: Launcher) -> None:
    assert detect_launcher(BOTH | {"HELIOS_LAUNCHER": forced}) is expected


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        pytest.param({"HELIOS_LAUNCHER": "srun"}, "torchrun|slurm|mpi|env|none", id="unknown"),
        pytest.param({"HELIOS_LAUNCHER": "torchrun"}, "TORCHELASTIC_RUN_ID", id="no-torchrun"),
        pytest.param({"HELIOS_LAUNCHER": "slurm"}, "SLURM_PROCID", id="no-step"),
        pytest.param({"HELIOS_LAUNCHER": "mpi"}, "OMPI_COMM_WORLD_RANK", id="no-mpi"),
        pytest.param({"HELIOS_LAUNCHER": "env"}, "RANK and WORLD_SIZE are not", id="no-rank"),
        pytest.param(
            {"HELIOS_LAUNCHER": "env", "RANK": "0"}, "but WORLD_SIZE is not set;", id="no-size"
        ),
    ],
)
def test_helios_launcher_without_its_variables_is_an_error(
    environ: dict[str, str], named: str
) -> None:
    with pytest.raises(LauncherEnvError) as caught:
        detect_launcher(environ)

    assert caught.value.variable == "HELIOS_LAUNCHER"
    assert named in str(caught.value)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param({"PMI_RANK": "1", "PMI_SIZE": "2"}, Launcher.MPICH, id="mpich"),
        pytest.param(
            {"MV2_COMM_WORLD_RANK": "1", "MV2_COMM_WORLD_SIZE": "2", "PMI_RANK": "1"},
            Launcher.MVAPICH2,
            id="mvapich2-over-its-hydra",
        ),
        pytest.param(
            {"JSM_NAMESPACE_RANK": "0", "JSM_NAMESPACE_SIZE": "4"}, Launcher.LSF, id="lsf"
        ),
        pytest.param(
            {"RANK": "1", "WORLD_SIZE": "2", "PET_NNODES": "2"}, Launcher.KUBEFLOW, id="kubeflow"
        ),
        pytest.param(
            {"PMI_RANK": "1", "PMI_SIZE": "2", "SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2"},
            Launcher.SLURM,
            id="srun-pmi2-is-slurm",
        ),
        pytest.param(
            {"PMI_RANK": "1", "PMI_SIZE": "2", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1"},
            Launcher.MPICH,
            id="hydra-proxy-in-an-srun-step-is-mpich",
        ),
    ],
)
def test_each_launcher_is_named(environ: dict[str, str], expected: Launcher) -> None:
    assert detect_launcher(environ) is expected


def test_helios_launcher_none_reads_no_rank_variable() -> None:
    environ = hand_set_env(rank=3, world_size=4) | {"HELIOS_LAUNCHER": "none"}

    report = inspect_environment(environ)

    assert (str(report.launcher), report.info.rank, report.info.world_size) == ("none", 0, 1)


def test_local_rank_exported_in_an_srun_step_leaves_the_step_in_charge() -> None:
    environ = SLURM | {"LOCAL_RANK": "1"}

    assert detect_launcher(environ) is Launcher.SLURM
    assert inspect_environment(environ).info.rank == 1


def test_an_elastic_torchrun_round_smaller_than_the_step_warns() -> None:
    # srun -N 4 torchrun --nnodes 2:4 ...: this round closed with 3 agents of 4 tasks.
    environ = slurm_env(
        rank=2, world_size=4, local_rank=0, node=2, tasks_per_node="1(x4)", num_nodes=4
    ) | torchrun_env(rank=5, world_size=6, node_rank=2, num_nodes=3)

    with pytest.warns(
        LauncherEnvWarning, match="GROUP_WORLD_SIZE='3', SLURM_STEP_NUM_TASKS='4'"
    ) as seen:
        info = inspect_environment(environ).info

    assert (info.rank, info.world_size) == (5, 6)
    assert seen[0].filename == __file__  # the warning points at the caller


def test_a_hand_set_world_below_the_step_warns_at_the_callers_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A program started by srun -n 2 that starts 4 processes of its own.
    environ = slurm_env(
        rank=1, world_size=2, local_rank=1, node=0, tasks_per_node="2", num_nodes=1
    ) | {
        "RANK": "3",
        "WORLD_SIZE": "4",
    }

    for name, value in environ.items():
        monkeypatch.setenv(name, value)

    with pytest.warns(LauncherEnvWarning) as seen:
        info = get_dist_info()

    assert (info.rank, info.world_size) == (3, 4)
    assert seen[0].filename == __file__


def test_a_query_that_warned_warns_again_and_a_changed_variable_is_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # get_dist_info remembers its last answer while the variables it read hold: never
    # a warning's, and never past a change.
    environ = slurm_env(
        rank=1, world_size=2, local_rank=1, node=0, tasks_per_node="2", num_nodes=1
    ) | {"RANK": "3", "WORLD_SIZE": "4"}
    for name, value in environ.items():
        monkeypatch.setenv(name, value)

    for _ in range(2):
        with pytest.warns(LauncherEnvWarning):
            get_dist_info()

    for name in environ:
        monkeypatch.delenv(name)
    for name, value in torchrun_env(rank=1, world_size=2).items():
        monkeypatch.setenv(name, value)
    assert (get_dist_info().rank, get_dist_info().world_size) == (1, 2)
    monkeypatch.setenv("RANK", "0")
    assert get_dist_info().rank == 0
    monkeypatch.setenv("RANK", "5")
    with pytest.raises(LauncherEnvError, match="RANK"):
        get_dist_info()
    with pytest.raises(LauncherEnvError, match="RANK"):
        get_dist_info()  # an error is never remembered
