"""A group another framework made, adopted in real torchrun jobs of three ranks.

Each case of ``workers/adopted.py`` is one job, all run at once: plain torch makes the
group in a training thread that catches what it raises (as Ray Train does), and
helios's ``process_group()`` adopts it. The failure report, the hang roll call, the
timeout and the agreement check then work as on a group helios made.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch.distributed as dist

from tests.pg.torchrun_jobs import run_jobs
from tests.support.procs import Finished

WORKER = Path(__file__).parent / "workers" / "adopted.py"
CASES = ("raise", "hang", "timeout", "settings")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Finished, Path]]:
    def env_for(case: str, logs: Path) -> dict[str, str]:
        marks = logs / "marks"
        marks.mkdir()
        return {
            "HELIOS_TEST_ADOPTED": case,
            "HELIOS_TEST_MARKS": str(marks),
            "HELIOS_HANG_DIR": str(logs / "reports"),
            "HELIOS_TEST_PG_TIMEOUT": "40",
            **({"HELIOS_HANG_TIMEOUT": "4"} if case == "hang" else {}),
        }

    return run_jobs(WORKER, CASES, env_for, tmp_path_factory)


@pytest.mark.faults
def test_the_survivors_name_the_rank_that_failed_in_the_frameworks_thread(
    jobs: dict[str, tuple[Finished, Path]],
) -> None:
    done, logs = jobs["raise"]
    assert done.returncode != 0, done.describe()
    # Each survivor's collective broke and the framework caught the failure; a survivor
    # that got to say so before torchrun stopped it names rank 1, on its stderr and in
    # its error file (torchrun stops the others once rank 1 has exited).
    line = r"^rank 1 on \S+ failed first: ValueError: bad batch 7$"
    lines = re.findall(line, done.stderr, flags=re.MULTILINE)  # torchrun's summary aside
    assert 1 <= len(lines) <= 2, done.describe()
    files = {int(path.parent.name): path.read_text() for path in logs.glob("**/error.json")}
    assert "ValueError: bad batch 7" in files[1], files
    for rank in set(files) - {1}:
        assert re.search(r"rank 1 on \S+ failed first", files[rank]), files[rank]


@pytest.mark.faults
def test_a_hang_in_an_adopted_group_gets_its_roll_call(
    jobs: dict[str, tuple[Finished, Path]],
) -> None:
    done, _ = jobs["hang"]
    assert done.returncode == 0, done.describe()  # the late rank caught up
    (line,) = [line for line in done.stderr.splitlines() if "helios hang roll call" in line]
    assert "ranks [0, 2] in all_reduce #2" in line, line
    assert "rank 1 in no collective, at adopted.py:" in line, line


@pytest.mark.faults
def test_the_timeout_given_to_init_replaces_the_frameworks(
    jobs: dict[str, tuple[Finished, Path]],
) -> None:
    done, _ = jobs["timeout"]
    assert done.returncode == 0, done.describe()
    timed_out = re.findall(r"rank (\d) timed out: .*", done.stdout)
    assert sorted(timed_out) == ["0", "2"], done.describe()
    # gloo names the timeout it waited: init's 3 s, not the 60 s the group was made with;
    # a torch that cannot change it (2.4) says so in an AdoptionWarning on every rank.
    waited = "3000ms" if hasattr(dist, "set_timeout") else "60000ms"
    lines = [line for line in done.stdout.splitlines() if "timed out" in line]
    assert all(waited in line for line in lines), done.describe()
    if not hasattr(dist, "set_timeout"):
        assert done.stderr.count("AdoptionWarning") == 3, done.describe()


@pytest.mark.faults
def test_the_agreement_check_runs_on_an_adopted_group(
    jobs: dict[str, tuple[Finished, Path]],
) -> None:
    done, _ = jobs["settings"]
    assert done.returncode == 0, done.describe()
    assert "AgreementWarning" in done.stderr, done.describe()
    assert "NCCL_DEBUG" in done.stderr, done.describe()
