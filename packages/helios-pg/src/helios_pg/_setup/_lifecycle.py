"""Create and destroy the default process group, binding the rank-local device."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import PrefixStore

from helios_env import DistributedInfo, Launcher, get_dist_info, inspect_environment
from helios_env.integration import forget_layout
from helios_pg._backend import check_backend, default_backend
from helios_pg._device import resolve_device
from helios_pg._preempt import close_all as close_preemptions
from helios_pg._reports import init_succeeded, stop_reports, unreported_failure
from helios_pg._setup._adopt import adopt, forget, made, set_up
from helios_pg._setup._after_init import after_init
from helios_pg._setup._agreement import enabled as agreement_enabled
from helios_pg._setup._agreement import own_fingerprint
from helios_pg._setup._arguments import check_arguments, local_store, require_distributed
from helios_pg._setup._call import InitCall
from helios_pg._setup._given import name_the_absent, sign_in
from helios_pg._setup._gloo_interface import release_gloo
from helios_pg._setup._meeting import connect_env, find_meeting
from helios_pg._setup._nodes import learn_after_init, prepare_nodes
from helios_pg._setup._store import EnvStore
from helios_pg._setup._torch_errors import Step, map_torch_errors
from helios_pg._stragglers import stop_stragglers
from helios_pg._timeouts import Timeout
from helios_pg._torch import destroy_without_deadlock

__all__ = ["init", "process_group", "shutdown"]


_REPORTING: list[bool] = []
"""The last init's ``report_failures``: an error of ``shutdown()`` follows it too."""


def _own_rendezvous(init_method: str | None, store: Any | None) -> str | None:
    """None for ``"env://"``: helios reads those variables itself, and knows the store.

    With a ``store`` too, torch's own refusal of the pair stands.
    """
    plain = isinstance(init_method, str) and init_method.strip().lower() == "env://"
    return None if plain and store is None else init_method


def _needs_rendezvous_from_env(init_method: str | None, store: Any | None) -> bool:
    return init_method is None and store is None


def init(
    *,
    backend: str | None = None,
    init_method: str | None = None,
    timeout: Timeout | None = None,
    world_size: int = -1,
    rank: int = -1,
    store: Any | None = None,
    pg_options: Any | None = None,
    device_id: torch.device | int | None = None,
    report_failures: bool = True,
    hang_timeout: Timeout | None = None,
    check_agreement: bool = True,
    straggler_report: Timeout | None = None,
) -> None:
    """Initialize the default process group and bind the rank-local CUDA device.

    Launcher variables are validated first, through ``helios_env``, so a malformed
    ``RANK`` or ``MASTER_PORT`` fails before any network activity. A direct
    world-size-one program (no ``init_method``, no ``store``, world size one from the
    arguments or the environment) uses a local ``HashStore``: no ``MASTER_ADDR``, no
    ``MASTER_PORT``, no ``TCPStore`` and no environment variable written, while
    collectives and ``Work`` handles behave as on any gloo or nccl group (the
    backend's own transport may still open an ephemeral loopback listener).

    A default group made before ``init`` (by Ray Train, Lightning, accelerate,
    DeepSpeed) is adopted: it is not made again and the device is applied; the
    arguments are checked as for a new group and must match it (backend, world size,
    rank); ``timeout`` is set on it where torch can change a live group's; the
    agreement check runs, the layout is learned, and the failure reporter and the
    watchdog are installed. What could not be done is one ``AdoptionWarning``. A
    ``process_group()`` block that adopted a group leaves it alive and takes back
    only what it added.

    Several processes meet at ``MASTER_ADDR:MASTER_PORT``. Under srun and mpirun, when
    either is unset, it is derived (``python -m helios_env`` shows how): loopback
    when every rank is on one node, else the first host of the srun step's nodelist
    (rank 0 checks that this is its own host); the port from the job's identity,
    outside the kernel's ephemeral range. On several nodes under mpirun, set
    ``MASTER_ADDR`` or install mpi4py (``helios-pg[mpi]``). Before the group forms,
    every rank checks that the store serves its own job (the SLURM job and step, the
    MPI job, torchrun's run id): a process of another job fails with both named.

    Args:
        backend: Process-group backend. Defaults to ``"nccl"`` when CUDA is
            available and ``"gloo"`` otherwise, at every world size.
        init_method: Optional PyTorch rendezvous URL, forwarded unchanged; except
            ``"env://"``, which names the variables helios reads itself: it meets the
            others as without ``init_method``, so that the failure reports, the hang
            roll call and the agreement check work as they do there.
        timeout: The group's timeout for each collective and for the rendezvous:
            seconds, or a ``timedelta``. When omitted, torch's default for the backend
            (30 minutes on gloo, 10 on nccl): helios keeps it, since a shorter one
            aborts legitimately slow steps (rank 0 writing a checkpoint while the others
            wait); ``hang_timeout`` finds a hang in seconds without aborting anything.
        world_size: Number of processes in the default group; -1 resolves
            ``WORLD_SIZE`` from the environment.
        rank: Global rank in the default group; -1 resolves ``RANK`` from the
            environment.
        store: Optional rendezvous key-value store, forwarded unchanged.
        pg_options: Optional backend-specific process-group options, forwarded unchanged.
        device_id: Rank-local device. When omitted with CUDA available,
            ``cuda:LOCAL_RANK`` is selected. A CUDA device is required when CUDA is
            available; only a CPU device is accepted otherwise.
        report_failures: Install the failure reporter until :func:`shutdown`: an
            uncaught exception writes torchrun's error file (no ``@record`` needed), the
            first rank to fail is published in the job's store, and a rank whose
            collective then breaks names it first (``rank 1 on node2 failed first:
            ...``). ``HELIOS_FAILURE_REPORT=0`` turns it off too.
        hang_timeout: Seconds, or a ``timedelta``, a rank may sit in one collective
            before the hang roll call: every rank reports where it is, one rank prints
            the ranks grouped by place, and the ranks that are elsewhere are named as the
            culprits (also in torchrun's error file). ``HELIOS_HANG_TIMEOUT`` when
            omitted; off when neither is set. Until :func:`shutdown`.
        check_agreement: Compare the ranks' Python, torch, helios versions, backend,
            device type, main script and backend settings (``NCCL_*``, ``GLOO_*``...)
            before the group is used: software that differs is a
            ``ProcessGroupInitError`` on every rank, settings that differ one
            ``AgreementWarning`` from rank 0. ``HELIOS_AGREEMENT_CHECK=0`` turns it off.
        straggler_report: Seconds, or a ``timedelta``, between two straggler reports:
            rank 0 compares how long each rank waited in the same collectives of the
            default group (helios's, raw ``torch.distributed`` calls, DDP's) and prints
            one line beginning ``helios straggler:`` when one rank, or one node, is
            consistently the last to arrive (:func:`straggler_report` returns the
            numbers). At least one second; ``HELIOS_STRAGGLER_REPORT`` when omitted;
            off when neither is set. Gloo groups only, for now. Until :func:`shutdown`.

    Raises:
        helios_env.LauncherEnvError: A launcher variable is malformed (a ``ValueError``).
        DeviceBindingError: ``device_id`` is incompatible with CUDA availability, or
            ``LOCAL_RANK`` names a GPU that is not visible (a ``ValueError``).
        BackendUnavailableError: The backend cannot run here, such as nccl without
            CUDA, or torch has no backend of that name; the message lists those it
            offers (a ``ValueError``).
        RendezvousConfigError: Several processes are expected but nothing says where
            they meet, ``rank`` or ``world_size`` is out of range or differs from the
            adopted group's, ``backend`` is not its backend, the derived address
            is not rank 0's host, torch refused ``init_method``, a timeout is not
            positive and finite, or the straggler report's period is under a second
            (a ``ValueError``).
        TypeError: A timeout is neither a number nor a ``timedelta``.
        ProcessGroupInitError: torch.distributed is unavailable, the rendezvous port is
            taken, the store serves another job, the ranks run different software, or
            PyTorch could not create the group (a ``RuntimeError``; the cause is chained).

    Example::

        import torch
        import torch.distributed as dist
        from helios_pg import init, local_device, shutdown

        init()  # `python train.py`: gloo (nccl with CUDA) on a local store, no port
        try:
            dist.all_reduce(torch.ones(3, device=local_device()))
        finally:
            shutdown()
    """
    arguments = dict(locals())  # every parameter, as given
    _REPORTING[:] = [report_failures]
    try:
        _init(**arguments)
    except Exception as exc:
        # No reporter yet: torchrun's summary would show no error file for this rank.
        unreported_failure(exc, sys._getframe(1), enabled=report_failures)
        raise
    init_succeeded()


def _group_options(
    backend: str, pg_options: Any | None, device: torch.device | None
) -> dict[str, Any]:
    """``init_process_group``'s options beside the rendezvous; binds ``device`` first."""
    options: dict[str, Any] = {}
    if pg_options is not None:
        options["pg_options"] = pg_options
    if device is not None:
        torch.cuda.set_device(device)
        if "nccl" in backend.lower():
            options["device_id"] = device
    return options


def _init(
    *,
    backend: str | None,
    init_method: str | None,
    timeout: Timeout | None,
    world_size: int,
    rank: int,
    store: Any | None,
    pg_options: Any | None,
    device_id: torch.device | int | None,
    report_failures: bool,
    hang_timeout: Timeout | None,
    check_agreement: bool,
    straggler_report: Timeout | None,
) -> None:
    """:func:`init`'s work, whose errors :func:`init` reports."""
    require_distributed()
    init_method, report = _own_rendezvous(init_method, store), inspect_environment()
    timeout, hang, stragglers = check_arguments(
        world_size, rank, timeout, hang_timeout, straggler_report
    )
    if report.process_group:
        device = resolve_device(device_id, local_rank=report.info.local_rank, local_rank_known=True)
        if device is not None:
            torch.cuda.set_device(device)
        adopt(
            report,
            backend=backend,
            world_size=world_size,
            rank=rank,
            timeout=timeout,
            device=device,
            report_failures=report_failures,
            hang=hang,
            check_agreement=check_agreement,
            stragglers=stragglers,
        )
        return
    env_info = report.info
    launched = report.launcher is not Launcher.NONE
    explicit_world = world_size != -1
    effective_world = world_size if explicit_world else env_info.world_size
    device = resolve_device(
        device_id,
        local_rank=env_info.local_rank,
        local_rank_known=launched or "LOCAL_RANK" in os.environ or effective_world == 1,
    )
    direct_single = effective_world == 1 and _needs_rendezvous_from_env(init_method, store)
    call = InitCall.start(
        backend=check_backend(backend if backend is not None else default_backend()),
        world_size=effective_world,
        rank=rank if rank != -1 else env_info.rank,
        timeout=timeout,
        init_method=init_method,
    )
    checks = not direct_single and agreement_enabled(check_agreement)
    agreement = partial(own_fingerprint, call.backend, device) if checks else None

    env_store: EnvStore | None = None
    layout: DistributedInfo | None = None
    kwargs: dict[str, Any] = {
        "backend": call.backend,
        "init_method": init_method,
        "timeout": timeout,
        "world_size": world_size,
        "rank": rank,
        "store": store,
    }
    if direct_single:
        kwargs.update(local_store(rank))
    elif _needs_rendezvous_from_env(init_method, store):
        need_rank = rank == -1 and report.launcher is Launcher.NONE
        meeting = find_meeting(report, call.rank, call.world_size, need_rank=need_rank)
        call = replace(call, meeting=meeting)
        env_store = connect_env(call)
        layout = prepare_nodes(report, env_store, call, agreement)
        kwargs.update(
            store=PrefixStore("default_pg", env_store.store),
            rank=call.rank,
            world_size=call.world_size,
        )
    kwargs.update(_group_options(call.backend, pg_options, device))
    with map_torch_errors(call, Step.GROUP):
        signs = store is not None and call.world_size > 1
        given = sign_in(store, call.rank, call.world_size) if signs else None
        try:
            dist.init_process_group(**kwargs)
        except Exception as exc:
            if dist.is_initialized():
                destroy_without_deadlock()
            release_gloo()
            # Drop the store here, not when the traceback goes: rank 0's store listens
            # on MASTER_PORT, and a retry must be able to bind it again.
            env_store = None
            kwargs.clear()
            name_the_absent(exc, given, call.rank)
            raise
    if not direct_single and call.meeting is None:  # init_method or store: ask the group
        layout = learn_after_init(report, call, agreement)
    after_init(
        layout,
        call.meeting,
        env_store,
        report_failures=report_failures,
        hang=hang,
        stragglers=stragglers,
        job=report.job,
        called=call.called,
    )
    made()


def _release(*, adopted: bool = False) -> None:
    """Undo what init set up beside the default group; the group itself stays.

    Args:
        adopted: The group was adopted: an exception on its way out is reported now and
            the hooks go too, since the group's owner catches it where no hook sees it.
    """
    forget()
    forget_layout()
    release_gloo()
    stop_stragglers()
    stop_reports(hand_back=adopted)
    close_preemptions()


def shutdown(group: dist.ProcessGroup | None = None) -> None:
    """Destroy an initialized process group.

    An unavailable or uninitialized ``torch.distributed``, a call before ``init``,
    and a group already destroyed are all no-ops, so calling this twice is safe.

    Args:
        group: Process group to destroy. None selects the default process group;
            this is a group object, not a rank.
    """
    default = group is None or not dist.is_available() or group is dist.group.WORLD
    if default:
        # Also after a torch.distributed.destroy_process_group() of its own: what init
        # set up goes with the default group.
        _release()
    if not dist.is_available() or not dist.is_initialized():
        return
    try:
        destroy_without_deadlock(group)
    except Exception as exc:
        if group is not None and isinstance(exc, ValueError):
            return  # torch no longer knows the group ("Invalid process group specified")
        # The reporter went with _release(); init(report_failures=False) holds here too.
        unreported_failure(exc, sys._getframe(1), enabled=all(_REPORTING))
        raise


@contextmanager
def process_group(
    *,
    backend: str | None = None,
    init_method: str | None = None,
    timeout: Timeout | None = None,
    world_size: int = -1,
    rank: int = -1,
    store: Any | None = None,
    pg_options: Any | None = None,
    device_id: torch.device | int | None = None,
    report_failures: bool = True,
    hang_timeout: Timeout | None = None,
    check_agreement: bool = True,
    straggler_report: Timeout | None = None,
) -> Iterator[DistributedInfo]:
    """Run a block inside an initialized default process group.

    Calls :func:`init` with the same arguments, yields the resolved ranks and sizes,
    and destroys the group on the way out, also when the block raises. A group that
    already existed before entering is left alive.

    Args:
        backend: See :func:`init`.
        init_method: See :func:`init`.
        timeout: See :func:`init`.
        world_size: See :func:`init`.
        rank: See :func:`init`.
        store: See :func:`init`.
        pg_options: See :func:`init`.
        device_id: See :func:`init`.
        report_failures: See :func:`init`.
        hang_timeout: See :func:`init`.
        check_agreement: See :func:`init`.
        straggler_report: See :func:`init`.

    Yields:
        The ``DistributedInfo`` of this process, read from the live group.

    Example:
        >>> from helios_pg import process_group
        >>> with process_group() as info:  # a plain process: a group of one
        ...     print(info.rank, info.world_size)
        0 1
    """
    existed = dist.is_available() and dist.is_initialized()
    adopted = existed and not set_up()
    init(
        backend=backend,
        init_method=init_method,
        timeout=timeout,
        world_size=world_size,
        rank=rank,
        store=store,
        pg_options=pg_options,
        device_id=device_id,
        report_failures=report_failures,
        hang_timeout=hang_timeout,
        check_agreement=check_agreement,
        straggler_report=straggler_report,
    )
    try:
        yield get_dist_info()
    finally:
        if not existed:
            shutdown()
        elif adopted:
            _release(adopted=True)  # the group stays, what init added goes
