"""Case ``call-cost``: what helios adds per call, apart from any transport.

``all_reduce_tensors``, ``gather_into_tensor`` and ``safe_barrier`` against the raw torch
calls at world size one on gloo, where no transport hides what helios adds; and
``dist.all_reduce`` with the hang watchdog on (``init(hang_timeout=...)``: its wrapper,
and the process-group hooks on the default group where the torch has them), against
the function it wraps on the same group with the hooks off.
"""

from __future__ import annotations

from collections.abc import Callable

from tools.bench.rows import CaseResult, Row, Settings, at_most
from tools.bench.timing import paired

__all__ = ["run"]


def measure() -> list[Row]:
    """What helios adds per call, apart from any transport: world size one on gloo."""
    import torch
    import torch.distributed as dist

    import helios_pg
    from helios_collectives import all_reduce_tensors, gather_into_tensor, safe_barrier

    helios_pg.init(backend="gloo")
    try:
        t = torch.rand(1)

        def raw_gather() -> None:
            # The simplest code a user would write for the same result.
            out = torch.empty(1)
            dist.all_gather_into_tensor(out, t)

        measured: list[tuple[str, str, Callable[[], object], Callable[[], object]]] = [
            (
                "all_reduce_tensors",
                "dist.all_reduce",
                lambda: all_reduce_tensors(t),
                lambda: dist.all_reduce(t),
            ),
            (
                "gather_into_tensor",
                "out = torch.empty(1); dist.all_gather_into_tensor(out, t)",
                lambda: gather_into_tensor(t, (1,)),
                raw_gather,
            ),
            ("safe_barrier", "dist.barrier", safe_barrier, dist.barrier),
        ]
        rows = []
        for helios, raw, ours_fn, raw_fn in measured:
            ours, theirs, ratio = paired(ours_fn, raw_fn, number=200, repeat=201)
            rows.append(
                at_most(
                    "per-call cost, 1 element, world size one (gloo)",
                    helios,
                    raw,
                    (ours, theirs),
                    "s",
                    1.1,
                    ratio=ratio,
                )
            )
    finally:
        helios_pg.shutdown()
    return rows + measure_watchdog()


def measure_watchdog() -> list[Row]:
    """``dist.all_reduce`` on the default group with the watchdog on, and with it off.

    On: the watchdog's wrapper and, where the torch has them, its hooks on the group.
    Off: the function it wraps, on the same group with the hooks taken off (between the
    timed runs). The same group on both sides: two groups of one world differ by more
    than the watchdog costs (up to 10 % here).
    """
    import torch
    import torch.distributed as dist

    import helios_pg
    from helios_pg import _watchdog

    helios_pg.init(backend="gloo", hang_timeout=600)
    try:
        t = torch.rand(1)
        wrapped = dist.all_reduce
        bare = getattr(wrapped, "__wrapped__", None)
        watchdog = _watchdog._watchdog
        if bare is None or watchdog is None:
            message = "init(hang_timeout=...) did not start the watchdog and wrap dist.all_reduce"
            raise RuntimeError(message)
        issued = watchdog.issued
        world = dist.group.WORLD

        def on() -> None:
            if issued is not None:
                issued.install(world, default=True)

        def off() -> None:
            if issued is not None:
                issued.remove()

        ours, theirs, ratio = paired(
            lambda: wrapped(t), lambda: bare(t), number=200, repeat=201, before=(on, off)
        )
    finally:
        helios_pg.shutdown()
    return [
        at_most(
            "hang watchdog: per-call cost, all-reduce of 1 element, world size one (gloo)",
            "dist.all_reduce with init(hang_timeout=600)",
            "dist.all_reduce without the watchdog (the same group, without its hooks)",
            (ours, theirs),
            "s",
            1.05,
            ratio=ratio,
        )
    ]


def run(settings: Settings) -> CaseResult:
    return CaseResult(measure())
