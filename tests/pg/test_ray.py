"""Ray Train for real: helios adopts the group of a ``TorchTrainer`` of two CPU workers.

One run of ``workers/ray_train.py`` (a local Ray cluster, one ``fit`` that Ray restarts
once): the launcher, the ranks, the timeout, the failure report, the roll call and the
attempt, as on torchrun. Ray is a test dependency only (the ``ray`` group); without
it the test is skipped, and fails under ``CI=true``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.procs import Finished, base_env, run_processes

DRIVER = Path(__file__).parent / "workers" / "ray_train.py"
SOURCE = DRIVER.read_text().splitlines()


def line_of(text: str) -> int:
    """The line number of the driver's line that holds ``text``."""
    return next(number for number, line in enumerate(SOURCE, 1) if text in line)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Finished, dict[str, dict[str, Any]]]:
    if importlib.util.find_spec("ray") is None:
        reason = "Ray is not installed (uv sync installs the ray group)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("ray")
    env = base_env({"RAY_DEDUP_LOGS": "0", "RAY_USAGE_STATS_ENABLED": "0"})
    (done,) = run_processes([([sys.executable, str(DRIVER), str(out)], env)], limit=420)
    records = {path.stem: json.loads(path.read_text()) for path in out.glob("*-*.json")}
    return done, records


@pytest.mark.slow
def test_helios_adopts_ray_trains_group_in_each_worker_group(
    run: tuple[Finished, dict[str, dict[str, Any]]],
) -> None:
    done, records = run
    assert done.returncode == 0, done.describe()
    assert sorted(records) == ["0-0", "0-1", "1-0", "1-1"], done.describe()
    for name, record in records.items():
        _, rank = map(int, name.split("-"))
        assert record["launcher"] == "ray-train", record
        assert (record["rank"], record["world_size"], record["local_rank"]) == (rank, 2, rank)
        assert record["node_rank"] == 0, record
        assert record["sum"] == 3.0, record  # the all-reduce of 1 and 2
        assert record["reporter"], record
        assert record["watchdog"], record
        # init's timeout, not Ray's 1800 s, where this torch shows it
        assert record["timeout"] in (40.0, None), record


@pytest.mark.slow
def test_the_attempt_follows_rays_restarts(
    run: tuple[Finished, dict[str, dict[str, Any]]],
) -> None:
    _, records = run
    assert [records[f"{a}-{r}"]["attempt"] for a in (0, 1) for r in (0, 1)] == [0, 0, 1, 1]


def worker_lines(output: str) -> dict[str, list[str]]:
    """Each Ray Train worker's lines, by its pid, as Ray forwards them to the driver."""
    found: dict[str, list[str]] = {}
    for pid, text in re.findall(r"\(RayTrainWorker pid=(\d+)[^)]*\)\S*\s(.*)", output):
        found.setdefault(pid, []).append(text)
    return found


@pytest.mark.slow
def test_rank_zero_names_the_rank_that_failed_in_rays_thread(
    run: tuple[Finished, dict[str, dict[str, Any]]],
) -> None:
    done, _ = run
    first = re.compile(r"rank 1 on \S+ failed first: ValueError: bad batch 7$")
    told = 0
    for lines in worker_lines(done.stdout + done.stderr).values():
        said = any(first.search(line) for line in lines)
        told += said
        if any("Connection closed by peer" in line for line in lines):
            # A survivor whose collective broke names the culprit with its own error.
            assert said, "\n".join(lines)
    # Rank 0 said it, as its collective broke or as its watchdog saw it wait (1 s)
    # after the failure, before Ray stopped it.
    assert told == 1, done.describe()


@pytest.mark.slow
def test_a_hang_in_rays_group_gets_its_roll_call(
    run: tuple[Finished, dict[str, dict[str, Any]]],
) -> None:
    done, _ = run
    output = done.stdout + done.stderr
    lines = [line for line in output.splitlines() if "helios hang roll call" in line]
    late = f"rank 1 in no collective, at ray_train.py:{line_of('until the roll call asked')}"
    assert any(late in line for line in lines), done.describe()
