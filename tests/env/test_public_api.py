"""The public surface of helios_env: exactly its ``__all__``, each name documented."""

from __future__ import annotations

import helios_env
from tests.support.public_api import surface_problems


def test_the_public_surface_is_all_and_documented() -> None:
    assert surface_problems(helios_env) == {}


def test_the_integration_module_is_all_and_documented() -> None:
    import helios_env.integration

    assert surface_problems(helios_env.integration) == {}
