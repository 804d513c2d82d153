"""init, shutdown, process_group, init_dist and local_device in this (pytest) process.

Every group here has one process, so these run in the pytest process; groups of
several processes are in test_processes.py.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore, TCPStore

import helios_pg
import helios_pg._reports._watch
from helios_env import DistributedInfo, LauncherEnvError, get_dist_info
from helios_pg import (
    ProcessGroupInitError,
    RendezvousConfigError,
    init,
    init_dist,
    is_dist_active,
    local_device,
    process_group,
    shutdown,
    shutdown_dist,
)
from helios_pg._helios_ml import DEFAULT_MASTER_ADDR, DEFAULT_MASTER_PORT
from tests.support.fault_records import RecordProperty, error_outcome, record_fault

NO_CUDA = pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks what happens when CUDA is not available"
)
TIMEOUT = timedelta(seconds=10)


@pytest.fixture
def rank_zero_of_two_on_a_busy_port(monkeypatch: pytest.MonkeyPatch, busy_port: int) -> None:
    """Hand-set variables of rank 0 of 2, whose rendezvous port someone else holds."""
    for name, value in {
        "RANK": "0",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(busy_port),
    }.items():
        monkeypatch.setenv(name, value)


def rank_one_of_two_at(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    """Hand-set variables of rank 1 of 2, whose rank 0 would serve the store at ``port``."""
    for name, value in {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }.items():
        monkeypatch.setenv(name, value)


def summed(value: float) -> float:
    tensor = torch.tensor([value], device=local_device())
    dist.all_reduce(tensor)
    return float(tensor.item())


# --- backend and the world-size-one path -------------------------------------------


@NO_CUDA
def test_default_backend_is_gloo_without_cuda() -> None:
    assert helios_pg.default_backend() == "gloo"


@NO_CUDA
def test_a_plain_process_runs_gloo_by_default_without_cuda() -> None:
    init(timeout=TIMEOUT)
    try:
        assert dist.get_backend() == "gloo"
    finally:
        shutdown()


@NO_CUDA
def test_an_explicit_gloo_backend_is_honoured_in_a_world_of_one() -> None:
    init(backend="gloo", timeout=TIMEOUT)
    try:
        assert dist.get_backend() == "gloo"
        assert dist.get_world_size() == 1
    finally:
        shutdown()


@pytest.mark.parametrize("init_method", [None, "env://", " ENV:// "])
def test_init_runs_a_plain_process_as_a_world_of_one_without_master_address(
    init_method: str | None,
) -> None:
    # env:// names the variables helios reads itself: torch's own would need MASTER_ADDR.
    assert "MASTER_ADDR" not in os.environ
    assert "MASTER_PORT" not in os.environ
    before = dict(os.environ)

    init(timeout=TIMEOUT, init_method=init_method)
    try:
        assert dist.get_world_size() == 1
        assert dist.get_rank() == 0
        assert get_dist_info() == DistributedInfo()
        assert dict(os.environ) == before
    finally:
        shutdown()


@pytest.mark.parametrize("timeout", [20, 2.5, timedelta(seconds=20)])
def test_every_timeout_takes_seconds_or_a_timedelta(
    timeout: float | timedelta, monkeypatch: pytest.MonkeyPatch
) -> None:
    given: list[object] = []
    started: list[object] = []
    create, start = dist.init_process_group, helios_pg._reports._watch.start_watchdog

    def init_process_group(**kwargs: Any) -> None:
        given.append(kwargs["timeout"])
        create(**kwargs)

    def start_watchdog(**kwargs: Any) -> Any:
        started.append(kwargs["timeout"])
        return start(**kwargs)

    monkeypatch.setattr(dist, "init_process_group", init_process_group)
    monkeypatch.setattr("helios_pg._reports._watch.start_watchdog", start_watchdog)
    with process_group(timeout=timeout, hang_timeout=timeout):
        pass
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    assert given == [timedelta(seconds=seconds)]
    assert started == [seconds]


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"timeout": 0}, RendezvousConfigError, "init's timeout must be a positive, finite"),
        ({"timeout": -5.0}, RendezvousConfigError, r"got -5.0; pass, e.g., 60 or timedelta"),
        ({"timeout": timedelta(0)}, RendezvousConfigError, r"got datetime.timedelta\(0\)"),
        ({"timeout": float("inf")}, RendezvousConfigError, "positive, finite number"),
        ({"timeout": "20"}, TypeError, "init's timeout must be seconds .* got str: '20'"),
        ({"hang_timeout": timedelta(seconds=-1)}, RendezvousConfigError, "hang_timeout must"),
        ({"hang_timeout": "30"}, TypeError, "hang_timeout must be seconds .* got str: '30'"),
        ({"timeout": 1e300}, RendezvousConfigError, "timeout must be a positive, finite number"),
    ],
)
def test_a_timeout_that_is_not_positive_is_named_before_anything_starts(
    arguments: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        init(**arguments)  # type: ignore[arg-type]
    assert not dist.is_initialized()


def test_a_world_of_one_keeps_ordinary_collective_and_work_behaviour() -> None:
    init(timeout=TIMEOUT)
    try:
        tensor = torch.arange(4, dtype=torch.float32, device=local_device())
        work = dist.all_reduce(tensor, async_op=True)
        assert work is not None
        assert work.wait()
        assert work.is_completed()
        future = work.get_future()
        assert future.done()
        assert [t.tolist() for t in future.value()] == [[0.0, 1.0, 2.0, 3.0]]
        assert [t.tolist() for t in work.result()] == [[0.0, 1.0, 2.0, 3.0]]
        assert tensor.tolist() == [0.0, 1.0, 2.0, 3.0]
        gathered = [torch.zeros(2, device=local_device())]
        dist.all_gather(gathered, torch.tensor([5.0, 6.0], device=local_device()))
        assert gathered[0].tolist() == [5.0, 6.0]
        dist.barrier()
    finally:
        shutdown()


def test_a_world_of_one_never_opens_the_rendezvous_port(
    monkeypatch: pytest.MonkeyPatch, busy_port: int
) -> None:
    # Left over from an earlier run: a rendezvous store would have to bind this port,
    # which this test holds, and fail with EADDRINUSE.
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(busy_port))

    init(timeout=TIMEOUT)
    try:
        assert dist.get_world_size() == 1
        assert summed(3.0) == 3.0
    finally:
        shutdown()


def test_init_dist_for_one_hand_started_process_needs_no_port() -> None:
    before = dict(os.environ)

    init_dist(backend="gloo", rank=0, world_size=1)
    try:
        assert is_dist_active()
        assert dist.get_world_size() == 1
        assert dict(os.environ) == before
    finally:
        shutdown_dist()


@NO_CUDA
def test_init_accepts_the_cpu_as_device_id_without_cuda() -> None:
    init(device_id=torch.device("cpu"), timeout=TIMEOUT)
    try:
        assert dist.get_world_size() == 1
    finally:
        shutdown()


# --- forwarding to torch.distributed.init_process_group ------------------------------


def test_init_uses_the_store_it_is_given() -> None:
    store = HashStore()
    assert store.num_keys() == 0

    init(store=store, world_size=1, rank=0, timeout=TIMEOUT)
    try:
        # torch registers the new group in the store; a store of init's own would
        # leave this one empty.
        assert store.num_keys() > 0
        assert summed(2.0) == 2.0
    finally:
        shutdown()


def test_init_uses_the_file_init_method_it_is_given(tmp_path: Path) -> None:
    rendezvous = tmp_path / "rendezvous"

    init(init_method=f"file://{rendezvous}", world_size=1, rank=0, timeout=TIMEOUT)
    try:
        # A FileStore writes the group's keys to this file.
        assert rendezvous.stat().st_size > 0
        assert dist.get_world_size() == 1
    finally:
        shutdown()


# --- idempotency --------------------------------------------------------------------


def test_init_on_a_live_group_keeps_it() -> None:
    init(timeout=TIMEOUT)
    try:
        world = dist.group.WORLD
        init(timeout=TIMEOUT)
        init(backend="gloo", world_size=1, rank=0)
        assert dist.group.WORLD is world
        assert dist.get_backend() == helios_pg.default_backend()
        assert summed(1.0) == 1.0
    finally:
        shutdown()


def test_init_after_shutdown_creates_a_new_group() -> None:
    init(timeout=TIMEOUT)
    first = dist.group.WORLD
    shutdown()

    init(timeout=TIMEOUT)
    try:
        assert dist.is_initialized()
        assert dist.group.WORLD is not first
        assert summed(4.0) == 4.0
    finally:
        shutdown()


def test_shutdown_destroys_the_default_group() -> None:
    init(timeout=TIMEOUT)

    shutdown()

    assert not dist.is_initialized()
    assert not is_dist_active()


def test_shutdown_before_init_is_a_noop() -> None:
    shutdown()

    assert not dist.is_initialized()


def test_shutdown_twice_is_a_noop() -> None:
    init(timeout=TIMEOUT)
    shutdown()

    shutdown()

    assert not dist.is_initialized()


def test_shutdown_dist_before_init_and_twice_is_a_noop() -> None:
    shutdown_dist()
    init_dist(backend="gloo", rank=0, world_size=1)
    shutdown_dist()

    shutdown_dist()

    assert not is_dist_active()


@pytest.mark.usefixtures("rank_zero_of_two_on_a_busy_port")
def test_shutdown_after_a_failed_init_is_a_noop() -> None:
    with pytest.raises(ProcessGroupInitError):
        init(backend="gloo", timeout=timedelta(seconds=3))

    shutdown()
    shutdown_dist()

    assert not dist.is_initialized()


def test_shutdown_of_a_subgroup_keeps_the_default_group() -> None:
    init(timeout=TIMEOUT)
    try:
        subgroup = dist.new_group([0])
        assert isinstance(subgroup, dist.ProcessGroup)
        shutdown(subgroup)
        shutdown(subgroup)
        assert dist.is_initialized()
        assert summed(5.0) == 5.0
    finally:
        shutdown()
    shutdown(subgroup)


def test_is_dist_active_follows_the_default_group() -> None:
    assert not is_dist_active()
    init(timeout=TIMEOUT)
    try:
        assert is_dist_active()
    finally:
        shutdown()
    assert not is_dist_active()


def test_without_torch_distributed_shutdown_is_a_noop_and_init_a_runtime_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A torch build without distributed support has is_available() False and lacks
    # the rest of the API.
    with monkeypatch.context() as patch:
        patch.setattr(dist, "is_available", lambda: False)
        for name in ("is_initialized", "init_process_group", "destroy_process_group"):
            patch.delattr(dist, name)

        shutdown()
        shutdown_dist()
        assert is_dist_active() is False
        with pytest.raises(ProcessGroupInitError, match="not available") as caught:
            init()
        assert isinstance(caught.value, RuntimeError)


# --- the process_group context manager ---------------------------------------------


def test_process_group_yields_the_info_of_the_live_group() -> None:
    with process_group(timeout=TIMEOUT) as info:
        assert dist.is_initialized()
        assert info == DistributedInfo(local_rank=0, rank=0, local_world_size=1, world_size=1)
        assert summed(6.0) == 6.0

    assert not dist.is_initialized()


def test_process_group_destroys_the_group_when_the_block_raises() -> None:
    failure = KeyError("raised inside the block")

    with pytest.raises(KeyError) as caught, process_group(timeout=TIMEOUT):
        raise failure

    assert caught.value is failure
    assert not dist.is_initialized()


def test_process_group_leaves_a_group_it_did_not_create() -> None:
    init(timeout=TIMEOUT)
    try:
        world = dist.group.WORLD
        with process_group(timeout=TIMEOUT):
            pass
        assert dist.is_initialized()
        assert dist.group.WORLD is world
    finally:
        shutdown()


@pytest.mark.usefixtures("rank_zero_of_two_on_a_busy_port")
def test_process_group_raises_what_init_raises_and_leaves_no_group() -> None:
    with (
        pytest.raises(ProcessGroupInitError),
        process_group(backend="gloo", timeout=timedelta(seconds=3)),
    ):
        pytest.fail("the block ran without a group")

    assert not dist.is_initialized()


# --- errors from torch --------------------------------------------------------------


@pytest.mark.usefixtures("rank_zero_of_two_on_a_busy_port")
def test_a_busy_master_port_is_a_clear_error_naming_the_port(
    busy_port: int, record_property: RecordProperty
) -> None:
    start = time.monotonic()
    with pytest.raises(ProcessGroupInitError) as caught:
        init(backend="gloo", timeout=timedelta(seconds=3))
    record_fault(
        record_property,
        kind="busy port",
        scenario="busy-master-port",
        case="MASTER_PORT already in use: rank 0 of 2",
        claim="ProcessGroupInitError (a RuntimeError) naming the port, before the 3 s timeout",
        ranks=[error_outcome(caught.value, time.monotonic() - start)],
    )

    assert isinstance(caught.value, RuntimeError)
    assert f"MASTER_PORT={busy_port}" in str(caught.value)
    assert "already in use" in str(caught.value)
    assert caught.value.__cause__ is not None
    assert not dist.is_initialized()


@pytest.mark.long
def test_a_port_held_by_a_program_that_never_answers_fails_rank_1_within_the_timeout(
    monkeypatch: pytest.MonkeyPatch, busy_port: int
) -> None:
    # It accepts the connection (the kernel does, for its listening socket) and says
    # nothing: torch's client would wait for its answer forever.
    rank_one_of_two_at(monkeypatch, busy_port)

    with pytest.raises(ProcessGroupInitError) as caught:
        init(backend="gloo", timeout=timedelta(seconds=1))

    message = str(caught.value)
    said = f"rank 1 of 2 got no answer from a rendezvous store at 127.0.0.1:{busy_port}"
    assert f"{said} (MASTER_PORT) within 7 s: rank 0, which hosts it" in message
    assert "another program holds that port and accepts connections" in message
    assert "set MASTER_PORT to a port free on rank 0's host" in message
    assert not dist.is_initialized()


def test_a_port_held_by_another_programs_store_is_named_within_the_timeout(
    monkeypatch: pytest.MonkeyPatch, unused_port: int
) -> None:
    theirs = TCPStore("127.0.0.1", unused_port, None, True, wait_for_workers=False)
    rank_one_of_two_at(monkeypatch, unused_port)

    with pytest.raises(ProcessGroupInitError) as caught:
        init(backend="gloo", timeout=timedelta(seconds=1))

    message = str(caught.value)
    assert f"reached a store at 127.0.0.1:{unused_port}, but no job's rank 0 said" in message
    assert "another program's store holds that port" in message
    assert not dist.is_initialized()
    del theirs


def test_a_rendezvous_that_never_answers_is_a_runtime_error_naming_rank_and_address(
    monkeypatch: pytest.MonkeyPatch, unused_port: int
) -> None:
    for name, value in {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(unused_port),
    }.items():
        monkeypatch.setenv(name, value)

    with pytest.raises(ProcessGroupInitError) as caught:
        init(backend="gloo", timeout=timedelta(seconds=1))

    assert isinstance(caught.value, RuntimeError)
    message = str(caught.value)
    assert "rank 1 of 2" in message
    assert f"rank 0, which hosts the rendezvous store at 127.0.0.1:{unused_port}" in message
    assert caught.value.__cause__ is not None
    assert not dist.is_initialized()


def test_an_init_method_torch_has_no_handler_for_is_named_once() -> None:
    with pytest.raises(ProcessGroupInitError) as caught:
        init(backend="gloo", init_method="bogus://x", world_size=1, rank=0)

    message = str(caught.value)
    assert "through the rendezvous of init_method='bogus://x'" in message
    assert "rendezvous the rendezvous" not in message
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert not dist.is_initialized()


def test_an_init_method_torch_refuses_is_a_rendezvous_config_error() -> None:
    with pytest.raises(RendezvousConfigError) as caught:
        init(backend="gloo", init_method="tcp://127.0.0.1", world_size=1, rank=0)

    assert isinstance(caught.value, ValueError)
    assert "init_method='tcp://127.0.0.1'" in str(caught.value)
    assert "port number missing" in str(caught.value)
    assert isinstance(caught.value.__cause__, ValueError)
    assert not dist.is_initialized()


# --- init_dist for hand-started processes -------------------------------------------


def test_init_dist_keeps_a_preset_master_address_and_port(
    monkeypatch: pytest.MonkeyPatch, busy_port: int
) -> None:
    # As mp.spawn users do: only MASTER_* preset. The port is held by this test, so
    # rank 0 fails to serve the store there, which shows that it was the port used.
    monkeypatch.setenv("MASTER_ADDR", "localhost")
    monkeypatch.setenv("MASTER_PORT", str(busy_port))

    with pytest.raises(ProcessGroupInitError, match=f"MASTER_PORT={busy_port}"):
        init_dist(backend="gloo", rank=0, world_size=2)

    assert os.environ["MASTER_ADDR"] == "localhost"
    assert os.environ["MASTER_PORT"] == str(busy_port)
    assert not dist.is_initialized()


def test_init_dist_describes_a_hand_started_process_with_defaults_only_when_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A LOCAL_RANK of 5 in a world of 2 is invalid, so init stops before the network
    # (it would otherwise go to the default port) and the variables can be read.
    monkeypatch.setenv("LOCAL_RANK", "5")

    with pytest.raises(LauncherEnvError, match="LOCAL_RANK"):
        init_dist(backend="gloo", rank=1, world_size=2)

    assert os.environ["MASTER_ADDR"] == DEFAULT_MASTER_ADDR
    assert os.environ["MASTER_PORT"] == DEFAULT_MASTER_PORT
    assert os.environ["RANK"] == "1"
    assert os.environ["WORLD_SIZE"] == "2"
    assert os.environ["LOCAL_RANK"] == "5"
    assert not dist.is_initialized()


# --- local_device -------------------------------------------------------------------


@NO_CUDA
def test_local_device_is_the_cpu_without_cuda_before_init() -> None:
    assert local_device() == torch.device("cpu")


@NO_CUDA
def test_local_device_is_the_cpu_without_cuda_in_a_group() -> None:
    init(timeout=TIMEOUT)
    try:
        assert local_device() == torch.device("cpu")
    finally:
        shutdown()
