"""Gather, all-reduce and barrier that are correct on every backend.

``gather_into_tensor``, ``all_reduce_tensors`` and ``safe_barrier`` keep helios-ml's
contract and fix its pitfalls: results land on the input's device, non-contiguous
views are handled, ``ReduceOp.AVG`` works on gloo, and bad arguments fail before any
communication. ``gather_uneven`` gathers tensors whose dim 0 differs by rank;
``barrier`` takes a timeout and names the ranks that did not arrive. Validation mode
(``validate=True`` or ``HELIOS_VALIDATE_COLLECTIVES=1``) turns ranks that disagree on
a call into the same ``ValueError`` on every rank. ``broadcast_object`` and
``gather_objects`` move picklable objects; ``all_reduce_dict`` reduces a dict of metrics
in one all-reduce.
"""

from helios_collectives._barrier import barrier
from helios_collectives._errors import (
    BarrierError,
    BarrierTimeoutError,
    CollectiveArgumentError,
    CollectiveMismatchError,
    ProcessGroupNotInitializedError,
    ValidationSettingError,
)
from helios_collectives._gather import UnevenGather, gather_into_tensor, gather_uneven
from helios_collectives._objects import broadcast_object, gather_objects
from helios_collectives._reduce import all_reduce_tensors
from helios_collectives._reduce_dict import all_reduce_dict
from helios_collectives._safe_barrier import safe_barrier
from helios_collectives._validation_switch import VALIDATE_ENV_VAR

__all__ = [
    "VALIDATE_ENV_VAR",
    "BarrierError",
    "BarrierTimeoutError",
    "CollectiveArgumentError",
    "CollectiveMismatchError",
    "ProcessGroupNotInitializedError",
    "UnevenGather",
    "ValidationSettingError",
    "all_reduce_dict",
    "all_reduce_tensors",
    "barrier",
    "broadcast_object",
    "gather_into_tensor",
    "gather_objects",
    "gather_uneven",
    "safe_barrier",
]

__version__ = "0.1.0"
