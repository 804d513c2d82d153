"""Copied as ``conftest.py`` beside one plain test in helios-pg's wheel session.

A session that runs no ``ranks`` test loads the ranks plugin from its entry point and
never imports torch (tools/noxfile.py, ``wheel``). Not collected by the suite.
"""

from __future__ import annotations

import sys

import pytest


def pytest_sessionfinish(session: pytest.Session) -> None:
    assert session.config.pluginmanager.has_plugin("helios_pg"), "the plugin was not loaded"
    assert "torch" not in sys.modules, "a session without ranks tests imported torch"
