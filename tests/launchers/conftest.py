"""Fixtures for the launcher tests: a private SLURM cluster for the whole session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.slurm import Cluster, private_cluster, require


@pytest.fixture(scope="session")
def slurm_session() -> Iterator[Cluster]:
    """A private single-node SLURM cluster, started once and stopped after the session.

    Skips the tests that use it when SLURM or munge is missing (fails them under
    ``CI=true``); ``bash tools/install_launchers.sh`` installs them.
    """
    require("slurm")
    with private_cluster() as cluster:
        yield cluster


@pytest.fixture
def slurm_cluster(slurm_session: Cluster) -> Cluster:
    """The session's cluster with an empty queue: an earlier test's job still
    completing would otherwise hold the CPUs this test's job asks for.
    """
    assert slurm_session.cancel_all(), slurm_session.logs()
    return slurm_session
