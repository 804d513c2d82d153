"""Preemption and requeue: the stop flag every rank agrees on, and what to do next.

Owns ``preemption()``, ``Preemption`` and ``requeue()``. May import helios-env's public
names and helios-pg's shared modules.
"""
