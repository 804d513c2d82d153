"""is_using_torchrun and detect_launcher: which launcher started this process."""

from __future__ import annotations

import pytest

from helios_env import Launcher, detect_launcher, is_using_torchrun
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
    ]
    assert Launcher("open-mpi") is Launcher.OPEN_MPI
