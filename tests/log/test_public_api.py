"""The public surface of helios_log: exactly the names below, each documented."""

from __future__ import annotations

import inspect

import helios_log

PUBLIC = [
    "HANDLER_NAME",
    "RANK_LOG_FORMAT",
    "RankFieldsFilter",
    "RankFilter",
    "SupportsWrite",
    "SupportsWriteAndFlush",
    "global_print",
    "local_print",
    "on_global_rank",
    "on_local_rank",
    "setup_rank_logging",
]
"""Adding or removing a public name is an API change: update this list with it."""


def test_all_lists_exactly_the_public_names() -> None:
    assert sorted(helios_log.__all__) == PUBLIC


def test_no_other_public_name_is_reachable() -> None:
    public = {name for name in dir(helios_log) if not name.startswith("_")}

    assert public == set(PUBLIC)


def test_every_public_function_and_class_has_a_docstring() -> None:
    undocumented = [
        name
        for name in PUBLIC
        if (inspect.isfunction(obj := getattr(helios_log, name)) or inspect.isclass(obj))
        and not inspect.getdoc(obj)
    ]

    assert undocumented == []
