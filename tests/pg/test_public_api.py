"""The public surface of helios_pg: exactly the names below, each documented."""

from __future__ import annotations

import inspect

import helios_pg

PUBLIC = [
    "BackendUnavailableError",
    "DeviceBindingError",
    "ProcessGroupInitError",
    "RendezvousConfigError",
    "default_backend",
    "init",
    "init_dist",
    "is_dist_active",
    "local_device",
    "process_group",
    "shutdown",
    "shutdown_dist",
]
"""Adding or removing a public name is an API change: update this list with it."""


def test_all_lists_exactly_the_public_names() -> None:
    assert sorted(helios_pg.__all__) == PUBLIC


def test_no_other_public_name_is_reachable() -> None:
    public = {name for name in dir(helios_pg) if not name.startswith("_")}

    assert public == set(PUBLIC)


def test_every_public_function_and_class_has_a_docstring() -> None:
    undocumented = [
        name
        for name in PUBLIC
        if (inspect.isfunction(obj := getattr(helios_pg, name)) or inspect.isclass(obj))
        and not inspect.getdoc(obj)
    ]

    assert undocumented == []
