"""The public surface of helios_collectives: exactly the names below, each documented."""

from __future__ import annotations

import inspect

import pytest

import helios_collectives

PUBLIC = [
    "BarrierError",
    "BarrierTimeoutError",
    "CollectiveArgumentError",
    "CollectiveMismatchError",
    "ProcessGroupNotInitializedError",
    "UnevenGather",
    "VALIDATE_ENV_VAR",
    "ValidationSettingError",
    "all_reduce_tensors",
    "barrier",
    "gather_into_tensor",
    "gather_uneven",
    "safe_barrier",
]
"""Adding or removing a public name is an API change: update this list with it."""
FUNCTIONS = [
    "all_reduce_tensors",
    "barrier",
    "gather_into_tensor",
    "gather_uneven",
    "safe_barrier",
]
"""The public functions: the rest of PUBLIC are classes and a constant."""


def test_all_lists_exactly_the_public_names() -> None:
    assert sorted(helios_collectives.__all__) == PUBLIC


def test_no_other_public_name_is_reachable() -> None:
    public = {name for name in dir(helios_collectives) if not name.startswith("_")}

    assert public == set(PUBLIC)


def test_every_public_function_and_class_has_a_docstring() -> None:
    undocumented = [
        name
        for name in PUBLIC
        if (inspect.isfunction(obj := getattr(helios_collectives, name)) or inspect.isclass(obj))
        and not inspect.getdoc(obj)
    ]

    assert undocumented == []


def test_the_public_functions_are_exactly_the_functions_of_the_public_names() -> None:
    functions = [name for name in PUBLIC if inspect.isfunction(getattr(helios_collectives, name))]

    assert functions == FUNCTIONS


@pytest.mark.parametrize("name", FUNCTIONS)
def test_every_public_function_documents_args_and_raises(name: str) -> None:
    doc = inspect.getdoc(getattr(helios_collectives, name)) or ""

    assert "Args:" in doc
    assert "Raises:" in doc
