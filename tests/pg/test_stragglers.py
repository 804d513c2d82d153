"""The straggler report: who the others waited for, judged from every rank's waits."""

from __future__ import annotations

import random
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

import helios_pg
from helios_pg import RendezvousConfigError, init, shutdown
from helios_pg._arrivals import MISSING, SIZE, Arrivals, op_code
from helios_pg._reports import STRAGGLERS, close_tap, open_tap
from helios_pg._reports._issued import hooks_supported
from helios_pg._stragglers import report_seconds
from helios_pg._stragglers._judge import MIN_COST, judge
from helios_pg._stragglers._rounds import SAMPLE, _sample, decode, encode
from tests.pg.torchrun_jobs import run_jobs
from tests.support.procs import Finished, free_port, results

WORKER = Path(__file__).parent / "workers" / "stragglers.py"
HOOKS = hooks_supported()
NO_HOOKS = "this torch's process groups take no hooks: DDP's all-reduces are not seen"
ALL_REDUCE = op_code("all_reduce")
LINE = re.compile(
    r"helios straggler: (rank \d+ \(\S+\)|node \S+ \(ranks? [\d, -]+\)) arrived last at \d+% of "
    r"the collectives at which ranks waited \([\d,]+ in the last [\d.]+ s\); the other ranks "
    r"waited [\d.]+ (ms|us|s) each time for it \(\d+% of their time\)"
)


def waits_of(
    late: dict[int, float], world_size: int, count: int = 200, *, base: float = 0.005, seed: int = 0
) -> dict[int, list[int]]:
    """Each rank's waits in microseconds, where rank r arrives ``late[r]`` seconds late.

    Every collective ends when the last rank arrives; arrivals jitter by up to 0.2 ms.
    """
    rng = random.Random(seed)
    waits: dict[int, list[int]] = {rank: [] for rank in range(world_size)}
    for _ in range(count):
        arrive = [late.get(rank, 0.0) + rng.uniform(0, 0.0002) for rank in range(world_size)]
        end = max(arrive) + base
        for rank in range(world_size):
            waits[rank].append(int((end - arrive[rank]) * 1e6))
    return waits


def ops_of(waits: dict[int, list[int]]) -> dict[int, bytes]:
    return {rank: bytes([ALL_REDUCE]) * len(values) for rank, values in waits.items()}


def judged(
    waits: dict[int, list[int]], hosts: list[str], *, period: float = 2.0, collectives: int = 200
) -> Any:
    return judge(waits, ops_of(waits), hosts, collectives=collectives, period=period)


def test_a_rank_that_arrives_last_at_every_collective_is_named() -> None:
    report = judged(waits_of({1: 0.008}, 3), ["node1", "node2", "node3"])

    assert report.straggler is not None
    assert report.straggler.ranks == (1,)
    assert report.straggler.host == "node2"
    assert not report.straggler.node
    assert report.straggler.last == 1.0
    # The others waited 8 ms at each of 200 collectives in 2 s: 80% of their time.
    assert report.straggler.wait == pytest.approx(0.008, abs=0.0003)
    assert report.straggler.cost == pytest.approx(0.8, abs=0.03)
    assert report.line.startswith(
        "helios straggler: rank 1 (node2) arrived last at 100% of the collectives at which ranks "
        "waited (200 in the last 2.0 s); the other ranks waited 8."
    )
    assert LINE.fullmatch(report.line), report.line
    assert report.last[1] == 1.0
    assert report.compared == 200


def test_ranks_that_arrive_together_are_not_named() -> None:
    report = judged(waits_of({}, 4), ["a", "a", "b", "b"])

    assert report.straggler is None
    assert report.line == ""
    assert sum(report.waited) < MIN_COST


def test_a_rank_that_costs_the_others_little_is_not_named() -> None:
    # Last every time, by 0.2 ms a 50 ms collective: 0.4% of the others' time.
    report = judged(waits_of({2: 0.0002}, 3), ["a", "b", "c"], period=10.0)

    assert report.straggler is None
    assert report.last[2] > 0.5


def test_a_rank_last_at_a_few_collectives_with_long_waits_is_not_named() -> None:
    # Five of nine, 100 ms each: as likely by chance as not (a slow link, say, where every
    # rank waits in the collective itself and who finishes first varies).
    waits: dict[int, list[int]] = {rank: [] for rank in range(3)}
    for index in range(9):
        late = 1 if index < 5 else (0, 2)[index % 2]
        for rank, values in waits_of({late: 0.1}, 3, 1, seed=index).items():
            waits[rank] += values

    report = judged(waits, ["node1", "node2", "node3"], period=2.0, collectives=9)

    assert report.last[1] == pytest.approx(5 / 9)
    assert report.waited[1] > MIN_COST
    assert report.straggler is None


def test_a_node_whose_ranks_are_late_together_is_named_not_one_of_its_ranks() -> None:
    hosts = ["node1", "node1", "node2", "node2"]
    # Both ranks of node2 are 5 ms late, in turn the later of the two.
    waits = {rank: [] for rank in range(4)}  # type: dict[int, list[int]]
    for index in range(200):
        late = {2: 0.005 + 0.001 * (index % 2), 3: 0.005 + 0.001 * (1 - index % 2)}
        for rank, values in waits_of(late, 4, 1, seed=index).items():
            waits[rank] += values

    report = judged(waits, hosts)

    assert report.straggler is not None
    assert report.straggler.node
    assert report.straggler.ranks == (2, 3)
    assert report.straggler.host == "node2"
    assert report.line.startswith("helios straggler: node node2 (ranks 2-3) arrived last at 100%")
    assert LINE.fullmatch(report.line), report.line


def test_one_late_rank_of_a_node_is_named_as_a_rank() -> None:
    report = judged(waits_of({3: 0.004}, 4), ["node1", "node1", "node2", "node2"])

    assert report.straggler is not None
    assert (report.straggler.ranks, report.straggler.node) == ((3,), False)


def test_collectives_whose_operations_differ_between_ranks_are_not_judged() -> None:
    waits = waits_of({1: 0.008}, 3)
    ops = ops_of(waits)
    ops[1] = bytes([op_code("broadcast")]) * 200  # rank 1's k-th calls are other calls

    report = judge(waits, ops, ["a", "b", "c"], collectives=200, period=2.0)

    assert (report.compared, report.straggler) == (0, None)


def test_waits_a_rank_does_not_know_leave_their_collectives_out() -> None:
    waits = waits_of({1: 0.008}, 3)
    waits[0][:50] = [MISSING] * 50

    report = judged(waits, ["a", "b", "c"])

    assert report.compared == 150
    assert report.straggler is not None
    assert report.straggler.ranks == (1,)


def test_nobody_is_named_while_a_rank_did_not_answer() -> None:
    # The rank that did not answer may be the one the others waited for: here rank 3 is
    # 20 ms late and rank 2 2 ms; without rank 3, rank 2 would look like the straggler.
    waits = waits_of({3: 0.020, 2: 0.002}, 4)
    del waits[3]

    report = judged(waits, ["a", "b", "c", ""])

    assert report.missing == (3,)
    assert (report.straggler, report.line, report.compared) == (None, "", 0)


def test_the_sample_is_the_same_on_every_rank_and_follows_no_pattern_of_the_steps() -> None:
    sample = _sample(1000, 1512, seed=7)

    assert sample == _sample(1000, 1512, seed=7)
    assert len(sample) == SAMPLE
    assert sample == sorted(set(sample))
    assert {number % 2 for number in sample} == {0, 1}  # steps of [A, B]: both are seen
    assert _sample(10, 20, seed=7) == list(range(10, 20))


def test_an_answer_reads_back_as_it_was_sent() -> None:
    arrivals = Arrivals()
    arrivals.add(ALL_REDUCE, 10.0, 10.25)
    arrivals.add(op_code("barrier"), 11.0, 11.0005)
    pending = arrivals.issue(ALL_REDUCE, 12.0)
    waits, ops = arrivals.waits(range(4))

    assert decode(encode("node7", waits, ops)) == (
        "node7",
        bytes([ALL_REDUCE, op_code("barrier"), 0, 0]),
        [250000, 500, MISSING, MISSING],
    )
    arrivals.done(pending, 12.001)
    assert arrivals.waits(range(2, 3))[0].tolist() == [1000]
    assert arrivals.span(0, 3) == pytest.approx(2.001)
    assert decode("node7\tnot base64!") is None


def test_the_ring_forgets_the_oldest_collectives() -> None:
    arrivals = Arrivals()
    for number in range(SIZE + 10):
        arrivals.add(ALL_REDUCE, float(number), number + 0.001)

    waits, _ = arrivals.waits(range(0, SIZE + 10, SIZE // 2))

    assert waits.tolist() == [MISSING, 1000, 1000]
    assert not arrivals.known(5)
    assert arrivals.known(SIZE + 9)


@pytest.mark.parametrize(
    ("argument", "environ", "expected"),
    [
        (None, {}, None),
        (None, {"HELIOS_STRAGGLER_REPORT": "30"}, 30.0),
        (None, {"HELIOS_STRAGGLER_REPORT": "off"}, None),
        (None, {"HELIOS_STRAGGLER_REPORT": "0"}, None),
        (5, {"HELIOS_STRAGGLER_REPORT": "30"}, 5.0),
        (timedelta(minutes=1), {}, 60.0),
    ],
)
def test_the_period_comes_from_init_else_the_variable(
    argument: float | timedelta | None, environ: dict[str, str], expected: float | None
) -> None:
    assert report_seconds(argument, environ) == expected


@pytest.mark.parametrize(
    ("argument", "environ", "words"),
    [
        (0.5, {}, "straggler_report must be a finite number of seconds, at least 1 "),
        (None, {"HELIOS_STRAGGLER_REPORT": "soon"}, "HELIOS_STRAGGLER_REPORT must be a number"),
        (None, {"HELIOS_STRAGGLER_REPORT": "0.1"}, "got '0.1'; pass, e.g., 30, or turn it off"),
        (None, {"HELIOS_STRAGGLER_REPORT": "-5"}, "HELIOS_STRAGGLER_REPORT must be a finite"),
        (-3, {}, "leave it out (None) to turn the report off"),
    ],
)
def test_init_refuses_a_period_it_cannot_keep_before_anything_is_sent(
    argument: float | None, environ: dict[str, str], words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(RendezvousConfigError, match=re.escape(words)):
        init(straggler_report=argument)
    assert not dist.is_initialized()


def test_the_tap_notes_the_default_groups_collectives_while_the_report_listens() -> None:
    originals = dist.all_reduce
    init()
    arrivals = Arrivals()
    try:
        other = dist.new_group([0])
        assert isinstance(other, dist.ProcessGroup)
        open_tap(STRAGGLERS, arrivals)
        dist.all_reduce(torch.ones(2))
        dist.all_reduce(torch.ones(2), group=other)  # another group: not the job's pace
        dist.all_reduce(torch.ones(2), dist.ReduceOp.SUM, other)  # so is it, by position
        dist.broadcast(torch.ones(2), 0)  # rooted: the others go once the root reached them
        dist.barrier()
        work = dist.all_reduce(torch.ones(2), async_op=True)
        assert work is not None
        work.wait()
        positional = dist.all_reduce(torch.ones(2), dist.ReduceOp.SUM, None, True)  # async_op
        assert positional is not None
        positional.wait()
        close_tap(STRAGGLERS)
        assert dist.all_reduce is originals
        dist.all_reduce(torch.ones(2))
    finally:
        close_tap(STRAGGLERS)
        shutdown()

    noted = 4 if HOOKS else 2  # an async call's completion is seen through the hook
    assert arrivals.count == noted
    waits, ops = arrivals.waits(range(noted))
    assert MISSING not in waits.tolist()
    assert ops == bytes([ALL_REDUCE, op_code("barrier"), *[ALL_REDUCE] * (noted - 2)])


def test_the_watchdog_and_the_report_share_one_set_of_wrappers() -> None:
    originals = dist.all_reduce
    init(hang_timeout=30)
    arrivals = Arrivals()
    try:
        wrapped = dist.all_reduce
        open_tap(STRAGGLERS, arrivals)
        assert dist.all_reduce is wrapped
        close_tap(STRAGGLERS)
        assert dist.all_reduce is wrapped  # the watchdog still listens
        dist.all_reduce(torch.ones(1))
        assert arrivals.count == 0
    finally:
        shutdown()
    assert dist.all_reduce is originals


def test_a_group_made_again_behind_helioss_back_gets_the_wrappers_and_hooks_anew() -> None:
    originals = dist.all_reduce
    init(hang_timeout=30)
    try:
        open_tap(STRAGGLERS, Arrivals())
        dist.destroy_process_group()  # the program's own: shutdown is not called
        init(hang_timeout=30)  # the watchdog closes and opens the tap on the new group
        arrivals = Arrivals()
        open_tap(STRAGGLERS, arrivals)
        dist.all_reduce(torch.ones(1))
        work = dist.all_reduce(torch.ones(1), async_op=True)
        assert work is not None
        work.wait()
        assert arrivals.count == (2 if HOOKS else 1)
    finally:
        close_tap(STRAGGLERS)
        shutdown()
    assert dist.all_reduce is originals


def test_a_world_of_one_has_nobody_to_wait_for_and_no_report() -> None:
    originals = dist.all_reduce
    init(straggler_report=1)
    try:
        assert dist.all_reduce is originals
        assert helios_pg.straggler_report() is None
    finally:
        shutdown()


CASES = {
    "ddp": {"HELIOS_TEST_LOOP": "ddp", "HELIOS_TEST_SLOWED_RANKS": "1"},
    "raw": {"HELIOS_TEST_LOOP": "raw", "HELIOS_TEST_SLOWED_RANKS": "2"},
    "tcp": {"HELIOS_TEST_LOOP": "raw", "HELIOS_TEST_SLOWED_RANKS": "1"},
    "none": {"HELIOS_TEST_LOOP": "raw"},
}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Finished, Path]]:
    def env_for(case: str, logs: Path) -> dict[str, str]:
        del logs
        # init_method="tcp://...": the report's rounds go through a clone of that store.
        port = {"HELIOS_TEST_TCP_PORT": str(free_port())} if case == "tcp" else {}
        return {
            **CASES[case],
            **port,
            "HELIOS_STRAGGLER_REPORT": "1",
            "HELIOS_TEST_SLOWED_BY": "0.5",
            "HELIOS_TEST_STEP": "0.03",
            "HELIOS_TEST_REPORTS": "4",
            "HELIOS_TEST_RUN": "60",
            "HELIOS_TEST_PG_TIMEOUT": "60",
        }

    # Three jobs at once, the tcp job after them: the job at one pace shares two cores
    # with no more processes than that (with a fourth job beside it, a starved rank of
    # it was named now and then).
    modes = [case for case in CASES if case != "tcp" and (HOOKS or case != "ddp")]
    found = run_jobs(WORKER, modes, env_for, tmp_path_factory, limit=150)
    return found | run_jobs(WORKER, ["tcp"], env_for, tmp_path_factory, limit=150)


def rank_zero(finished: Finished) -> dict[str, Any]:
    assert finished.returncode == 0, finished.describe()
    (found,) = [item for item in results(finished) if item["rank"] == 0]
    return found


# Whole jobs, whose ranks run at different paces: with the fault scenarios, at both ends
# of the supported range (-m faults), not in the default run.
@pytest.mark.faults
@pytest.mark.parametrize(
    ("case", "named"),
    [
        pytest.param("ddp", 1, marks=pytest.mark.skipif(not HOOKS, reason=NO_HOOKS)),
        ("raw", 2),
        ("tcp", 1),
    ],
)
def test_a_slowed_rank_is_named_by_rank_zero_with_nothing_added_to_the_loop(
    jobs: dict[str, tuple[Finished, Path]], case: str, named: int
) -> None:
    finished = jobs[case][0]
    reports = rank_zero(finished)["reports"]
    lines = [line for line in finished.stderr.splitlines() if "helios straggler:" in line]

    assert len(reports) == 4, finished.describe()
    # The first period holds the ranks' start: judged from the second on.
    for report in reports[1:]:
        assert report["straggler"] is not None, (report, finished.describe())
        assert report["straggler"]["ranks"] == [named], (report, finished.describe())
        assert report["line"] in finished.stderr
        assert report["hosts"][named]
    assert lines, finished.describe()
    assert all(LINE.search(line) for line in lines), lines
    assert all(f"rank {named} (" in line for line in lines), lines


@pytest.mark.faults
def test_ranks_at_the_same_pace_get_no_line(jobs: dict[str, tuple[Finished, Path]]) -> None:
    finished = jobs["none"][0]
    reports = rank_zero(finished)["reports"]

    assert len(reports) == 4, finished.describe()
    assert all(report["straggler"] is None for report in reports), reports
    assert all(report["compared"] > 0 for report in reports[1:]), reports
    assert "helios straggler:" not in finished.stderr
