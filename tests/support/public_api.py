"""What every package's public surface must be: exactly its ``__all__``, each name documented.

A package's ``__all__`` is the one statement of its public names; the API reference
(tests/docs/test_api_reference.py) and the downstream typing consumers (tests/typing)
hold the documentation and the types to it. Importing this module imports no helios
package and no torch.
"""

from __future__ import annotations

import inspect
import types

__all__ = ["surface_problems"]


def _submodule(module: types.ModuleType, name: str) -> bool:
    value = getattr(module, name, None)
    return isinstance(value, types.ModuleType) and value.__name__ == f"{module.__name__}.{name}"


def surface_problems(module: types.ModuleType) -> dict[str, list[str]]:
    """What is wrong with ``module``'s public surface, by kind; empty when nothing is.

    Loads every name of ``__all__`` first (a lazy package defines them on first use).
    """
    names: list[str] = list(module.__all__)
    objects = {name: getattr(module, name) for name in names}
    problems = {
        "named twice in __all__": sorted({name for name in names if names.count(name) > 1}),
        "public in dir() but not in __all__": sorted(
            name
            for name in dir(module)
            # pytest's assertion rewriting adds names such as "@py_builtins" to the
            # modules of a plugin's package: no attribute access can reach them. A public
            # submodule (helios_env.integration) is an attribute once imported.
            if name.isidentifier()
            and not name.startswith("_")
            and name not in names
            and not _submodule(module, name)
        ),
        "a function or class without a docstring": sorted(
            name
            for name, obj in objects.items()
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and not inspect.getdoc(obj)
        ),
    }
    return {kind: found for kind, found in problems.items() if found}
