"""Preemption and requeue: the stop flag every rank agrees on, and what to do next.

Owns ``preemption()``, ``Preemption``, ``Grace``, ``StopCause``, ``Requeue`` and the checkpoints a
stopped job resumes from (``Checkpoints``, ``Resumed``). May import helios-env's public
names and helios-pg's shared modules.
"""

from helios_pg._preempt._cause import StopCause
from helios_pg._preempt._checkpoints import Checkpoints, Resumed
from helios_pg._preempt._grace import Grace
from helios_pg._preempt._preemption import Preemption, close_all, preemption
from helios_pg._preempt._requeue import Requeue, marker_consumed

__all__ = [
    "Checkpoints",
    "Grace",
    "Preemption",
    "Requeue",
    "Resumed",
    "StopCause",
    "close_all",
    "marker_consumed",
    "preemption",
]
