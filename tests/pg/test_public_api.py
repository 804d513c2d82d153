"""The public surface of helios_pg: exactly its ``__all__``, each name documented, loaded lazily.

``helios_pg/__init__.py`` lists each name once, in a table of the modules that define
them; its ``TYPE_CHECKING`` imports restate that table for type checkers and are held
equal to it here. That importing the package imports neither torch nor pytest is
checked where it means something: from its wheel, installed alone (tools/noxfile.py).
"""

from __future__ import annotations

import ast
import importlib
import types
from pathlib import Path

import helios_pg
from tests.support.public_api import surface_problems

PLUGIN = "pytest_plugin"
"""The pytest11 entry point's module: an attribute of the package once pytest loaded it."""
SUBMODULES = {PLUGIN, "integration"}
"""The public submodules: attributes of the package once something imported them."""


def test_the_public_surface_is_all_and_documented() -> None:
    assert surface_problems(helios_pg) == {}


def test_the_integration_module_is_all_and_documented() -> None:
    import helios_pg.integration

    assert surface_problems(helios_pg.integration) == {}


def test_no_other_public_name_is_in_the_namespace() -> None:
    # The names load lazily: load them all, then nothing else may be there (no helper
    # that __init__ imported, such as importlib or TYPE_CHECKING). pytest rewrites the
    # asserts of a plugin's package and adds names such as "@py_builtins", which no
    # attribute access can reach.
    for name in helios_pg.__all__:
        getattr(helios_pg, name)
    public = {
        name
        for name, value in vars(helios_pg).items()
        if name.isidentifier()
        and not name.startswith("_")
        and not (name in SUBMODULES and isinstance(value, types.ModuleType))
    }

    assert public == set(helios_pg.__all__)


def type_checking_imports() -> set[tuple[str, str | None, str]]:
    """``(name, alias, module)`` of each import under ``if TYPE_CHECKING:`` in __init__.py."""
    tree = ast.parse(Path(helios_pg.__file__).read_text(encoding="utf-8"))
    blocks = [
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    ]
    assert len(blocks) == 1, "helios_pg/__init__.py has one `if TYPE_CHECKING:` block"
    found: set[tuple[str, str | None, str]] = set()
    for node in blocks[0].body:
        assert isinstance(node, ast.ImportFrom), ast.unparse(node)
        assert node.module is not None
        found.update((alias.name, alias.asname, node.module) for alias in node.names)
    return found


def test_the_type_checking_imports_reexport_exactly_the_lazy_table() -> None:
    table = helios_pg._PUBLIC

    # `from M import name as name`: mypy --strict takes only that form as a re-export.
    assert type_checking_imports() == {(name, name, module) for name, module in table.items()}


def test_every_lazy_name_comes_from_the_room_its_table_names() -> None:
    # Each room of helios-pg is entered through its front door: the table names the
    # room (or shared module) whose __all__ exports the name, never a module behind it.
    wrong = {
        name: module
        for name, module in helios_pg._PUBLIC.items()
        if name not in importlib.import_module(module).__all__
        or getattr(importlib.import_module(module), name) is not getattr(helios_pg, name)
    }

    assert wrong == {}
