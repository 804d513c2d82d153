"""The machinery of helios-pg's pytest plugin; :mod:`helios_pg.pytest_plugin` holds its hooks.

- :mod:`helios_pg._testing._marker`: the ``ranks`` marker, read and checked;
- :mod:`helios_pg._testing._parent`: the pytest process's side, which starts the
  ranks of one test, waits for them and reports;
- :mod:`helios_pg._testing._forkserver`: the session's forkserver, which forks the
  ranks with torch already imported;
- :mod:`helios_pg._testing._rank`: one rank, which forms the group and runs the test;
- :mod:`helios_pg._testing._processes`: the ranks' processes, each leading a process
  group that is ended with the test;
- :mod:`helios_pg._testing._rollcall`: the hang watchdog's roll call, which the parent
  calls at a test's deadline to name the culprits;
- :mod:`helios_pg._testing._preload`: what the forkserver imports before it forks the
  first rank, and each rank's stack while it waits for that import.

Importing this package or its marker module imports neither torch nor the rest of
helios-pg: :func:`run_on_ranks` and :func:`start_early` load the parent's machinery
when first called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from helios_pg._testing._marker import MARKER, MARKER_HELP

if TYPE_CHECKING:
    import pytest

__all__ = ["MARKER", "MARKER_HELP", "run_on_ranks", "start_early"]


def run_on_ranks(item: pytest.Function, marker: pytest.Mark, *, reuse: bool) -> None:
    """Run a ``ranks`` test on its ranks (see :mod:`helios_pg._testing._parent`)."""
    from helios_pg._testing._parent import run_on_ranks as run

    run(item, marker, reuse=reuse)


def start_early(config: pytest.Config) -> None:
    """Start the session's forkserver in the background (see its module)."""
    from helios_pg._testing._forkserver import start_early as start

    start(config)
