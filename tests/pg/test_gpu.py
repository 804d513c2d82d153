"""nccl and CUDA device binding; these run where a GPU is visible and skip elsewhere."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from helios_pg import DeviceBindingError, default_backend, init, local_device, shutdown
from tests.support.procs import base_env, results, run_processes

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs CUDA: nccl and CUDA device binding"
    ),
]

WORKERS = Path(__file__).resolve().parent / "workers"
TIMEOUT = timedelta(seconds=10)
PEER_TIMEOUT = timedelta(seconds=5)
PROMPT = 2.5  # seconds: half the peer timeout; waiting for a peer would take all of it


class StoppedBeforeNetworkError(Exception):
    """Raised by a stand-in for torch.cuda.set_device to stop init before the network."""


@contextmanager
def promptly() -> Iterator[None]:
    start = time.monotonic()
    try:
        yield
    finally:
        elapsed = time.monotonic() - start
        assert elapsed < PROMPT, f"took {elapsed:.2f} s: the check ran after network activity"
        assert not dist.is_initialized()


def set_launcher_env(monkeypatch: pytest.MonkeyPatch, port: int, **values: int) -> None:
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    for name, value in values.items():
        monkeypatch.setenv(name, str(value))


def test_default_backend_is_nccl_with_cuda() -> None:
    assert default_backend() == "nccl"


def test_local_device_is_the_current_cuda_device_before_init() -> None:
    assert local_device() == torch.device("cuda", torch.cuda.current_device())


def test_init_binds_cuda_local_rank_and_passes_it_to_nccl() -> None:
    init(timeout=TIMEOUT)
    try:
        assert dist.get_backend() == "nccl"
        assert torch.cuda.current_device() == 0
        assert local_device() == torch.device("cuda", 0)
        world = dist.group.WORLD
        assert world is not None
        assert world.bound_device_id == torch.device("cuda", 0)
        tensor = torch.ones(1, device=local_device())
        dist.all_reduce(tensor)
        assert tensor.item() == 1.0
    finally:
        shutdown()


def test_init_binds_the_local_rank_never_the_global_rank(
    monkeypatch: pytest.MonkeyPatch, unused_port: int
) -> None:
    # Rank 1 of 2 is the only process on its node: LOCAL_RANK 0, so cuda:0.
    set_launcher_env(
        monkeypatch, unused_port, RANK=1, WORLD_SIZE=2, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1
    )
    bound: list[torch.device] = []

    def stop(device: torch.device) -> None:
        bound.append(torch.device(device))
        raise StoppedBeforeNetworkError

    monkeypatch.setattr(torch.cuda, "set_device", stop)

    with pytest.raises(StoppedBeforeNetworkError):
        init(timeout=PEER_TIMEOUT)

    assert bound == [torch.device("cuda", 0)]
    assert not dist.is_initialized()


def test_init_on_a_live_group_applies_the_device_again(monkeypatch: pytest.MonkeyPatch) -> None:
    init(timeout=TIMEOUT)
    try:
        world = dist.group.WORLD
        bound: list[torch.device] = []
        set_device = torch.cuda.set_device

        def record(device: torch.device) -> None:
            bound.append(torch.device(device))
            set_device(device)

        monkeypatch.setattr(torch.cuda, "set_device", record)
        init(timeout=TIMEOUT)
        assert dist.group.WORLD is world
        assert bound == [torch.device("cuda", 0)]
    finally:
        shutdown()


def test_a_local_rank_beyond_the_visible_devices_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, unused_port: int
) -> None:
    count = torch.cuda.device_count()
    set_launcher_env(
        monkeypatch,
        unused_port,
        RANK=count,
        WORLD_SIZE=count + 1,
        LOCAL_RANK=count,
        LOCAL_WORLD_SIZE=count + 1,
    )

    with promptly(), pytest.raises(DeviceBindingError) as caught:
        init(timeout=PEER_TIMEOUT)

    assert isinstance(caught.value, ValueError)
    assert f"LOCAL_RANK={count}" in str(caught.value)
    assert "CUDA_VISIBLE_DEVICES" in str(caught.value)


def test_a_device_index_beyond_the_visible_devices_is_rejected() -> None:
    count = torch.cuda.device_count()

    with promptly(), pytest.raises(DeviceBindingError, match=f"device_id={count}"):
        init(device_id=count, timeout=PEER_TIMEOUT)


@pytest.mark.parametrize("device", [torch.device("cpu"), torch.device("meta")], ids=str)
def test_a_non_cuda_device_id_with_cuda_is_rejected(device: torch.device) -> None:
    with promptly(), pytest.raises(DeviceBindingError, match="not a CUDA device"):
        init(device_id=device, timeout=PEER_TIMEOUT)


def test_a_program_using_process_group_on_nccl_exits_without_the_destroy_warning() -> None:
    # The control leaves its group alive, so torch's warning must show in its stderr:
    # otherwise this check could not see the warning at all.
    env = base_env({"TORCH_CPP_LOG_LEVEL": "WARNING"})
    script = str(WORKERS / "cuda_exit.py")
    clean, leak = run_processes(
        [([sys.executable, script], env), ([sys.executable, script, "--leak"], env)],
        limit=90,
    )

    for finished in (clean, leak):
        assert finished.returncode == 0, finished.describe()
        assert [r["backend"] for r in results(finished)] == ["nccl"], finished.describe()
    assert "destroy_process_group" in leak.stderr, leak.describe()
    assert "destroy_process_group" not in clean.stderr, clean.describe()
