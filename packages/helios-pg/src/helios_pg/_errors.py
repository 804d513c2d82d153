"""Every error helios-pg raises, by what the caller can do about it.

Hierarchy::

    ValueError                      the arguments or the environment are wrong: fix them
    ├── helios_env.LauncherEnvError a launcher variable is malformed (from helios-env)
    ├── BackendUnavailableError     the backend cannot run here (nccl without CUDA, a
    │                               name torch does not know); lists those it offers
    ├── DeviceBindingError          device_id or LOCAL_RANK does not fit the visible GPUs
    └── RendezvousConfigError       several ranks, but nothing says where they meet; a
                                    rank out of range; an init_method torch refuses
    RuntimeError                    torch could not do it: see the chained cause
    ├── ProcessGroupInitError       the group could not be created (how many ranks
    │   │                           joined, a busy port, an unreachable rank 0)
    │   └── JoinTimeoutError        (private) not every rank counted in at the store;
    │                               init turns it into a ProcessGroupInitError that
    │                               says how many did
    └── PreemptionError             should_stop() or requeue() without the group of a
                                    multi-rank launch, or not called at the same
                                    points on every rank
    UserWarning
    ├── AgreementWarning            the ranks' settings differ (NCCL_*, GLOO_*, ...):
    │                               init warns once, from rank 0
    └── StartupWarning              some ranks reached the rendezvous much later than
                                    the others: init warns once, from rank 0

All are raised before any network activity, except ``ProcessGroupInitError``. torch's
own errors become these in one place, by type (``helios_pg._setup._torch_errors``): its
``ValueError`` (an ``init_method`` it refuses, checked before it connects anywhere)
becomes ``RendezvousConfigError``, the rest ``ProcessGroupInitError``.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "AdoptionWarning",
    "AgreementWarning",
    "BackendUnavailableError",
    "DeviceBindingError",
    "JoinTimeoutError",
    "PreemptionError",
    "ProcessGroupInitError",
    "RendezvousConfigError",
    "StartupWarning",
]


class BackendUnavailableError(ValueError):
    """The requested backend cannot run in this process (nccl without CUDA, an unknown name).

    The message names the fix and the backends this torch build offers.
    """


class DeviceBindingError(ValueError):
    """The requested device does not fit this process (a CUDA device without CUDA, say)."""


class RendezvousConfigError(ValueError):
    """The arguments and environment do not say how the ranks should meet."""


class ProcessGroupInitError(RuntimeError):
    """torch.distributed could not create the process group; the cause is chained."""


class AgreementWarning(UserWarning):
    """The ranks' settings differ: a variable such as ``NCCL_SOCKET_IFNAME`` by node.

    ``init`` warns once, from rank 0, naming each variable and the groups of ranks
    with each value. Ranks that run different software (Python, torch, helios, the
    main script) are an error instead: a ``ProcessGroupInitError`` on every rank.
    """


class StartupWarning(UserWarning):
    """Some ranks reached the rendezvous store much later than the others.

    ``init`` warns once, from rank 0, naming the late ranks and their hosts, how late
    the last one was, and the step where they lost the most time (their processes
    started late, Python's imports, the program's own work before ``init``, the
    network). ``warnings.filterwarnings("ignore", category=helios_pg.StartupWarning)``
    silences it.
    """


class AdoptionWarning(UserWarning):
    """``init`` adopted a process group made before it, but could not set all of it up.

    Said once, naming what is missing: a timeout this torch cannot set on a live group,
    or a group without a store (no agreement check, no layout, no hang roll call).
    """


class PreemptionError(RuntimeError):
    """``should_stop()`` or ``requeue()`` cannot give every rank the same answer.

    Raised where the launcher started several ranks but no process group exists, and
    where the call met another collective on some rank (the ranks did not call it at
    the same points of the loop).
    """


class JoinTimeoutError(ProcessGroupInitError):
    """Not every rank counted in at the store within the timeout; never escapes ``init``.

    Attributes:
        joined: How many ranks had counted in, or None when the store was gone.
        cause: What the wait for the others raised.
        arrived: Each rank that had counted in, with its host; None when unknown.
    """

    def __init__(
        self,
        joined: int | None,
        cause: BaseException,
        arrived: Mapping[int, str] | None = None,
    ) -> None:
        super().__init__(str(cause))
        self.joined = joined
        self.cause = cause
        self.arrived = arrived
