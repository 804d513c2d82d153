"""init's agreement check: every rank runs the same software, before the first collective."""

from __future__ import annotations

import shutil
import socket
import sys
import threading
import warnings
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from pathlib import Path

import pytest
from torch._C._distributed_c10d import HashStore

from helios_env import inspect_environment
from helios_env._differences import (
    differences,
    disagreement_message,
    ranks_on,
    settings_message,
    span,
)
from helios_env._fingerprint import Fingerprint
from helios_pg import AgreementWarning, ProcessGroupInitError
from helios_pg._setup._agreement import VARIABLE, enabled, own_fingerprint, settle
from helios_pg._setup._call import InitCall
from helios_pg._setup._exchange import exchange_hosts
from helios_pg._setup._nodes import prepare_nodes
from helios_pg._setup._store import EnvStore, Meeting
from tests.env.launchers import torchrun_env
from tests.support.procs import (
    base_env,
    free_port,
    launcher_variables,
    results,
    run_hand_started,
    run_processes,
)

WORKER = Path(__file__).parent / "workers" / "agreement.py"
HOSTS = ["node0", "node0", "node1", "node1"]
WAIT = timedelta(seconds=10)


def printed(items: dict[str, str]) -> Fingerprint:
    return Fingerprint(tuple(items.items()))


BASE = {"python": "3.11.7", "torch": "2.6.0", "helios-pg": "0.1.0", "script": "t.py sha256:aa"}


def by_rank(*changes: dict[str, str]) -> dict[int, Fingerprint]:
    """Fingerprints of ranks 0-3: ranks 0-1 have ``BASE``, ranks 2-3 ``BASE`` changed."""
    found = {0: printed(BASE), 1: printed(BASE)}
    for rank, change in zip((2, 3), changes or ({}, {}), strict=True):
        found[rank] = printed(BASE | change)
    return found


@pytest.mark.parametrize(
    ("ranks", "words"),
    [
        ([3], "rank 3"),
        ([1, 0], "ranks 0-1"),
        ([0, 1, 2, 5], "ranks 0-2, 5"),
        ([4, 2], "ranks 2, 4"),
    ],
)
def test_ranks_are_named_compactly(ranks: list[int], words: str) -> None:
    assert span(ranks) == words


def test_ranks_are_named_with_their_hosts() -> None:
    assert ranks_on([2, 3], HOSTS) == "ranks 2-3 (node1)"
    assert ranks_on([0, 2], HOSTS) == "ranks 0, 2 (node0, node1)"
    many = [f"n{i}" for i in range(6)]
    assert ranks_on(range(6), many) == "ranks 0-5 (n0, n1, n2 and 3 more hosts)"


def test_a_torch_version_that_differs_is_named_with_the_groups_odd_ones_first() -> None:
    found = differences(by_rank({"torch": "2.5.1"}, {"torch": "2.5.1"}))

    assert [difference.name for difference in found] == ["torch"]
    assert disagreement_message(found, HOSTS).startswith(
        "the ranks do not run the same software: "
        "ranks 2-3 (node1) run torch 2.5.1, ranks 0-1 (node0) torch 2.6.0. "
    )
    assert "check_agreement=False" in disagreement_message(found, HOSTS)
    assert "HELIOS_AGREEMENT_CHECK=0" in disagreement_message(found, HOSTS)


def test_python_differs_only_in_major_and_minor() -> None:
    assert differences(by_rank({"python": "3.11.9"}, {"python": "3.11.9"})) == []
    found = differences(by_rank({"python": "3.12.1"}, {}))
    assert "rank 2 (node1) runs Python 3.12.1, ranks 0-1, 3 (node0, node1) Python 3.11.7" in (
        disagreement_message(found, HOSTS)
    )


def test_the_same_script_at_another_path_agrees_and_another_digest_does_not() -> None:
    moved = {"script": "/elsewhere/t.py sha256:aa"}
    assert differences(by_rank(moved, moved)) == []
    changed = {"script": "t.py sha256:bb"}
    message = disagreement_message(differences(by_rank(changed, changed)), HOSTS)
    assert "ranks 2-3 (node1) run the main script t.py sha256:bb" in message


def test_a_setting_that_differs_is_a_difference_that_need_not_agree() -> None:
    found = differences(by_rank({"NCCL_SOCKET_IFNAME": "eth1"}, {"NCCL_SOCKET_IFNAME": "eth1"}))

    assert [(d.name, d.must_agree) for d in found] == [("NCCL_SOCKET_IFNAME", False)]
    assert settings_message(found, HOSTS).startswith(
        "the ranks' settings differ: "
        "NCCL_SOCKET_IFNAME: ranks 2-3 (node1) eth1, ranks 0-1 (node0) not set. "
    )


def test_the_check_is_on_unless_the_argument_or_the_variable_turns_it_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(VARIABLE, raising=False)
    assert enabled(True)
    assert not enabled(False)
    for off in ("0", "false", "No", " off "):
        monkeypatch.setenv(VARIABLE, off)
        assert not enabled(True)
    monkeypatch.setenv(VARIABLE, "1")
    assert enabled(True)


def test_this_ranks_fingerprint_has_torchs_build_the_backend_and_device_type() -> None:
    found = own_fingerprint("gloo", None)

    assert found.value("backend") == "gloo"
    assert found.value("device") == "cpu"
    assert found.value("cuda") != "not set"
    assert found.value("nccl") != "not set"


def exchange_and_settle(store: HashStore, rank: int, world_size: int, mine: Fingerprint) -> None:
    """What init does: the exchange, then the check where the digests differ."""
    roll = exchange_hosts(store, "t", rank, world_size, WAIT, digest=mine.digest, host=HOSTS[rank])
    if roll.table is not None:
        table = roll.table
        settle(store, "t", rank, hosts=table.hosts, digests=table.digests, mine=mine, wait=WAIT)


def settle_on_threads(fingerprints: dict[int, Fingerprint]) -> tuple[dict[int, object], list[str]]:
    """Exchange and settle as init does, one thread per rank on one store.

    Returns:
        What each rank's call returned or raised, and the warnings it gave.
    """
    store = HashStore()
    outcomes: dict[int, object] = {}

    def rank(index: int) -> None:
        try:
            exchange_and_settle(store, index, len(fingerprints), fingerprints[index])
        except ProcessGroupInitError as exc:
            outcomes[index] = exc
        else:
            outcomes[index] = None

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=rank, args=(i,)) for i in fingerprints]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    shown = [str(w.message) for w in caught if issubclass(w.category, AgreementWarning)]
    return outcomes, shown


def test_ranks_that_run_another_torch_all_raise_the_same_error() -> None:
    outcomes, shown = settle_on_threads(by_rank({"torch": "2.5.1"}, {"torch": "2.5.1"}))

    messages = {str(outcome) for outcome in outcomes.values()}
    assert len(outcomes) == 4
    assert all(isinstance(outcome, ProcessGroupInitError) for outcome in outcomes.values())
    assert len(messages) == 1
    assert "ranks 2-3 (node1) run torch 2.5.1, ranks 0-1 (node0) torch 2.6.0" in messages.pop()
    assert shown == []


def test_ranks_whose_settings_differ_start_with_one_warning() -> None:
    outcomes, shown = settle_on_threads(by_rank({}, {"NCCL_SOCKET_IFNAME": "eth1"}))

    assert outcomes == {0: None, 1: None, 2: None, 3: None}
    assert len(shown) == 1
    assert "NCCL_SOCKET_IFNAME: rank 3 (node1) eth1, ranks 0-2 (node0, node1) not set" in shown[0]


def test_ranks_that_agree_write_no_fingerprint() -> None:
    store, fingerprints = HashStore(), by_rank()

    def rank(index: int) -> None:
        exchange_and_settle(store, index, 4, fingerprints[index])

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    # The ranks' entries, their count and one key per host: no detail, no fingerprint.
    assert store.num_keys() == 1 + 1 + 2
    assert not store.check(["t/detail"])


def known_layout(agreement: Callable[[], Fingerprint] | None) -> tuple[int, list[object]]:
    """Two ranks on nccl under torchrun (the layout is known): what ``prepare_nodes`` does.

    Returns:
        The keys left in the store, and what each rank's call returned.
    """
    store = HashStore()
    env_store = EnvStore(store, "helios_pg/joined/test", 2)
    meeting = Meeting("127.0.0.1", 29500, "MASTER_ADDR", "MASTER_PORT", "a job")
    found: list[object] = [None, None]

    def rank(index: int) -> None:
        report = inspect_environment(torchrun_env(rank=index, world_size=2))
        call = InitCall.start(
            backend="nccl", world_size=2, rank=index, timeout=WAIT, meeting=meeting
        )
        found[index] = prepare_nodes(report, env_store, call, agreement)

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return store.num_keys(), found


def test_where_the_layout_is_known_the_check_makes_one_small_exchange() -> None:
    keys, layouts = known_layout(partial(own_fingerprint, "nccl", None))

    assert keys == 2 + 1
    assert layouts == [None, None]  # the environment's layout stands


def test_the_opt_out_skips_the_check_and_its_exchange() -> None:
    keys, layouts = known_layout(None)

    assert keys == 0
    assert layouts == [None, None]


def test_ranks_that_run_different_scripts_fail_at_init_unless_the_check_is_off(
    tmp_path: Path,
) -> None:
    copy = tmp_path / "agreement.py"
    shutil.copy(WORKER, copy)
    with copy.open("a") as script:
        script.write("THIS_COPY_ONLY = 1  # one line of code only this copy has\n")
    ports = [str(free_port()) for _ in range(3)]
    commands = []
    for rank, script_path in enumerate((WORKER, copy)):
        env = base_env(launcher_variables(rank, 2, ports[0]))
        env.update(HELIOS_TEST_PORT_2=ports[1], HELIOS_TEST_PORT_3=ports[2])
        commands.append(([sys.executable, str(script_path)], env))

    finished = run_processes(commands, limit=90)

    detail = "\n".join(item.describe() for item in finished)
    reports = sorted(results(finished), key=lambda report: int(report["rank"]))
    assert [report["rank"] for report in reports] == [0, 1], detail
    host = socket.gethostname()
    for path in ("env", "init_method"):
        errors = {report[path]["error"] for report in reports}
        assert len(errors) == 1, detail
        message = errors.pop()
        assert f"rank 1 ({host}) runs the main script {copy} sha256:" in message
        assert f"rank 0 ({host}) the main script {WORKER} sha256:" in message
        assert all(not report[path]["group"] for report in reports)
        assert all(report[path]["seconds"] < 10 for report in reports)
    assert [report["off"] for report in reports] == [{"total": 2.0}] * 2, detail


def test_one_rank_that_turns_the_check_off_under_env_is_named_and_the_job_goes_on() -> None:
    worker = Path(__file__).parent / "workers" / "opt_out.py"
    finished = run_hand_started(worker, 2, extra_env={"HELIOS_TEST_PG_TIMEOUT": "20"}, limit=60)
    detail = "\n".join(item.describe() for item in finished)
    assert sorted((r["rank"], r.get("total")) for r in results(finished)) == [
        (0, 2.0),
        (1, 2.0),
    ], detail
    assert "AgreementWarning" in finished[0].stderr, detail
    assert "rank 1" in finished[0].stderr.split("AgreementWarning", 1)[1], detail
