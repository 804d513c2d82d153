"""The public surface of helios_pg: exactly the names below, each documented."""

from __future__ import annotations

import inspect
import types

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
PLUGIN = "pytest_plugin"
"""The pytest11 entry point's module: an attribute of the package once pytest loaded it."""


def test_all_lists_exactly_the_public_names() -> None:
    assert sorted(helios_pg.__all__) == PUBLIC


def test_dir_lists_only_the_public_names() -> None:
    public = {name for name in dir(helios_pg) if not name.startswith("_")}

    assert public == set(PUBLIC)


def test_no_other_public_name_is_in_the_namespace() -> None:
    # The names load lazily: load them all, then nothing else may be there (no helper
    # that __init__ imported, such as importlib or TYPE_CHECKING). pytest rewrites the
    # asserts of a plugin's package and adds names such as "@py_builtins", which no
    # attribute access can reach.
    for name in PUBLIC:
        getattr(helios_pg, name)
    public = {
        name
        for name, value in vars(helios_pg).items()
        if name.isidentifier()
        and not name.startswith("_")
        and not (name == PLUGIN and isinstance(value, types.ModuleType))
    }

    assert public == set(PUBLIC)


def test_every_public_function_and_class_has_a_docstring() -> None:
    undocumented = [
        name
        for name in PUBLIC
        if (inspect.isfunction(obj := getattr(helios_pg, name)) or inspect.isclass(obj))
        and not inspect.getdoc(obj)
    ]

    assert undocumented == []
