"""The public surface of helios_env: exactly the names below, each documented."""

from __future__ import annotations

import inspect

import helios_env

PUBLIC = [
    "DistributedInfo",
    "EnvironmentReport",
    "HostlistError",
    "Launcher",
    "LauncherEnvError",
    "LauncherEnvWarning",
    "detect_launcher",
    "expand_hostlist",
    "get_dist_info",
    "get_global_rank",
    "get_local_rank",
    "get_local_world_size",
    "get_world_size",
    "inspect_environment",
    "is_using_torchrun",
]
"""Adding or removing a public name is an API change: update this list with it."""


def test_all_lists_exactly_the_public_names() -> None:
    assert sorted(helios_env.__all__) == PUBLIC


def test_no_other_public_name_is_reachable() -> None:
    public = {name for name in dir(helios_env) if not name.startswith("_")}

    assert public == set(PUBLIC)


def test_every_public_function_and_class_has_a_docstring() -> None:
    undocumented = [
        name
        for name in PUBLIC
        if (inspect.isfunction(obj := getattr(helios_env, name)) or inspect.isclass(obj))
        and not inspect.getdoc(obj)
    ]

    assert undocumented == []
