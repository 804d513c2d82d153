"""The public surface of helios_collectives: exactly its ``__all__``, each name documented."""

from __future__ import annotations

import inspect

import pytest

import helios_collectives
from tests.support.public_api import surface_problems

FUNCTIONS = [
    name
    for name in helios_collectives.__all__
    if inspect.isfunction(getattr(helios_collectives, name))
]


def test_the_public_surface_is_all_and_documented() -> None:
    assert surface_problems(helios_collectives) == {}


@pytest.mark.parametrize("name", FUNCTIONS)
def test_every_public_function_documents_args_and_raises(name: str) -> None:
    doc = inspect.getdoc(getattr(helios_collectives, name)) or ""

    assert "Args:" in doc
    assert "Raises:" in doc
