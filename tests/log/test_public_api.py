"""The public surface of helios_log: exactly its ``__all__``, each name documented."""

from __future__ import annotations

import helios_log
from tests.support.public_api import surface_problems


def test_the_public_surface_is_all_and_documented() -> None:
    assert surface_problems(helios_log) == {}
