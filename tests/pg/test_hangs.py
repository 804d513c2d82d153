"""The hang roll call under real torchrun: rank 1 of 3 hangs, the roll call names it.

One job per way of hanging, started at once, each with ``HELIOS_HANG_TIMEOUT=5`` and a
15 s group timeout: the roll call comes at about 5 s, the others' all-reduce times out at
15 s, and torchrun names its root cause from the error files.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
import tempfile
import threading
import time
import types
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import PrefixStore, TCPStore

from helios_pg import RendezvousConfigError, init, shutdown
from helios_pg._reports import _watch, _watchdog
from helios_pg._reports._hang_settings import hang_timeout_from
from helios_pg._reports._issued import IssuedWork, Place, hooks_supported
from helios_pg._reports._ledger import Ledger
from helios_pg._reports._records import Answer
from helios_pg._reports._verdict import decide
from helios_pg._reports._watchdog import Watchdog
from helios_pg._reports._wrappers import COLLECTIVES, wrap
from tests.pg.torchrun_jobs import names_culprit, root_cause, run_jobs
from tests.support.procs import Finished

WORKER = Path(__file__).parent / "workers" / "hanging.py"
HOOKS = hooks_supported()
NO_HOOKS = (
    "this torch's process groups take no hooks: DDP's collectives, issued from C++, are not seen"
)
# ddp: the others wait in a collective that torch issues from C++, seen only through hooks.
MODES = ("skip", "skip_preempt", "loop", "gil", *(("ddp",) if HOOKS else ()))
SOURCE = WORKER.read_text().splitlines()
FIRST = "rank 1 on host failed first: ValueError: bad batch 9"


def line_of(text: str) -> int:
    """The line number of the worker's line that holds ``text``."""
    return next(number for number, line in enumerate(SOURCE, 1) if text in line)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Finished, Path]]:
    def env_for(mode: str, logs: Path) -> dict[str, str]:
        return {
            "HELIOS_TEST_HANG": mode,
            "HELIOS_HANG_TIMEOUT": "5",
            "HELIOS_HANG_DIR": str(logs / "reports"),
            "HELIOS_TEST_PG_TIMEOUT": "15",
        }

    return run_jobs(WORKER, MODES, env_for, tmp_path_factory)


def roll_call(done: Finished) -> str:
    lines = [line for line in done.stderr.splitlines() if "helios hang roll call" in line]
    assert len(lines) == 1, done.describe()
    return lines[0]


WAITING = f"ranks [0, 2] in all_reduce #2 at hanging.py:{line_of('the others wait here')}"
ASLEEP = f"rank 1 in no collective, at hanging.py:{line_of('time.sleep(HANG)')}"


@pytest.mark.faults
@pytest.mark.parametrize(
    ("mode", "waiting", "where"),
    [
        ("skip", WAITING, ASLEEP),
        ("loop", WAITING, "rank 1 in no collective, at hanging.py:"),
        (
            "gil",
            WAITING,
            f"rank 1 did not answer (faulthandler: hanging.py:{line_of('PyDLL')} in hang)",
        ),
        pytest.param(
            "ddp",
            # The sequence number is the group's own, after DDP's collectives at construction.
            f"in all_reduce #\\d+ at hanging.py:{line_of('loss.backward()')}",
            ASLEEP,
            marks=pytest.mark.skipif(not HOOKS, reason=NO_HOOKS),
        ),
    ],
)
def test_the_roll_call_names_the_hung_rank_and_where_it_is(
    jobs: dict[str, tuple[Finished, Path]], mode: str, waiting: str, where: str
) -> None:
    done, _ = jobs[mode]
    line = roll_call(done)
    others = re.search(rf"ranks \[0, 2\] {waiting}" if mode == "ddp" else re.escape(waiting), line)
    assert others, line
    assert where in line, line


@pytest.mark.faults
@pytest.mark.parametrize("mode", MODES)
def test_torchrun_names_the_hung_rank_as_the_root_cause(
    jobs: dict[str, tuple[Finished, Path]], mode: str
) -> None:
    done, _ = jobs[mode]
    cause = root_cause(done.stderr + done.stdout)
    assert names_culprit(cause, 1, "hang: "), cause


@pytest.mark.faults
def test_a_rank_named_hung_dies_of_torchruns_sigterm_under_preemption(
    jobs: dict[str, tuple[Finished, Path]],
) -> None:
    """preemption()'s handler would keep the stuck rank alive until torchrun's SIGKILL."""
    done, _ = jobs["skip_preempt"]
    output = done.stderr + done.stdout
    assert "ranks [0, 2]" in roll_call(done), output
    assert "Unable to shutdown process" not in output, output
    assert names_culprit(root_cause(output), 1, "hang: "), output


@pytest.mark.faults
@pytest.mark.parametrize("mode", ["skip", "loop"])
def test_each_rank_writes_its_own_report(jobs: dict[str, tuple[Finished, Path]], mode: str) -> None:
    _, logs = jobs[mode]
    reports = logs / "reports"
    for rank in range(3):
        text = (reports / f"rank-{rank}.txt").read_text()
        assert text.startswith(f"rank {rank} on "), text
        assert "hanging.py" in text
    culprit = next(logs.glob("**/attempt_0/1/error.json"))
    message = json.loads(culprit.read_text())["message"]["message"]
    assert message.startswith("hang: rank 1 on "), message


@pytest.mark.parametrize("raw", ["0", "-3", "soon", "inf", "nan", "1e300"])
def test_a_bad_hang_timeout_is_refused_before_any_communication(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("HELIOS_HANG_TIMEOUT", raw)

    with pytest.raises(RendezvousConfigError, match="HELIOS_HANG_TIMEOUT"):
        init()
    assert not dist.is_initialized()


@pytest.mark.parametrize("raw", ["0", "-3", "inf", "nan", "1e300", "2.5", "1e5"])
def test_the_argument_and_the_variable_take_the_same_hang_timeouts(raw: str) -> None:
    def read(argument: float | None, environ: dict[str, str]) -> float | str:
        try:
            found = hang_timeout_from(argument, environ)
        except ValueError:
            return "refused"
        assert found is not None
        return found

    assert read(float(raw), {}) == read(None, {"HELIOS_HANG_TIMEOUT": raw})


def test_the_hang_timeout_argument_wins_over_the_variable() -> None:
    assert hang_timeout_from(2.5, {"HELIOS_HANG_TIMEOUT": "9"}) == 2.5
    assert hang_timeout_from(None, {"HELIOS_HANG_TIMEOUT": "9"}) == 9.0
    assert hang_timeout_from(None, {}) is None


def test_the_collectives_are_wrapped_only_while_the_watchdog_runs() -> None:
    originals = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}
    init()
    try:
        assert all(getattr(dist, name) is fn for name, fn in originals.items())
    finally:
        shutdown()
    init(hang_timeout=30)
    try:
        assert dist.all_reduce is not originals["all_reduce"]
        assert dist.all_reduce.__wrapped__ is originals["all_reduce"]  # type: ignore[attr-defined]
    finally:
        shutdown()
    assert all(getattr(dist, name) is fn for name, fn in originals.items())
    assert "helios-hang-watchdog" not in {t.name for t in sys.modules["threading"].enumerate()}


def answer(where: str, seq: int | None) -> Answer:
    op = where.split()[1] if seq is not None else None
    group = where.split(" on ")[1].split(" at ", maxsplit=1)[0] if " on " in where else ""
    since = None if seq is None else 100.0 + seq
    return Answer(rank=-1, where=where, op=op, group=group, seq=seq, since=since)


@pytest.mark.parametrize(
    ("answers", "culprits"),
    [
        # A rank outside any collective while the others wait: whoever called the roll.
        pytest.param(
            {0: answer("in no collective, at t.py:9", None), 1: answer("in all_reduce #3", 3)},
            [0],
            id="one-waits",
        ),
        # Each waiting rank in a collective of its own group (a 1-1-1 tie): the rank in
        # no collective, never a waiting one.
        pytest.param(
            {
                0: answer("in all_reduce #2 on group 1 at t.py:60", 2),
                1: answer("in all_reduce #2 at t.py:61", 2),
                2: answer("in no collective, at t.py:58", None),
            },
            [2],
            id="two-groups",
        ),
        # A rank that could not answer, while the others wait.
        pytest.param(
            {
                0: answer("in all_reduce #2 at t.py:5", 2),
                2: answer("in all_reduce #2 at t.py:5", 2),
            },
            [1],
            id="silent",
        ),
        # Every rank in a collective: the one nobody else is in.
        pytest.param(
            {
                0: answer("in all_reduce #2 at t.py:5", 2),
                1: answer("in broadcast #2 at t.py:7", 2),
                2: answer("in all_reduce #2 at t.py:5", 2),
            },
            [1],
            id="alone",
        ),
        # One all-reduce, counted differently by each rank (subgroup traffic before it)
        # and called from different lines: only the rank in another collective.
        pytest.param(
            {
                0: answer("in all_reduce #8 at t.py:5", 8),
                1: answer("in all_reduce #8 at t.py:9", 8),
                2: answer("in all_reduce #7 at t.py:5", 7),
                3: answer("in barrier #7 at t.py:12", 7),
            },
            [3],
            id="same-collective-other-count",
        ),
    ],
)
@pytest.mark.parametrize("caller", [0, 1, 2])
def test_the_culprits_are_never_a_rank_that_waits(
    tmp_path: Path, answers: dict[int, Answer], culprits: list[int], caller: int
) -> None:
    world_size = max(*answers, 1) + 1
    caller = caller if caller in answers else min(answers)  # the caller always answers
    _, found, began = decide(answers, caller=caller, world_size=world_size, directory=tmp_path)

    assert found == culprits
    assert began == min(a.since for a in answers.values() if a.since is not None)


def test_the_roll_call_line_lists_every_rank_where_it_is(tmp_path: Path) -> None:
    answers = {0: answer("in no collective, at train.py:9", None), 1: answer("in all_reduce #3", 3)}
    line, _, _ = decide(answers, caller=1, world_size=2, directory=tmp_path)

    assert line == "rank 0 in no collective, at train.py:9; rank 1 in all_reduce #3"


def test_a_job_without_a_roll_call_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("HELIOS_HANG_DIR", raising=False)
    init(hang_timeout=30)
    try:
        (folder,) = tmp_path.glob("helios-hang-*")
        assert list(folder.iterdir())  # this rank's faulthandler file
    finally:
        shutdown()
    assert not list(tmp_path.iterdir())


def test_a_folder_the_user_named_stays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HELIOS_HANG_DIR", str(tmp_path / "reports"))
    init(hang_timeout=30)
    shutdown()
    assert (tmp_path / "reports").is_dir()
    assert not list((tmp_path / "reports").iterdir())


def test_a_wrapped_call_is_placed_at_its_caller_when_asked(tmp_path: Path) -> None:
    watchdog = Watchdog(0, 1, None, "k", 5.0, tmp_path)
    seen: list[Place | None] = []

    def barrier() -> None:
        # The roll call asks from the watchdog's thread while the main thread waits here.
        asker = threading.Thread(target=lambda: seen.append(watchdog.place()))
        asker.start()
        asker.join()

    def collective(tensor: object, group: object = None) -> str:
        fake.barrier()  # a wrapped call inside another: the outer one is where the rank is
        return "done"

    fake = types.SimpleNamespace(all_reduce=collective, barrier=barrier)
    watchdog.wrapper_code = wrap(fake, watchdog.current, watchdog.main, watchdog.originals, None)
    group = object()
    assert fake.all_reduce(1, group=group) == "done"
    line = sys._getframe().f_lineno - 1

    (place,) = seen
    assert place is not None
    assert (place.op, place.seq, place.site) == ("all_reduce", 1, f"test_hangs.py:{line}")
    assert place.group_arg is group
    # Once the call is over, the rank is in no collective and nothing of it is kept.
    assert watchdog.place() is None
    assert watchdog.current.group_arg is None


def noted(issued: IssuedWork) -> int:
    """How many collectives ``issued`` has noted so far (it counts them from 0)."""
    count = next(issued.counter)
    issued.counter = itertools.count(count)
    return count


def wait_until_completed(issued: IssuedWork) -> None:
    # The work's future runs its callbacks on torch's thread, just after the wait ends.
    deadline = time.monotonic() + 10
    while issued.oldest() is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert issued.oldest() is None


@pytest.mark.skipif(not HOOKS, reason=NO_HOOKS)
def test_the_watchdog_hooks_the_default_group_and_new_groups_while_it_runs() -> None:
    init(hang_timeout=30)
    try:
        issued = _watchdog._watchdog.issued if _watchdog._watchdog else None
        assert issued is not None
        sub = dist.new_group([0])
        assert isinstance(sub, dist.ProcessGroup)
        hooked = [ref() for ref in issued.groups]
        assert dist.group.WORLD in hooked
        assert sub in hooked
        before = noted(issued)
        dist.all_reduce(torch.ones(1))  # wrapped: the wrapper notes it, the hooks do not
        assert noted(issued) == before
        dist.distributed_c10d.all_reduce(torch.ones(1), group=sub)  # no wrapper sees it
        assert noted(issued) == before + 1
        wait_until_completed(issued)
        _watch.stop_watchdog()
        dist.distributed_c10d.all_reduce(torch.ones(1), group=sub)
        assert noted(issued) == before + 1  # the hooks went with the watchdog
        assert not issued.groups
    finally:
        shutdown()


@pytest.mark.skipif(not HOOKS, reason=NO_HOOKS)
@pytest.mark.ranks(2, timeout=60, group_timeout=20)
def test_an_async_collective_is_noted_from_issue_to_completion() -> None:
    # As inside a wrapper, on the main thread: async ops still count.
    issued = IssuedWork(Place(op="all_reduce"), threading.get_ident())
    assert issued.install(dist.group.WORLD, default=True)
    store = dist.distributed_c10d._get_default_store()
    try:
        if dist.get_rank() == 0:
            store.wait(["issued"])  # rank 1's all-reduce cannot complete before this one
            dist.all_reduce(torch.ones(1))
            return
        work = dist.all_reduce(torch.ones(1), async_op=True)
        line = sys._getframe().f_lineno - 1
        place = issued.oldest()
        store.set("issued", "1")
        assert place is not None
        assert (place.op, place.group, place.site) == ("all_reduce", "", f"test_hangs.py:{line}")
        work.wait()
        wait_until_completed(issued)
    finally:
        issued.remove()


@pytest.mark.skipif(not HOOKS, reason=NO_HOOKS)
@pytest.mark.ranks(2, timeout=60, group_timeout=20)
def test_the_collectives_torch_issues_from_cpp_are_noted() -> None:
    # As inside a wrapper, on the main thread: everything from Python counts as covered.
    issued = IssuedWork(Place(op="all_reduce"), threading.get_ident())
    assert issued.install(dist.group.WORLD, default=True)
    try:
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        before = noted(issued)
        model(torch.ones(2, 4)).sum().backward()  # the gradients' all-reduce, from C++
        assert noted(issued) > before
        wait_until_completed(issued)
    finally:
        issued.remove()


@pytest.mark.skipif(
    not hasattr(PrefixStore, "clone"),
    reason="this torch cannot clone a store: the watchdog shares the group's, as documented",
)
def test_the_watchdog_has_a_store_connection_of_its_own_when_a_store_is_given() -> None:
    given = TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=20))
    init(backend="gloo", store=given, world_size=1, rank=0, hang_timeout=30)
    try:
        watchdog = _watchdog._watchdog
        assert watchdog is not None
        group_store = dist.distributed_c10d._get_default_store()
        assert watchdog.store is not group_store
        watchdog.store.set("helios-probe", "seen")  # the same store, under the same prefix
        assert group_store.get("helios-probe") == b"seen"
    finally:
        shutdown()


@pytest.mark.parametrize("failed", [False, True])
def test_a_hang_after_a_rank_failed_gets_no_roll_call(
    tmp_path: Path, failed: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    store = TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=20))
    watchdog = Watchdog(0, 1, store, "calls", 0.5, tmp_path, failure_key="failures")
    if failed:
        line = FIRST.replace(" failed first: ", " failed: ")
        Ledger(store, "failures").publish(rank=1, line=line, timestamp=1, kind="own")
    watchdog.current.op, watchdog.current.seq = "all_reduce", 3
    watchdog.current.since = time.monotonic() - 10  # waiting far past the hang timeout
    watchdog.tick()
    watchdog.tick()
    # The failure names the culprit, said once; without one, the rank calls the roll.
    assert store.check([f"{watchdog.round_key}/hung"]) is not failed
    told = capsys.readouterr().err.count("in all_reduce #3 issued from C++ for 10 s; " + FIRST)
    assert told == (1 if failed else 0)


@pytest.mark.parametrize("variable", ["HELIOS_FAILURE_REPORT", "HELIOS_AGREEMENT_CHECK"])
def test_a_bad_switch_is_refused_before_any_communication(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "maybe")

    with pytest.raises(RendezvousConfigError, match=f"{variable} must be 1 or 0"):
        init()
    assert not dist.is_initialized()


def test_a_rank_left_waiting_after_a_failure_still_answers_a_roll_call(tmp_path: Path) -> None:
    store = TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=20))
    watchdog = Watchdog(1, 2, store, "calls", 0.5, tmp_path, failure_key="failures")
    line = FIRST.replace(" failed first: ", " failed: ")
    Ledger(store, "failures").publish(rank=1, line=line, timestamp=1, kind="own")
    store.set(f"{watchdog.round_key}/hung", "0")  # rank 0 called the roll just before
    watchdog.current.op, watchdog.current.seq = "all_reduce", 3
    watchdog.current.since = time.monotonic() - 10
    watchdog.tick()
    assert store.check([f"{watchdog.round_key}/answer/1"])
