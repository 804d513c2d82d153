"""pytest plugin: run a test on several ranks, each a process in one process group.

Registered through the ``pytest11`` entry point, so installing helios-pg makes it
available. Loading it imports no torch and, of helios-pg, only the marker's definition;
torch and the machinery that runs the ranks (``helios_pg._testing``) are imported when a
test marked ``ranks`` runs.

.. code-block:: python

    import pytest
    import torch
    import torch.distributed as dist


    @pytest.mark.ranks(3)
    def test_sum(dist_info):
        x = torch.tensor([float(dist_info.rank)])
        dist.all_reduce(x)
        assert x.item() == 3.0

Marker: ``ranks(n, *, timeout=60.0, group_timeout=None, backend=None)``. Each of the
``n`` ranks is a process started from a forkserver with torch already imported; its
default group is formed by :func:`helios_pg.init` on a ``FileStore`` in a temporary
directory (no port), with ``group_timeout`` seconds as the group's timeout (``timeout``
when omitted). The default backend is gloo with CUDA hidden from the ranks
(``CUDA_VISIBLE_DEVICES`` empty), the same on every machine; ``backend="nccl"`` gives
each rank the GPU of its rank and skips the test without one GPU per rank.
The test's fixtures are resolved once, in the pytest process, and sent to every rank;
``dist_info`` is each rank's own :class:`helios_env.DistributedInfo`. A rank that fails
fails the test with its number, traceback and output, and the other ranks are killed
(when several fail, the first to fail is reported and the others are named); a rank that
exits without a result fails the test at once, with its exit status, and every process a
rank started (its process group) is killed with the test. A rank that is still running
at ``timeout`` seconds has the report lead with the hang watchdog's roll call (where each
rank is, which collective or none, and the culprits), then every rank's Python stack,
before all are killed; the test's module is imported in every rank with pytest's
assertion rewriting, so a failing ``assert`` shows its values. ``pytest.skip`` and
``pytest.xfail`` in a rank work as in a plain test, and pytest's warning filters (the
ini file's ``filterwarnings``, ``-W``, the ``filterwarnings`` mark) apply to the test in
every rank. ``--ranks-reuse`` (or ``ranks_reuse = true`` in the ini file) keeps the
ranks of a passing test for the next test of the same size, each test on a group of its
own; a failure or hang discards them.

The forkserver imports, once, what every rank would otherwise import on its own:
torch, pytest, helios-pg, and torch's DDP, DTensor and FSDP2 stack (``torch._dynamo``
and its compiler stack, which the first ``DistributedDataParallel`` of a process imports,
where the installed torch has each; ``ranks_preload_torch = false`` leaves it out), plus
the modules the ``ranks_preload`` ini option lists. The terminal summary says how long
it took to start.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest

from helios_pg._testing import MARKER, MARKER_HELP

if TYPE_CHECKING:
    from helios_env import DistributedInfo

__all__ = [
    "dist_info",
    "pytest_addoption",
    "pytest_collection_finish",
    "pytest_configure",
    "pytest_pyfunc_call",
    "pytest_sessionfinish",
    "pytest_terminal_summary",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--ranks-reuse`` and the ``ranks_reuse`` and ``ranks_preload*`` ini options."""
    help_text = (
        "run ranks tests on ranks kept from the previous test of the same size, each "
        "test on a group of its own (faster; a failure or hang discards the ranks)"
    )
    parser.addoption("--ranks-reuse", action="store_true", default=None, help=help_text)
    parser.addini("ranks_reuse", help_text, type="bool", default=False)
    parser.addini(
        "ranks_preload",
        "modules the ranks' forkserver imports once for every rank (your own or a "
        "library's), besides torch, pytest and helios-pg",
        type="linelist",
        default=[],
    )
    parser.addini(
        "ranks_preload_torch",
        "the ranks' forkserver imports torch's DDP, DTensor and FSDP2 stack "
        "(torch._dynamo and what it imports) once, instead of on every fresh rank",
        type="bool",
        default=True,
    )


def pytest_configure(config: pytest.Config) -> None:
    """Declare the ``ranks`` marker."""
    config.addinivalue_line("markers", MARKER_HELP)


@pytest.fixture
def dist_info() -> DistributedInfo:
    """This rank's ranks and sizes: in a ``ranks`` test, each rank gets its own.

    Outside a ``ranks`` test it is ``helios_env.get_dist_info()`` of the pytest process.
    """
    from helios_env import get_dist_info

    return get_dist_info()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run a ``ranks`` test on its ranks instead of in the pytest process."""
    marker = pyfuncitem.get_closest_marker(MARKER)
    if marker is None:
        return None
    from helios_pg._testing import run_on_ranks

    config = pyfuncitem.config
    reuse = config.getoption("ranks_reuse")
    run_on_ranks(
        pyfuncitem, marker, reuse=bool(config.getini("ranks_reuse") if reuse is None else reuse)
    )
    return True


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the ranks' forkserver once collection found a ranks test.

    Its imports then overlap the rest of the session until the first ranks test. Not
    with ``--collect-only``, and not under pytest-xdist: its controller runs no test, and
    each worker collects every test but runs only some (a worker starts its forkserver
    at its first ranks test).
    """
    config = session.config
    xdist = config.pluginmanager.has_plugin("dsession") or hasattr(config, "workerinput")
    if config.option.collectonly or xdist:
        return
    if any(item.get_closest_marker(MARKER) is not None for item in session.items):
        from helios_pg._testing import start_early

        start_early(config)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say how long the ranks' forkserver took to start, when a ranks test started it."""
    server = sys.modules.get("helios_pg._testing._forkserver")
    started = server.server_start() if server is not None else None
    if started is not None:
        modules = ", ".join(started.preloaded)
        terminalreporter.write_line(
            f"helios-pg ranks: forkserver ready in {started.seconds:.1f} s "
            f"({started.waited:.1f} s of it in the first ranks test), having imported {modules}"
        )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the ranks kept for reuse, if any test started them."""
    parent = sys.modules.get("helios_pg._testing._parent")
    if parent is not None:
        parent.close_pools()
