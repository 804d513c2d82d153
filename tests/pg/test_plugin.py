"""helios-pg's pytest plugin, run on users' tests through pytester in fresh pytest processes.

One session runs a file of every kind of ranks test (passing on 1, 2 and 3 ranks,
parametrized, failing by an exception and by an assert, hanging, skipped, xfailed, with
a fixture that cannot be sent, with a group timeout of its own, with warning filters,
with a bad marker), on fresh ranks and on reused ones, and leaves no process or
temporary file behind; another runs under pytest-xdist with four workers. Others run a
rank that forks a child that outlives it (reported by its exit status at once, the child
ended with the test), and a hang whose report names the culprit as the roll call does. The
reused-ranks session and the xdist one are ``slow`` (they run in CI's launchers step).
That loading the plugin imports no torch is checked from helios-pg's wheel, installed
alone (tools/noxfile.py). The plugin declares the pytest it needs in helios-pg's
``pytest`` extra; tools/noxfile.py's ``floor`` session installs that extra at its floor
(pytest 8.0.0) and runs this file there, and the locked workspace at the newest pytest.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from helios_pg._testing._marker import read_marker
from tests.support.procs import plain_environment

EVERY_KIND = """
import os
import time
import warnings

import helios_env
import pytest
import torch
import torch.distributed as dist


@pytest.mark.ranks(1)
def test_one_rank(dist_info):
    assert (dist_info.rank, dist_info.world_size) == (0, 1)


@pytest.mark.ranks(2)
def test_two_ranks(dist_info):
    x = torch.tensor([float(dist_info.rank + 1)])
    dist.all_reduce(x)
    assert x.item() == 3.0
    # The default: gloo on the CPU, with CUDA hidden, on any machine.
    assert dist.get_backend() == "gloo"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    # pytest runs as the one task of an srun step: the ranks still know who they are.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert helios_env.get_dist_info() == dist_info
        assert helios_env.get_global_rank() == dist_info.rank


@pytest.mark.ranks(2)
def test_ddp_on_fresh_ranks(dist_info):
    import sys

    # The forkserver imported what the first DDP of a process imports (torch._dynamo).
    assert "torch._dynamo" in sys.modules
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.full((3, 4), float(dist_info.rank))).sum().backward()
    optimizer.step()
    # The gradients were averaged: every rank holds the same weights.
    weights = [torch.empty(2, 4) for _ in range(2)]
    dist.all_gather(weights, model.module.weight.detach())
    assert torch.equal(weights[0], weights[1])


@pytest.mark.ranks(2, timeout=30, group_timeout=1)
def test_a_skipped_collective_fails_at_the_group_timeout(dist_info, tmp_path):
    raised = tmp_path / "rank-0-raised"
    if dist_info.rank == 1:
        # Never joins the all-reduce, and stays alive until rank 0 has raised (or for
        # 20 s): rank 0 must give up at the group's timeout, not on a closed connection.
        deadline = time.monotonic() + 20
        while not raised.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="[Tt]imed out"):
        dist.all_reduce(torch.ones(1))
    raised.touch()
    assert time.monotonic() - start < 15


@pytest.mark.ranks(2)
@pytest.mark.filterwarnings("error::UserWarning")
def test_warning_filters_apply_in_the_ranks(dist_info):
    with pytest.raises(UserWarning):
        warnings.warn("careful", UserWarning, stacklevel=1)


@pytest.mark.ranks(2, timeout="soon")
def test_with_a_bad_marker(dist_info):
    pass


@pytest.mark.ranks(3)
def test_three_ranks(dist_info):
    x = torch.tensor([float(dist_info.rank)])
    dist.all_reduce(x)
    assert x.item() == 3.0
    assert dist.get_world_size() == dist_info.world_size == 3


@pytest.fixture
def base():
    return 10.0


@pytest.mark.ranks(2)
@pytest.mark.parametrize("factor", [1.0, 2.0])
def test_parametrized(dist_info, base, factor, tmp_path):
    x = torch.tensor([base * factor])
    dist.all_reduce(x)
    assert x.item() == 2 * base * factor
    assert tmp_path.is_dir()


class SlowToReport(ValueError):
    def __str__(self):
        time.sleep(1.0)  # formatting the traceback: rank 2's outcome is read last
        return "rank two is unhappy"


@pytest.mark.ranks(3)
def test_rank_two_fails(dist_info, tmp_path):
    print(f"output of rank {dist_info.rank}")
    if dist_info.rank == 2:
        (tmp_path / "rank-2-failed").touch()
        raise SlowToReport()
    # The others fail after rank 2, as a collective that lost its peer would, and
    # their outcomes reach the parent first: the report must still name rank 2.
    for _ in range(3000):
        if (tmp_path / "rank-2-failed").exists():
            break
        time.sleep(0.01)
    time.sleep(0.5)
    raise RuntimeError(f"rank {dist_info.rank} lost rank 2")


@pytest.mark.ranks(2)
def test_an_assert_explains_itself(dist_info):
    x = torch.tensor([1.0])
    dist.all_reduce(x)
    assert x.item() == 3.0


@pytest.mark.ranks(3)
def test_three_ranks_after_a_failure(dist_info):
    x = torch.tensor([1.0])
    dist.all_reduce(x)
    assert x.item() == 3.0


@pytest.mark.ranks(2, timeout=4)
def test_rank_one_hangs(dist_info):
    if dist_info.rank == 1:
        time.sleep(600)


def test_after_the_hang_the_session_goes_on():
    pass


@pytest.mark.ranks(2)
def test_two_ranks_after_a_hang(dist_info):
    x = torch.tensor([1.0])
    dist.all_reduce(x)
    assert x.item() == 2.0


@pytest.mark.ranks(2)
def test_skipped_in_a_rank(dist_info):
    pytest.skip("no GPU here")


@pytest.mark.ranks(2)
@pytest.mark.xfail(reason="a known bug", strict=True)
def test_xfail_marked(dist_info):
    assert dist_info.rank == 0


@pytest.mark.ranks(2)
def test_xfail_called_in_a_rank(dist_info):
    pytest.xfail("not yet")


@pytest.fixture
def unsendable():
    return lambda: None


@pytest.mark.ranks(2)
def test_with_an_unsendable_fixture(unsendable):
    pass
"""


# pytest started as the single task of an srun step (`srun -n 1 pytest`).
SRUN_ONE_TASK = {
    "SLURM_JOB_ID": "7",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NTASKS": "1",
    "SLURM_STEP_NUM_TASKS": "1",
    "SLURM_STEP_NUM_NODES": "1",
    "SLURM_STEP_TASKS_PER_NODE": "1",
    "SLURM_STEP_NODELIST": "localhost",
}


def leftovers(marker: str) -> list[int]:
    """Processes alive whose environment carries ``marker``."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            data = environ.read_bytes()
            state = (environ.parent / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state != "Z" and marker.encode() in data.split(b"\0"):
            found.append(int(environ.parent.name))
    return found


@pytest.fixture
def session_env(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    """A plain environment with its own temporary directory and a marker to find processes,
    inside a one-task srun step (as ``srun -n 1 pytest`` leaves it).

    The directory is short: multiprocessing's forkserver puts a socket there, and a
    socket's path must stay under about 100 bytes.
    """
    scratch = Path(tempfile.mkdtemp(prefix="hp-", dir="/tmp"))
    env = (
        plain_environment(os.environ)
        | SRUN_ONE_TASK
        | {
            "TMPDIR": str(scratch),
            "HELIOS_PLUGIN_TEST": uuid.uuid4().hex,
            "GLOO_SOCKET_IFNAME": "lo",
        }
    )
    for name in list(os.environ):
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    yield env
    shutil.rmtree(scratch, ignore_errors=True)


FRESH_AND_REUSED = pytest.mark.parametrize(
    "mode",
    [
        pytest.param([], id="fresh"),
        pytest.param(["--ranks-reuse"], id="reuse", marks=pytest.mark.slow),
    ],
)
"""The session on fresh ranks, and on reused ones (``slow``)."""


@pytest.mark.long
@FRESH_AND_REUSED
def test_every_kind_of_ranks_test_reports_what_a_plain_test_would(
    pytester: pytest.Pytester, session_env: dict[str, str], mode: list[str]
) -> None:
    pytester.makepyfile(test_kinds=EVERY_KIND)

    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", *mode, timeout=240)

    # The tests after a failure and after a hang pass: nothing leaks into the next test.
    result.assert_outcomes(passed=11, failed=5, skipped=1, xfailed=2)
    text = result.stdout.str()
    # The failing rank, by number, with its traceback and its output; the others stopped.
    result.stdout.fnmatch_lines(
        [
            "*rank 2 of 3 failed:*",
            "*SlowToReport: rank two is unhappy*",
            "*rank(s) [[]*[]] failed after rank 2*",
        ]
    )
    assert "output of rank 2" in text
    assert "lost rank 2" not in text
    # A failing assert is explained as pytest explains it in a plain test.
    result.stdout.fnmatch_lines(["*rank ? of 2 failed:*", "*AssertionError: assert 2.0 == 3.0*"])
    assert "test_kinds.py" in text
    # The hang: the culprit, then every rank's stack, the hung rank inside the test's sleep.
    result.stdout.fnmatch_lines(
        [
            "helios hang (culprit: rank 1): rank 0 finished the test; "
            "rank 1 in no collective, at test_kinds.py:*",
            "*rank(s) ?1? of 2 still running after the ranks timeout of 4 s*",
            "*--- rank 0 stack ---*",
            "*--- rank 1 stack ---*",
            '*File "*test_kinds.py", line * in test_rank_one_hangs*',
        ]
    )
    result.stdout.fnmatch_lines(["*fixture 'unsendable' (function) cannot be sent to the ranks*"])
    result.stdout.fnmatch_lines(
        ["*ranks(timeout='soon') is not a positive, finite number of seconds or a timedelta; the*"]
    )
    result.stdout.fnmatch_lines(["*SKIPPED*rank ?: no GPU here*"])
    # How long the forkserver took to start, and what it imported.
    result.stdout.fnmatch_lines(
        [
            "helios-pg ranks: forkserver ready in * s (* s of it in the first ranks test), "
            "having imported torch, *torch._dynamo*"
        ]
    )
    # Nothing left behind: no process of the session, no temporary file.
    assert leftovers(session_env["HELIOS_PLUGIN_TEST"]) == []
    # torch._dynamo's import makes torch's compile cache directory, as in any process.
    left = Path(session_env["TMPDIR"]).iterdir()
    assert [path for path in left if not path.name.startswith("torchinductor_")] == []


FORKING = """
import os
import time
from pathlib import Path

import pytest


def linger(name):
    child = os.fork()
    if child == 0:  # outlives the rank, holding the pipe the rank reports on
        time.sleep(120)
        os._exit(0)
    Path(__file__).with_name(name).write_text(str(child))


def running(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def ended(pid):
    deadline = time.monotonic() + 5  # a killed process still has to run to exit
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not running(pid)


@pytest.mark.ranks(2, timeout=60)
def test_rank_one_forks_and_exits(dist_info):
    if dist_info.rank == 1:
        linger("exits.pid")
        os._exit(3)


@pytest.mark.ranks(2, timeout=60)
def test_rank_one_forks_and_passes(dist_info):
    if dist_info.rank == 1:
        linger("passes.pid")


@pytest.mark.ranks(2, timeout=60)
def test_nothing_is_left_of_the_tests_before(dist_info):
    for name in ("exits.pid", "passes.pid"):
        assert ended(int(Path(__file__).with_name(name).read_text())), name
"""


@FRESH_AND_REUSED
def test_a_rank_that_forks_is_reported_when_it_exits_and_its_child_ended(
    pytester: pytest.Pytester, session_env: dict[str, str], mode: list[str]
) -> None:
    pytester.makeini("[pytest]\nranks_preload_torch = false\n")
    pytester.makepyfile(test_forking=FORKING)

    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *mode, timeout=180)

    result.assert_outcomes(passed=2, failed=1)
    # Its exit status, as soon as it exited: its child, which holds its end of the
    # pipe, does not make it a hang.
    result.stdout.fnmatch_lines(
        ["*rank 1 of 2 failed:*", "*rank 1 exited with status 3, without a result*"]
    )
    text = result.stdout.str()
    assert "still running" not in text
    assert "helios hang" not in text
    # Neither child outlived its test (checked by the last test) nor the session.
    children = [int((pytester.path / name).read_text()) for name in ("exits.pid", "passes.pid")]
    left = leftovers(session_env["HELIOS_PLUGIN_TEST"])
    assert left == [], (children, left)


HANG = """
import time

import pytest
import torch
import torch.distributed as dist


@pytest.mark.ranks(3, timeout=12, group_timeout=120)
def test_rank_one_sleeps(dist_info):
    dist.all_reduce(torch.ones(1))
    if dist_info.rank == 1:
        time.sleep(600)  # rank 1 sleeps
    dist.all_reduce(torch.ones(1))  # the others wait here
"""


@pytest.mark.long
def test_a_hang_report_names_the_culprit_and_where_each_rank_is(
    pytester: pytest.Pytester, session_env: dict[str, str]
) -> None:
    pytester.makeini("[pytest]\nranks_preload_torch = false\n")
    lines = pytester.makepyfile(test_hang=HANG).read_text().splitlines()
    sleeps = next(n for n, line in enumerate(lines, 1) if "# rank 1 sleeps" in line)
    waits = next(n for n, line in enumerate(lines, 1) if "# the others wait here" in line)

    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=180)

    result.assert_outcomes(failed=1)
    lead = next(line for line in result.outlines if line.startswith("helios hang"))
    # The roll call's words: the culprit first named, then where every rank is.
    assert lead.startswith("helios hang (culprit: rank 1): "), lead
    assert f"rank 1 in no collective, at test_hang.py:{sleeps}" in lead, lead
    assert f"ranks [0, 2] in all_reduce #2 at test_hang.py:{waits}" in lead, lead
    # Then every rank's stack, as before.
    result.stdout.fnmatch_lines(
        [
            "helios hang *",
            "rank(s) [[]0, 1, 2[]] of 3 still running after the ranks timeout of 12 s; *",
            "--- rank 0 stack ---",
        ]
    )
    assert leftovers(session_env["HELIOS_PLUGIN_TEST"]) == []


def test_the_roll_calls_store_sets_once_and_compares_as_torchs_stores(tmp_path: Path) -> None:
    from helios_pg._testing._rollcall import FolderStore

    store, other = FolderStore(tmp_path / "roll"), FolderStore(tmp_path / "roll")

    assert not store.check(["a/b"])
    assert store.compare_set("a/b", "", "first") == b"first"  # unset: set
    assert other.compare_set("a/b", "", "second") == b"first"  # set: left as it is
    assert other.compare_set("a/b", "first", "third") == b"third"  # as expected: set
    assert store.compare_set("c", "x", "y") == b"x"  # unset, something else expected
    store.set("d/e", '{"where": "in no collective"}')
    assert store.check(["a/b", "d/e"])
    assert not store.check(["a/b", "c"])
    assert other.get("d/e") == b'{"where": "in no collective"}'


def test_the_pytest_extra_declares_the_floor_the_plugin_is_tested_at() -> None:
    requirements = [Requirement(raw) for raw in importlib.metadata.requires("helios-pg") or []]
    extra = [
        f"{req.name}{req.specifier}"
        for req in requirements
        if req.marker is not None and req.marker.evaluate({"extra": "pytest"})
    ]

    # tools/noxfile.py's floor resolves this extra at its lowest: the plugin's floor.
    assert extra == ["pytest>=8"]


def test_the_forkserver_imports_what_the_ini_file_asks(
    pytester: pytest.Pytester, session_env: dict[str, str]
) -> None:
    pytester.makeini(
        """
        [pytest]
        ranks_preload_torch = false
        ranks_preload = preloaded_helper
        """
    )
    pytester.makepyfile(
        preloaded_helper="import os\nPID = os.getpid()\n",
        test_preload="""
        import os
        import sys

        import pytest

        @pytest.mark.ranks(2)
        def test_preloaded(dist_info):
            helper = sys.modules["preloaded_helper"]
            # Imported once, in the forkserver, not in this rank.
            assert helper.PID != os.getpid()
            assert "torch._dynamo" not in sys.modules
        """,
    )

    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)

    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*forkserver ready in * s (* s of it in the first ranks test), having imported *, "
            "preloaded_helper"
        ]
    )
    assert "torch._dynamo" not in result.stdout.str()


def test_a_preload_that_cannot_be_imported_fails_its_test_and_says_so(
    pytester: pytest.Pytester, session_env: dict[str, str]
) -> None:
    pytester.makeini("[pytest]\nranks_preload = no_such_module_here\n")
    pytester.makepyfile(
        test_preload="""
        import pytest

        @pytest.mark.ranks(2)
        def test_never_runs(dist_info):
            pass
        """
    )

    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*ranks_preload names 'no_such_module_here', which cannot be imported here "
            "(no such module); install it or remove it from the ranks_preload ini option*"
        ]
    )
    assert "forkserver ready" not in result.stdout.str()


def test_the_torch_stack_is_what_this_torch_has() -> None:
    from helios_pg._testing._preload import torch_stack

    names = torch_stack()
    assert names[0] == "torch._dynamo"
    # DTensor and FSDP2, each under one name: the one this torch keeps it under.
    assert len(names) == 3, names
    assert all(importlib.util.find_spec(name) is not None for name in names), names


@pytest.mark.slow
def test_four_xdist_workers_never_collide(
    pytester: pytest.Pytester, session_env: dict[str, str]
) -> None:
    pytester.makepyfile(
        test_many="""
        import pytest
        import torch
        import torch.distributed as dist

        @pytest.mark.ranks(2)
        @pytest.mark.parametrize("case", range(8))
        def test_sum(dist_info, case):
            x = torch.tensor([float(case + dist_info.rank)])
            dist.all_reduce(x)
            assert x.item() == 2 * case + 1
        """
    )

    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "4", timeout=240)

    result.assert_outcomes(passed=8)
    assert leftovers(session_env["HELIOS_PLUGIN_TEST"]) == []


@pytest.mark.parametrize("deadline", [30, 30.0, timedelta(seconds=30)])
def test_the_marker_takes_seconds_or_a_timedelta(deadline: float | timedelta) -> None:
    spec = read_marker(pytest.mark.ranks(2, timeout=deadline, group_timeout=deadline).mark)

    assert (spec.timeout, spec.group_timeout) == (30.0, 30.0)
