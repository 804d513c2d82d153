"""Mistakes that init and init_dist report before any network activity.

Each test sets up a process that would otherwise try to reach a rendezvous: rank 1 of
two, pointed at a loopback port on which nothing listens, with a 5 s group timeout.
Had ``init`` gone to the network first, it would wait the whole timeout and then fail
with a connection error; these tests require the specific error in well under a second
and no process group left behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from helios_env import LauncherEnvError
from helios_pg import (
    BackendUnavailableError,
    DeviceBindingError,
    RendezvousConfigError,
    init,
    init_dist,
)
from tests.support.fault_records import RecordProperty, error_outcome, record_fault

NO_CUDA = pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks what happens when CUDA is not available"
)
PEER_TIMEOUT = timedelta(seconds=5)
PROMPT = 2.5  # seconds: half the peer timeout; waiting for a peer would take all of it


@pytest.fixture
def rank_one_of_two(monkeypatch: pytest.MonkeyPatch, unused_port: int) -> None:
    """Hand-set variables of rank 1 of 2, whose rank 0 never comes."""
    for name, value in {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(unused_port),
    }.items():
        monkeypatch.setenv(name, value)


@contextmanager
def promptly() -> Iterator[None]:
    """Require the block to finish within ``PROMPT`` seconds, leaving no group."""
    start = time.monotonic()
    try:
        yield
    finally:
        elapsed = time.monotonic() - start
        assert elapsed < PROMPT, f"took {elapsed:.2f} s: the check ran after network activity"
        assert not dist.is_initialized()


@pytest.mark.usefixtures("rank_one_of_two")
@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("RANK", "abc"),
        ("RANK", "-1"),
        ("RANK", "2"),  # not below WORLD_SIZE=2
        ("WORLD_SIZE", "two"),
        ("WORLD_SIZE", "0"),
        ("LOCAL_RANK", "-3"),
        ("LOCAL_RANK", "2"),  # not below LOCAL_WORLD_SIZE=2
        ("MASTER_PORT", "http"),
        ("MASTER_PORT", "0"),
        ("MASTER_PORT", "70000"),
    ],
)
def test_init_rejects_a_malformed_launcher_variable_before_the_network(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, record_property: RecordProperty
) -> None:
    monkeypatch.setenv(variable, value)

    start = time.monotonic()
    with promptly(), pytest.raises(LauncherEnvError) as caught:
        init(timeout=PEER_TIMEOUT)
    record_fault(
        record_property,
        kind="malformed",
        scenario=f"malformed-init-{variable}={value}",
        case=f"malformed {variable}={value!r}: helios_pg.init",
        claim=(
            f"LauncherEnvError (a ValueError) naming {variable} and {value!r} within "
            f"{PROMPT:g} s, before any network activity; no group"
        ),
        ranks=[error_outcome(caught.value, time.monotonic() - start)],
    )

    assert isinstance(caught.value, ValueError)
    assert caught.value.variable == variable
    assert variable in str(caught.value)
    assert repr(value) in str(caught.value)


@pytest.mark.usefixtures("rank_one_of_two")
def test_init_dist_rejects_a_malformed_launcher_variable_before_the_network(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RANK", "first")

    with promptly(), pytest.raises(LauncherEnvError, match="RANK"):
        init_dist(backend="gloo")


@NO_CUDA
@pytest.mark.usefixtures("rank_one_of_two")
def test_init_with_nccl_without_cuda_names_the_gloo_fix() -> None:
    with promptly(), pytest.raises(BackendUnavailableError) as caught:
        init(backend="nccl", timeout=PEER_TIMEOUT)

    assert isinstance(caught.value, ValueError)
    assert "backend='gloo'" in str(caught.value)
    assert "'nccl'" in str(caught.value)


@NO_CUDA
@pytest.mark.usefixtures("rank_one_of_two")
def test_init_dist_with_its_nccl_default_without_cuda_names_the_gloo_fix() -> None:
    with promptly(), pytest.raises(ValueError, match=r"backend='gloo'"):
        init_dist()


@NO_CUDA
def test_init_dist_for_one_hand_started_process_with_nccl_without_cuda_names_the_fix() -> None:
    with promptly(), pytest.raises(ValueError, match=r"backend='gloo'"):
        init_dist(backend="nccl", rank=0, world_size=1)


@pytest.mark.usefixtures("rank_one_of_two")
@pytest.mark.parametrize(
    ("backend", "named"),
    [
        ("foo", "no backend 'foo'"),
        ("cpu:foo", "no backend 'foo'"),
        ("gloo,nccl", "no backend 'gloo,nccl'"),
        ("foo:gloo", "'foo' is not a torch device type"),
        ("cpu:gloo,cpu:gloo", "'cpu' is given twice"),
    ],
)
def test_init_with_an_unknown_backend_lists_the_backends_torch_offers(
    backend: str, named: str
) -> None:
    with promptly(), pytest.raises(BackendUnavailableError) as caught:
        init(backend=backend, timeout=PEER_TIMEOUT)

    message = str(caught.value)
    assert named in message
    assert "'gloo'" in message
    # Only what can run in this process is offered: nccl and a device map need CUDA.
    assert ("'nccl'" in message) == torch.cuda.is_available()
    assert ("'cpu:gloo,cuda:nccl'" in message) == torch.cuda.is_available()


def test_init_dist_with_an_unknown_backend_lists_the_backends_torch_offers() -> None:
    with promptly(), pytest.raises(BackendUnavailableError, match="'gloo'"):
        init_dist(backend="foo", rank=0, world_size=1)


@NO_CUDA
@pytest.mark.usefixtures("rank_one_of_two")
@pytest.mark.parametrize(
    "device_id",
    [torch.device("cuda", 0), torch.device("cuda"), 0],
    ids=["cuda:0", "cuda", "index"],
)
def test_init_rejects_a_cuda_device_id_without_cuda_before_anything(
    device_id: torch.device | int,
) -> None:
    with promptly(), pytest.raises(DeviceBindingError) as caught:
        init(backend="gloo", device_id=device_id, timeout=PEER_TIMEOUT)

    assert isinstance(caught.value, ValueError)
    assert "CUDA is not available" in str(caught.value)


@NO_CUDA
@pytest.mark.usefixtures("rank_one_of_two")
def test_init_rejects_a_device_id_that_is_neither_cpu_nor_cuda_without_cuda() -> None:
    with promptly(), pytest.raises(DeviceBindingError, match="meta"):
        init(device_id=torch.device("meta"), timeout=PEER_TIMEOUT)


def test_init_for_several_processes_without_a_rendezvous_names_what_is_missing() -> None:
    # With CUDA, nothing says which GPU is this process's either: name one.
    device = torch.device("cuda", 0) if torch.cuda.is_available() else None

    with promptly(), pytest.raises(RendezvousConfigError) as caught:
        init(world_size=2, device_id=device, timeout=PEER_TIMEOUT)

    assert isinstance(caught.value, ValueError)
    for name in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        assert name in str(caught.value)


@pytest.mark.parametrize(
    ("world_size", "rank", "named"),
    [(0, -1, "world_size=0"), (-5, -1, "world_size=-5"), (2, 2, "rank=2"), (3, -7, "rank=-7")],
)
def test_init_rejects_out_of_range_rank_and_world_size_arguments_before_the_network(
    world_size: int, rank: int, named: str
) -> None:
    with promptly(), pytest.raises(RendezvousConfigError, match=named):
        init(backend="gloo", world_size=world_size, rank=rank)
    assert not dist.is_initialized()


def test_init_rejects_a_rank_outside_a_world_of_one() -> None:
    with promptly(), pytest.raises(RendezvousConfigError, match="rank=1"):
        init(world_size=1, rank=1)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda: init_dist(backend="gloo", rank=0), id="rank-only"),
        pytest.param(lambda: init_dist(backend="gloo", world_size=2), id="world-size-only"),
    ],
)
def test_init_dist_requires_rank_and_world_size_together(call: Callable[[], None]) -> None:
    with promptly(), pytest.raises(RendezvousConfigError, match="rank and world_size"):
        call()


@pytest.mark.parametrize(("rank", "world_size"), [(2, 2), (-1, 2), (0, 0)])
def test_init_dist_rejects_a_rank_outside_the_world_as_init_does(
    rank: int, world_size: int
) -> None:
    with promptly(), pytest.raises(RendezvousConfigError, match=f"rank={rank}"):
        init_dist(backend="gloo", rank=rank, world_size=world_size)
