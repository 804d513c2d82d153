"""Preemption and requeue: the stop flag every rank agrees on, and what to do next.

Owns ``preemption()``, ``Preemption`` and ``Requeue``. May import helios-env's public
names and helios-pg's shared modules.
"""

from helios_pg._preempt._preemption import Preemption, close_all, preemption
from helios_pg._preempt._requeue import Requeue

__all__ = ["Preemption", "Requeue", "close_all", "preemption"]
