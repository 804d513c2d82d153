"""Session settings of helios's own test suite."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Run the suite's ``ranks`` tests on reused ranks, as ``--ranks-reuse`` would.

    Set here rather than as ``ranks_reuse`` in pyproject.toml: the suites of helios-env
    and helios-log also run where helios-pg, which defines that option, is not installed.
    The plugin's own tests (tests/pg/test_plugin.py) run fresh and reused ranks in
    pytest sessions of their own.
    """
    if config.pluginmanager.hasplugin("helios_pg") and config.getoption("ranks_reuse") is None:
        config.option.ranks_reuse = True
