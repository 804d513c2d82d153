"""The public surface of helios_env is what ``__all__`` lists."""

from __future__ import annotations

import helios_env


def test_every_public_name_is_listed_in_all() -> None:
    public = {name for name in dir(helios_env) if not name.startswith("_")}

    assert public == set(helios_env.__all__)


def test_every_name_in_all_exists() -> None:
    missing = [name for name in helios_env.__all__ if not hasattr(helios_env, name)]

    assert missing == []
