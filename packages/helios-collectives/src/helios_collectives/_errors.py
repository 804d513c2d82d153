"""Every error helios-collectives raises, by what the caller can do about it.

Hierarchy::

    ValueError                          the call is wrong: fix the arguments
    ├── CollectiveArgumentError         wrong on this rank (size, empty list, AVG of
    │                                   integers, overlapping memory, async_op, a
    │                                   barrier timeout that is not positive)
    ├── CollectiveMismatchError         ranks disagree on the call (the default check and
    │                                   gather_uneven); the same error on every rank
    ├── ValidationSettingError          HELIOS_VALIDATE_COLLECTIVES is neither on nor off
    └── SizeSpecError                   (private) a --sizes value of the main job that
                                        cannot be parsed; it exits with status 2
    RuntimeError                        the group cannot do it now
    ├── ProcessGroupNotInitializedError no process group: call helios_pg.init()
    └── BarrierError                    barrier(timeout) could not complete
        └── BarrierTimeoutError         some ranks did not arrive; names them

``TypeError`` is raised, unsubclassed, for arguments of the wrong type.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

__all__ = [
    "BarrierError",
    "BarrierTimeoutError",
    "CollectiveArgumentError",
    "CollectiveMismatchError",
    "ProcessGroupNotInitializedError",
    "SizeSpecError",
    "ValidationSettingError",
]


class CollectiveArgumentError(ValueError):
    """The arguments of a collective are wrong on this rank; nothing was communicated.

    With the check on (the default) the same error is raised on every rank after the
    ranks exchanged descriptions of their calls (all ranks then passed the same wrong
    arguments); otherwise it is raised before any communication, on the ranks whose
    arguments are wrong.

    Attributes:
        helios_peer_failure: True where this rank raises it because another rank's
            arguments were wrong (its object could not be pickled, its metrics were
            invalid): helios-pg's failure report then names that rank, not this one.
    """

    helios_peer_failure: bool = False


class CollectiveMismatchError(ValueError):
    """Ranks called a collective with arguments that do not match; raised on every rank.

    Attributes:
        operation: The collective this rank called, such as ``"all_reduce_tensors"``.
        disagreeing_ranks: Global ranks whose call differs from the most common one
            (ties go to the call of the lowest rank).
        differences: For each field that differs (``"dtype"``, ``"shape"``...), each
            value seen and the global ranks that passed it.
        helios_peer_failure: True on a rank that is not among ``disagreeing_ranks``:
            helios-pg's failure report then names a disagreeing rank, not this one.
    """

    def __init__(
        self,
        message: str,
        *,
        operation: str,
        disagreeing_ranks: tuple[int, ...],
        differences: Mapping[str, Mapping[str, tuple[int, ...]]],
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.disagreeing_ranks = disagreeing_ranks
        self.differences = {field: dict(values) for field, values in differences.items()}
        self.helios_peer_failure = _this_rank() not in disagreeing_ranks

    def __reduce__(self) -> tuple[object, ...]:
        # Keep the attributes when the error is pickled (multiprocessing, futures).
        state = (self.operation, self.disagreeing_ranks, self.differences)
        return _rebuild_mismatch, (str(self), *state)


def _rebuild_mismatch(
    message: str,
    operation: str,
    disagreeing_ranks: tuple[int, ...],
    differences: Mapping[str, Mapping[str, tuple[int, ...]]],
) -> CollectiveMismatchError:
    return CollectiveMismatchError(
        message,
        operation=operation,
        disagreeing_ranks=disagreeing_ranks,
        differences=differences,
    )


class ValidationSettingError(ValueError):
    """``HELIOS_VALIDATE_COLLECTIVES`` holds a value that is neither on nor off.

    Raised by the first call that reads it, on each rank where it is set so, before
    anything is sent.

    Attributes:
        value: The variable's value as set.
    """

    def __init__(self, message: str, *, value: str) -> None:
        super().__init__(message)
        self.value = value

    def __reduce__(self) -> tuple[object, ...]:
        return _rebuild_setting, (str(self), self.value)


def _rebuild_setting(message: str, value: str) -> ValidationSettingError:
    return ValidationSettingError(message, value=value)


class SizeSpecError(ValueError):
    """A ``--sizes`` value of ``python -m helios_collectives`` that cannot be parsed."""


class ProcessGroupNotInitializedError(RuntimeError):
    """A collective was called without an initialized default process group."""


class BarrierError(RuntimeError):
    """A barrier could not complete."""


class BarrierTimeoutError(BarrierError):
    """Some ranks did not reach a barrier within its timeout.

    Attributes:
        missing_ranks: Global ranks that had not arrived when the timeout expired.
        timeout: The timeout that expired: that of the first rank to give up.
        helios_peer_failure: Always True: the ranks to blame are the missing ones,
            which helios-pg's failure report names instead of this one.
    """

    helios_peer_failure = True

    def __init__(self, message: str, *, missing_ranks: tuple[int, ...], timeout: timedelta) -> None:
        super().__init__(message)
        self.missing_ranks = missing_ranks
        self.timeout = timeout

    def __reduce__(self) -> tuple[object, ...]:
        return _rebuild_barrier_timeout, (str(self), self.missing_ranks, self.timeout)


def _rebuild_barrier_timeout(
    message: str, missing_ranks: tuple[int, ...], timeout: timedelta
) -> BarrierTimeoutError:
    return BarrierTimeoutError(message, missing_ranks=missing_ranks, timeout=timeout)


def _this_rank() -> int | None:
    """This process's global rank where a default group is live, else None."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else None
