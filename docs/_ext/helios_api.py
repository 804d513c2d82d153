"""Sphinx extension that keeps the helios API reference complete and in step with the code.

It adds to the build:

- a check, once every page is read, that each name in the ``__all__`` of the four
  packages is documented as a Python object, and that nothing is documented under a
  private module path; each failure is a warning, which ``-W`` turns into an error;
- the ``helios-error-tree`` directive, which renders the exception and warning
  classes exported by the four packages as a nested list under their standard
  library bases, read from the classes themselves, each linked to its API entry;
- references to a private module path (``helios_env._info.X``, as type hints name
  them) pointed at the public name (``helios_env.X``), and type variables of the
  private modules rendered as plain text;
- public constants documented from the attribute docstrings in the module that
  defines them, attribute types shown short and public, the classes of ``Warns:``
  sections linked, and ``Callable[P, R]`` with a ``ParamSpec`` ``P`` shown as
  written.
"""

from __future__ import annotations

import builtins
import functools
import importlib
import inspect
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import ParamSpec, TypeVar, cast

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.domains.python import PythonDomain
from sphinx.environment import BuildEnvironment
from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

__all__ = [
    "PACKAGES",
    "ErrorTreeDirective",
    "public_names",
    "setup",
]

PACKAGES = ("helios_env", "helios_pg", "helios_collectives", "helios_log")
"""The packages whose ``__all__`` the reference must cover, in layer order."""

_API_INDEX = "api/index"
_LITERAL = re.compile(r"``(.+?)``")
_logger = logging.getLogger(__name__)


def public_names() -> dict[str, object]:
    """Map the qualified public name of every exported object to the object.

    Returns:
        ``{"helios_env.get_dist_info": <function>, ...}`` for each name in the
        ``__all__`` of each of :data:`PACKAGES`, in package and ``__all__`` order.
    """
    return dict(_public_names())


@functools.cache
def _public_names() -> dict[str, object]:
    names: dict[str, object] = {}
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            names[f"{package}.{name}"] = getattr(module, name)
    return names


@functools.cache
def _private_aliases() -> dict[str, str]:
    """Map the defining path of each public class or function to its public name."""
    aliases: dict[str, str] = {}
    for public, obj in public_names().items():
        module = getattr(obj, "__module__", None)
        qualname = getattr(obj, "__qualname__", None)
        if isinstance(module, str) and isinstance(qualname, str):
            defined = f"{module}.{qualname}"
            if defined != public:
                aliases[defined] = public
    return aliases


def _is_private(qualified: str) -> bool:
    """Tell whether a helios name goes through a private module or attribute."""
    parts = qualified.split(".")
    return parts[0] in PACKAGES and any(part.startswith("_") for part in parts[1:])


def _lookup(qualified: str) -> object | None:
    """Import the longest importable module prefix of ``qualified`` and walk the rest."""
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part, None)
            if obj is None:
                return None
        return obj
    return None


def _publish_references(app: Sphinx, doctree: nodes.document) -> None:
    """Point every Python reference to a private helios path at the public name.

    Type hints name the module that defines a class (``helios_env._info``); the
    reference documents it under the package (``helios_env``), so the link and its
    title show the name users import.
    """
    aliases = _private_aliases()
    for node in doctree.findall(addnodes.pending_xref):
        if node.get("refdomain") == "py":
            public = aliases.get(str(node.get("reftarget", "")))
            if public is not None:
                node["reftarget"] = public


def _type_variable_reference(
    app: Sphinx, env: BuildEnvironment, node: addnodes.pending_xref, contnode: nodes.Element
) -> nodes.Element | None:
    """Render a reference to a type variable of a private helios module as plain text.

    The ``P`` and ``R`` of a decorator's signature have no entry of their own.
    """
    target = str(node.get("reftarget", ""))
    if node.get("refdomain") != "py" or not _is_private(target):
        return None
    if isinstance(_lookup(target), (TypeVar, ParamSpec)):
        return contnode
    return None


def _check_reference(app: Sphinx, env: BuildEnvironment) -> None:
    """Warn about every public name missing from the reference and every private one in it."""
    if _API_INDEX not in env.found_docs:
        _logger.warning(
            "the API reference page %r is missing; it must document every public name",
            _API_INDEX,
            type="helios",
            subtype="api",
        )
    domain = cast("PythonDomain", env.get_domain("py"))
    documented = domain.objects
    for public in public_names():
        if public not in documented:
            _logger.warning(
                "public name %s (in __all__ of %s) is not documented in the API "
                "reference; add an autodoc directive for it to docs/api/%s.md",
                public,
                public.split(".", 1)[0],
                public.split(".", 1)[0],
                type="helios",
                subtype="api",
                location=_API_INDEX,
            )
    for name, entry in sorted(documented.items()):
        if _is_private(name) and not entry.aliased:
            _logger.warning(
                "%s is documented under a private path; document its public name instead",
                name,
                type="helios",
                subtype="api",
                location=(entry.docname, None),
            )


_MISSING = object()


def _attribute_docstring(public: str, obj: object) -> list[str]:
    """Find the docstring of a public constant in the private module that defines it."""
    package, _, attr = public.partition(".")
    for module_name, module in sorted(sys.modules.items()):
        if not module_name.startswith(f"{package}._") or not isinstance(module, ModuleType):
            continue
        if module.__dict__.get(attr, _MISSING) is not obj:
            continue
        docs = ModuleAnalyzer.for_module(module_name).find_attr_docs()
        lines = docs.get(("", attr))
        if lines:
            return list(lines)
    return []


def _document_constant(  # noqa: PLR0917 - Sphinx passes the event's arguments by position
    app: Sphinx, what: str, name: str, obj: object, options: object, lines: list[str]
) -> None:
    """Give a public constant the docstring written beside its definition.

    autodoc looks for it in the package's ``__init__`` module, which only imports the
    constant, and falls back to the docstring of the value's type (``str``).
    """
    if what not in {"data", "attribute"}:
        return
    names = _public_names()
    if name in names and names[name] is obj:
        docstring = _attribute_docstring(name, obj)
        if docstring:
            lines[:] = docstring


_TYPE_OPTION = re.compile(r"^(\s*:type: )(.+)$")
_DOTTED = re.compile(r"~?\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


def _shorten_attribute_types(  # noqa: PLR0917 - Sphinx passes the event's arguments by position
    app: Sphinx, what: str, name: str, obj: object, options: object, lines: list[str]
) -> None:
    """Show attribute types the way signatures show them: short, and public.

    napoleon writes the annotation of each attribute under ``Attributes:`` with its
    full path, which for a helios class is the private module that defines it
    (``helios_env._info.DistributedInfo``). The public name is linked instead, and
    every dotted name is shown by its last part, as ``autodoc_typehints_format =
    "short"`` does elsewhere.
    """
    aliases = _private_aliases()

    def shorten(match: re.Match[str]) -> str:
        dotted = match[0].lstrip("~")
        return f"~{aliases.get(dotted, dotted)}"

    for index, line in enumerate(lines):
        option = _TYPE_OPTION.match(line)
        if option is not None:
            lines[index] = option[1] + _DOTTED.sub(shorten, option[2])


_WARNS_ITEM = re.compile(r"^(:Warns: (?:\* )?|\s+\* )\*\*([\w.]+)\*\*( -- |$)")


def _link_warnings(  # noqa: PLR0917 - Sphinx passes the event's arguments by position
    app: Sphinx, what: str, name: str, obj: object, options: object, lines: list[str]
) -> None:
    """Link the warning classes of a ``Warns:`` section as ``Raises:`` links exceptions.

    napoleon renders each class of ``Warns:`` in bold, without a reference.
    """
    in_warns = False
    for index, line in enumerate(lines):
        if line.startswith(":"):
            in_warns = line.startswith(":Warns:")
        if not in_warns:
            continue
        item = _WARNS_ITEM.match(line)
        if item is not None:
            reference = f":py:exc:`{item[2]}`"
            lines[index] = item[1] + reference + item[3] + line[item.end() :]


_BRACKETED_PARAMSPEC = re.compile(r"\[~(\w+)\]")


def _repair_paramspec(  # noqa: PLR0917 - Sphinx passes the event's arguments by position
    app: Sphinx,
    what: str,
    name: str,
    obj: object,
    options: object,
    signature: str | None,
    return_annotation: str | None,
) -> None:
    """Write a ``ParamSpec`` in a recorded type hint the way the code does.

    Sphinx renders ``Callable[P, R]`` as ``Callable[[~P], R]``, a list holding the
    bare ``repr`` of ``P``. Each such ``[~P]`` whose ``P`` is a ``ParamSpec`` of the
    object's module becomes ``P`` again, qualified by that module so that the
    reference resolves like the module's type variables.
    """
    module_name = getattr(obj, "__module__", None)
    recorded = getattr(app.env.current_document, "autodoc_annotations", {}).get(name)
    if not isinstance(module_name, str) or not recorded:
        return
    module = sys.modules.get(module_name)

    def replace(match: re.Match[str]) -> str:
        if isinstance(getattr(module, match[1], None), ParamSpec):
            return f"~{module_name}.{match[1]}"
        return match[0]

    for key, annotation in recorded.items():
        recorded[key] = _BRACKETED_PARAMSPEC.sub(replace, annotation)


@dataclass
class _TreeNode:
    """One class of the error tree and the classes below it."""

    cls: type[BaseException]
    public: str | None
    children: list[_TreeNode] = field(default_factory=list)


def _error_classes() -> dict[type[BaseException], str]:
    """Map each exception or warning class exported by the packages to its public name."""
    found: dict[type[BaseException], str] = {}
    for public, obj in public_names().items():
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            found[obj] = public
    return found


def _tree_parent(
    cls: type[BaseException], exported: dict[type[BaseException], str]
) -> type[BaseException] | None:
    """The nearest base that is exported by helios or is a builtin exception."""
    for base in cls.__mro__[1:]:
        if base is BaseException:
            return None
        if issubclass(base, BaseException) and (
            base in exported or base.__module__ == builtins.__name__
        ):
            return base
    return None


def _error_forest() -> list[_TreeNode]:
    """Build the hierarchy of the exported errors under their builtin bases."""
    exported = _error_classes()
    tree: dict[type[BaseException], _TreeNode] = {}

    def node_for(cls: type[BaseException]) -> _TreeNode:
        if cls not in tree:
            tree[cls] = _TreeNode(cls, exported.get(cls))
            parent = _tree_parent(cls, exported)
            if parent is not None:
                node_for(parent).children.append(tree[cls])
        return tree[cls]

    for cls in exported:
        node_for(cls)
    order = {public: index for index, public in enumerate(public_names())}

    def sort(items: list[_TreeNode]) -> list[_TreeNode]:
        for item in items:
            item.children = sort(item.children)
        return sorted(
            items,
            key=lambda item: (
                item.public is not None,
                order.get(item.public or "", 0),
                item.cls.__name__,
            ),
        )

    return sort([item for cls, item in tree.items() if _tree_parent(cls, exported) is None])


def _summary(cls: type[BaseException]) -> str:
    """The first paragraph of a class's docstring on one line, or an empty string."""
    doc = inspect.getdoc(cls) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ").strip()


def _inline_literals(text: str) -> Iterator[nodes.Node]:
    """Split docstring text into text and ````literal```` nodes."""
    for index, piece in enumerate(_LITERAL.split(text)):
        if piece:
            yield nodes.literal(piece, piece) if index % 2 else nodes.Text(piece)


class ErrorTreeDirective(SphinxDirective):
    """Render the exported exception and warning classes as a nested list.

    Each helios class links to its entry in the API reference and carries the first
    line of its docstring; builtin bases (``ValueError``, ``RuntimeError``,
    ``UserWarning``...) are shown as plain names, with their own builtin bases
    above them. A helios class with a second base outside its line says so.
    """

    has_content = False
    required_arguments = 0
    optional_arguments = 0

    def run(self) -> list[nodes.Node]:
        """Build the list from the classes that the packages export now."""
        modules = [importlib.import_module(package) for package in PACKAGES]
        for source in {*map(inspect.getfile, modules), *map(inspect.getfile, _error_classes())}:
            self.env.note_dependency(source)
        return [self._list(_error_forest(), self.env.docname)]

    def _list(self, items: list[_TreeNode], docname: str) -> nodes.bullet_list:
        bullets = nodes.bullet_list(classes=["helios-error-tree"])
        for item in items:
            paragraph = nodes.paragraph()
            if item.public is None:
                paragraph += nodes.literal(item.cls.__name__, item.cls.__name__)
            else:
                paragraph += self._reference(item.public, docname)
                others = _other_bases(item.cls)
                if others:
                    paragraph += nodes.Text(" (also ")
                    paragraph += nodes.literal(", ".join(others), ", ".join(others))
                    paragraph += nodes.Text(")")
                summary = _summary(item.cls)
                if summary:
                    paragraph += nodes.Text(": ")
                    paragraph.extend(_inline_literals(summary))
            entry = nodes.list_item("", paragraph)
            if item.children:
                entry += self._list(item.children, docname)
            bullets += entry
        return bullets

    @staticmethod
    def _reference(public: str, docname: str) -> addnodes.pending_xref:
        xref = addnodes.pending_xref(
            "",
            refdomain="py",
            reftype="exc",
            reftarget=public,
            refexplicit=False,
            refwarn=True,
            refdoc=docname,
        )
        xref["py:module"] = None
        xref["py:class"] = None
        xref += nodes.literal(public, public, classes=["xref", "py", "py-exc"])
        return xref


def _other_bases(cls: type[BaseException]) -> list[str]:
    """Name the exported or builtin direct bases of ``cls`` outside its line in the tree."""
    exported = _error_classes()
    parent = _tree_parent(cls, exported)
    return [
        exported.get(base, base.__name__)
        for base in cls.__bases__
        if (base in exported or base.__module__ == builtins.__name__)
        and (parent is None or not (issubclass(base, parent) or issubclass(parent, base)))
    ]


def setup(app: Sphinx) -> dict[str, object]:
    """Register the directive and the event handlers.

    Args:
        app: The Sphinx application.

    Returns:
        The extension's metadata: safe for parallel reading and writing.
    """
    app.add_directive("helios-error-tree", ErrorTreeDirective)
    app.connect("doctree-read", _publish_references)
    app.connect("missing-reference", _type_variable_reference)
    app.connect("env-check-consistency", _check_reference)
    app.connect("autodoc-process-docstring", _document_constant)
    app.connect("autodoc-process-docstring", _shorten_attribute_types, priority=600)
    app.connect("autodoc-process-docstring", _link_warnings, priority=600)
    app.connect("autodoc-process-signature", _repair_paramspec, priority=600)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
