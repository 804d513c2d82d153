"""Session settings of helios's own test suite."""

from __future__ import annotations

import os
import resource
from pathlib import Path

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
    # A worker killed at its time limit aborts to print its stacks (tests/support/procs.py):
    # no core file, from it or any other worker, lands in the checkout.
    _, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))


@pytest.fixture(scope="session")
def mpi4py_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """helios-pg's mpi4py installed apart, not in the test venv: the folder for PYTHONPATH.

    Skips the tests that use it when uv cannot install it (fails them under ``CI=true``).
    """
    from tests.support.mpi import install_mpi4py

    target = tmp_path_factory.mktemp("mpi4py")
    try:
        install_mpi4py(target)
    except RuntimeError as error:
        if os.environ.get("CI") == "true":
            pytest.fail(str(error), pytrace=False)
        pytest.skip(str(error))
    return target
