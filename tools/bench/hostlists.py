"""Case ``hostlist``: ``helios_env.expand_hostlist`` against python-hostlist on 10,000
nodes, in three shapes of nodelist.
"""

from __future__ import annotations

from tools.bench.rows import CaseResult, Row, Settings
from tools.bench.timing import paired

__all__ = ["run"]


def measure() -> list[Row]:
    """``expand_hostlist`` against python-hostlist on 10,000 nodes in three shapes."""
    import functools

    import hostlist  # type: ignore[import-untyped]

    from helios_env._hostlist import expand_hostlist

    shapes = [
        ("one padded range", "n[00001-10000]"),
        ("100 items of 100", ",".join(f"rack{r:02d}-n[001-100]" for r in range(100))),
        ("two groups, 100 x 100", "rack[001-100]-n[001-100]"),
    ]
    rows = []
    for shape, nodelist in shapes:
        # python-hostlist removes duplicates unless told not to; Slurm (and helios) keep them.
        ours_fn = functools.partial(expand_hostlist, nodelist)
        theirs_fn = functools.partial(hostlist.expand_hostlist, nodelist, allow_duplicates=True)
        assert ours_fn() == theirs_fn()
        assert len(ours_fn()) == 10_000
        ours, theirs, ratio = paired(ours_fn, theirs_fn, number=5)
        rows.append(
            Row(
                f"hostlist: 10,000 nodes, {shape}",
                f"expand_hostlist({nodelist[:24]}{'...' if len(nodelist) > 24 else ''})",
                "hostlist.expand_hostlist (python-hostlist)",
                ours,
                theirs,
                "s",
                ratio,
                "helios / alternative",
                "10,000 nodes well under 5 ms",
                ours < 5e-3,
            )
        )
    return rows


def run(settings: Settings) -> CaseResult:
    return CaseResult(measure())
