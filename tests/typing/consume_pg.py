"""A downstream module that uses every public name of helios_pg; read by mypy only.

Nothing here runs: pytest does not collect this file and ``consume`` is never called.
mypy --strict checks the public API as downstream code sees it from the wheel.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from typing_extensions import assert_type  # typing's from Python 3.11 on

import helios_pg
from helios_env import DistributedInfo
from helios_pg import (
    AdoptionWarning,
    AgreementWarning,
    BackendUnavailableError,
    Checkpoints,
    DeviceBindingError,
    Grace,
    Preemption,
    ProcessGroupInitError,
    RendezvousConfigError,
    Requeue,
    Resumed,
    StartupMoments,
    StartupWarning,
    StopCause,
    default_backend,
    init,
    init_dist,
    is_dist_active,
    local_device,
    preemption,
    process_group,
    shutdown,
    shutdown_dist,
    startup_moments,
)


def consume(group: dist.ProcessGroup) -> None:
    """Call every public function the way a user's program would."""
    assert_type(default_backend(), str)
    assert_type(local_device(), torch.device)
    assert_type(init(), None)
    assert_type(
        init(backend="gloo", timeout=timedelta(seconds=30), world_size=2, rank=1, device_id=0),
        None,
    )
    assert_type(init(device_id=torch.device("cuda", 0), store=object(), pg_options=None), None)
    assert_type(init(timeout=20, hang_timeout=timedelta(seconds=5)), None)
    assert_type(init(check_agreement=False), None)
    assert_type(shutdown(), None)
    assert_type(shutdown(group), None)
    with process_group(backend="gloo") as info:
        assert_type(info, DistributedInfo)
    assert_type(init_dist(), None)
    assert_type(init_dist("gloo", rank=0, world_size=2), None)
    assert_type(shutdown_dist(), None)
    assert_type(is_dist_active(), bool)
    with preemption(("SIGUSR1", 15), shield_workers=False, grace=45.0) as stop:
        assert_type(stop, Preemption)
        assert_type(stop.should_stop(), bool)
        assert_type(stop.received, int | None)
        assert_type(stop.grace, Grace)
        assert_type(stop.grace.seconds, float | None)
        assert_type(stop.time_left(), float | None)
        assert_type(stop.deadline, float | None)
        with stop.saving():
            pass
        assert_type(stop.last_save, float | None)
        cause = stop.cause(timeout=5.0)
        assert_type(cause, StopCause)
        assert_type(cause.time_left, float | None)
        if cause.kind == "time_limit":
            assert_type(cause.detail, str)
        outcome = stop.requeue(timeout=30.0, max_requeues=3)
        assert_type(outcome, Requeue)
        assert_type(outcome.exit_status, int)
        assert_type(outcome.requeued, bool)
        assert_type(outcome.marker, Path | None)
    checkpoints = Checkpoints("checkpoints", keep=3, every_rank=False, fsync=True)
    assert_type(checkpoints.save({"step": 1}, step=1, epoch=0, batch=1), Path)
    resumed = checkpoints.load(map_location="cpu", weights_only=True)
    assert_type(resumed, Resumed | None)
    if resumed is not None:
        assert_type(resumed.step, int)
        assert_type(resumed.state, dict[str, Any])
        assert_type(resumed.restore_rng(), None)
    assert_type(checkpoints.complete(), list[Path])

    errors: list[type[Exception]] = [
        BackendUnavailableError,
        DeviceBindingError,
        RendezvousConfigError,
        ProcessGroupInitError,
    ]
    value_errors: list[type[ValueError]] = [
        BackendUnavailableError,
        DeviceBindingError,
        RendezvousConfigError,
    ]
    runtime_error: type[RuntimeError] = ProcessGroupInitError
    warning: type[UserWarning] = AgreementWarning
    adopted: type[UserWarning] = AdoptionWarning
    late: type[UserWarning] = StartupWarning
    moments = startup_moments()
    assert_type(moments, StartupMoments)
    assert_type(moments.process_started, float | None)
    assert_type(moments.helios_imported, float)
    print(errors, value_errors, runtime_error, warning, adopted, late)
    assert_type(helios_pg.__all__, list[str])


def misuse() -> None:
    """Mistakes the types must reject; strict mode fails if an ignore goes unused."""
    init("gloo")  # type: ignore[call-arg]
    init(world_size="2")  # type: ignore[arg-type]
    init(timeout="20")  # type: ignore[arg-type]
    init(check_agreement="no")  # type: ignore[arg-type]
    init_dist(rank="0", world_size=2)  # type: ignore[arg-type]
    preemption(signals=1.5)  # type: ignore[arg-type]
