"""Session settings of helios's own test suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fault_records import OPTION, FaultRecorder


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        OPTION,
        metavar="PATH",
        type=Path,
        help="write what each fault test measured to PATH (JSON), for python -m tools.faults",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Run the suite's ``ranks`` tests on reused ranks, as ``--ranks-reuse`` would.

    Set here rather than as ``ranks_reuse`` in pyproject.toml: the suites of helios-env
    and helios-log also run where helios-pg, which defines that option, is not installed.
    The plugin's own tests (tests/pg/test_plugin.py) run fresh and reused ranks in
    pytest sessions of their own.

    With ``--fault-results PATH``, the session's controlling process also collects what
    the fault tests measured and writes it to PATH (tests/support/fault_records.py).
    """
    if config.pluginmanager.hasplugin("helios_pg") and config.getoption("ranks_reuse") is None:
        config.option.ranks_reuse = True
    path = config.getoption(OPTION)
    if path is not None and not hasattr(config, "workerinput"):  # the controller only
        config.pluginmanager.register(FaultRecorder(path), "helios-fault-results")
