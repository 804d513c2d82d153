"""Find every code example of the documentation and the docstrings; run the in-process kinds.

Where examples come from:

- Every fenced code block of ``README.md``, ``docs/**/*.md`` (``docs/_build`` left
  out) and ``packages/*/README.md`` (each package's page on the index), also inside
  MyST directives (```` ```{note} ````, ``:::{tip}``); a ```` ```{code-block} python ````
  directive is a python block. The HTML comment on the
  line right before a fence (``<!-- example: ranks -->``, ``torchrun N``, ``shell``,
  ``skip: REASON``) chooses how it runs; without one a python block is a standalone
  program, a python block of ``>>>`` lines (or a ``pycon`` one) is a doctest, and a
  block in another language is output that is not run.
- The docstrings of the public names (``__all__`` of the four packages and of
  ``helios_pg.pytest_plugin``, with the methods and properties of public classes) and
  the packages' and the plugin's module docstrings: ``>>>`` lines are one doctest per
  docstring, run with the globals of the module that defines the name; each
  ``Example::`` literal block, each literal block inside an ``Example:`` section and
  each ``.. code-block:: python`` is a standalone program, or a ``ranks`` test module
  when it uses ``pytest.mark.ranks``.

What is wrong is itself an :class:`Example` of mode ``invalid`` whose ``reason`` says
what and how to fix it: a shell block without ``shell`` or ``skip``, a ``skip`` without a
reason, an unknown kind, a kind that does not fit the block's language, an example
comment that is not right before a fence, a fence that is never closed.

How the in-process kinds run (python programs and doctests): :func:`main` runs in one
interpreter, started by the test with a plain environment (no launcher variable), and
forks one child per example. The child is the example's own process: it runs in a
fresh ``__main__`` module, with a fresh temporary working directory, ``sys.argv`` and
``sys.path[0]`` naming its script there, stdout and stderr going to a file of its own,
and then the exit handlers run as at the end of a program. Nothing an example does (to
the environment, ``logging``, the working directory, a process group, a crash or
``os._exit``) reaches the next one. The examples that use no torch run first, from an
interpreter that has not imported it, so they see a process without torch as a user's
script would; then torch is imported once and the others are forked from there, which
saves each of them the two or three seconds of ``import torch`` that separate
interpreters would each pay. A child that outlives the time limit has every thread's
stack dumped into its output and is killed with its process group. An example fails
when it raises, exits with a non-zero status, dies, emits a warning, or leaves the
default process group initialized (which is then destroyed). Tracebacks name the
documentation file and its line.
"""

from __future__ import annotations

import ast
import atexit
import builtins
import contextlib
import doctest
import faulthandler
import importlib
import inspect
import io
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import textwrap
import time
import traceback
import types
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, NoReturn

__all__ = [
    "DOCSTRING_MODULES",
    "IN_PROCESS_MODES",
    "PACKAGES",
    "Example",
    "collect",
    "docstring_examples",
    "main",
    "markdown_examples",
    "markdown_files",
    "parse_docstring",
    "parse_markdown",
]

Mode = Literal["python", "doctest", "ranks", "torchrun", "shell", "skip", "output", "invalid"]

PACKAGES = ("helios_env", "helios_pg", "helios_collectives", "helios_log")
DOCSTRING_MODULES = (*PACKAGES, "helios_pg.pytest_plugin")
"""Modules whose docstring and whose ``__all__`` names' docstrings hold examples."""
IN_PROCESS_MODES = frozenset({"python", "doctest"})
"""Modes that :func:`main` runs, each in a child process of its own."""
RESULT_PREFIX = "RESULT "
OUTPUT_LIMIT = 20_000

PYTHON_LANGUAGES = frozenset({"python", "py", "python3", "py3"})
DOCTEST_LANGUAGES = frozenset({"pycon"})
SHELL_LANGUAGES = frozenset({"console", "bash", "sh", "shell"})
CODE_DIRECTIVES = frozenset({"code-block", "code", "sourcecode"})
# Directives whose content is not Markdown, so it holds no fence of its own.
OPAQUE_DIRECTIVES = frozenset(
    {"eval-rst", "raw", "math", "literalinclude", "csv-table", "mermaid", "graphviz", "toctree"}
)
KINDS_HELP = "ranks, torchrun N, shell or skip: REASON"

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,}|:{3,})(?P<info>.*)$")
COMMENT = re.compile(r"^<!--\s*example\b(?P<colon>\s*:)?(?P<kind>.*?)\s*-->\s*$")
DIRECTIVE = re.compile(r"^\{(?P<name>[^}\s]+)\}\s*(?P<argument>.*)$")
RST_CODE = re.compile(r"^\.\. (?:code-block|code|sourcecode)::\s*(?P<language>\S*)\s*$")
EXAMPLE_HEADERS = frozenset({"Example:", "Examples:"})
EXAMPLE_LITERALS = frozenset({"Example::", "Examples::"})
TORCH_USE = re.compile(r"\b(?:torch|helios_pg|helios_collectives)\b")


@dataclass(frozen=True)
class Example:
    """One code example, where it is, and how it runs.

    Attributes:
        path: The file that holds it.
        relpath: ``path`` relative to the repository root, with ``/`` separators.
        line: The line (from 1) that names it: the opening fence, the ``Example::`` or
            ``.. code-block::`` line, the first ``>>>`` line of a docstring, or the
            line of the problem.
        language: The fence's language, lower case (``python`` for docstrings).
        mode: How it runs: ``python`` (a standalone program), ``doctest``, ``ranks``
            (a pytest module run with helios-pg's plugin), ``torchrun`` (a script run
            on ``nproc`` ranks), ``shell`` (bash from the repository root), ``skip``,
            ``output`` (not run) or ``invalid`` (a problem, in ``reason``).
        source: The code, dedented; for ``shell``, without the ``$`` prompts.
        first_line: The line (from 1) of the source's first line in ``path``.
        nproc: The number of ranks of a ``torchrun`` example.
        reason: Why a ``skip`` example is not run, or what is wrong with an
            ``invalid`` one and how to fix it.
        module: For a docstring doctest, the module whose globals it runs with.
        name: For a docstring example, the qualified name of what it documents.
        indent: The columns by which ``source`` is dedented from the file.
    """

    path: str
    relpath: str
    line: int
    language: str
    mode: Mode
    source: str = ""
    first_line: int = 0
    nproc: int = 0
    reason: str = ""
    module: str = ""
    name: str = ""
    indent: int = 0

    @property
    def location(self) -> str:
        """``relpath:line``, the example's test id."""
        return f"{self.relpath}:{self.line}"

    @property
    def uses_torch(self) -> bool:
        """Whether the example (probably) imports torch, directly or through helios."""
        return bool(TORCH_USE.search(self.source) or TORCH_USE.search(self.module))


def collect(root: Path) -> list[Example]:
    """Every example of the Markdown files under ``root`` and of the public docstrings.

    Args:
        root: The repository root.

    Returns:
        The Markdown examples in file order, then the docstring examples.
    """
    return [*markdown_examples(root), *docstring_examples(root)]


# --- Markdown -----------------------------------------------------------------------


def markdown_files(root: Path) -> list[Path]:
    """``README.md``, ``docs/**/*.md`` (not ``docs/_build``) and the packages' READMEs."""
    files = [root / "README.md"] if (root / "README.md").is_file() else []
    files += sorted(root.glob("packages/*/README.md"))
    docs = root / "docs"
    if docs.is_dir():
        build = docs / "_build"
        files += sorted(p for p in docs.rglob("*.md") if build not in p.parents)
    return files


def markdown_examples(root: Path) -> list[Example]:
    """The fenced blocks of :func:`markdown_files`, in file order."""
    found: list[Example] = []
    for path in markdown_files(root):
        relpath = path.relative_to(root).as_posix()
        found += parse_markdown(path.read_text(encoding="utf-8"), str(path), relpath)
    return found


def _closing(lines: list[str], start: int, end: int, char: str, length: int) -> int | None:
    for index in range(start, end):
        stripped = lines[index].strip()
        if len(stripped) >= length and set(stripped) == {char}:
            return index
    return None


def _opening(line: str) -> re.Match[str] | None:
    match = FENCE.match(line)
    if match is None:
        return None
    if match["fence"][0] == "`" and "`" in match["info"]:
        return None  # an inline code span, not a fence
    return match


def _code(lines: list[str], first: int) -> tuple[str, int, int]:
    """Dedented code of ``lines`` (line ``first`` onwards): source, first line, indent."""
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    body = lines[start:end]
    indent = min((len(line) - len(line.lstrip()) for line in body if line.strip()), default=0)
    source = textwrap.dedent("\n".join(body)) + "\n" if body else ""
    return source, first + start, indent


def _strip_options(body: list[str], first: int) -> tuple[list[str], int]:
    """Drop a directive's ``:key: value`` lines or ``---`` block from its body."""
    start = 0
    if body and body[0].strip() == "---":
        end = next((i for i in range(1, len(body)) if body[i].strip() == "---"), None)
        if end is not None:
            start = end + 1
    else:
        while start < len(body) and re.match(r"^\s*:[\w-]+:", body[start]):
            start += 1
    while start < len(body) and not body[start].strip():
        start += 1
    return body[start:], first + start


def _parse_kind(text: str) -> tuple[str, int, str] | str:
    """``(kind, nproc, reason)`` of an example comment's text, or the problem."""
    text = text.strip()
    if text in ("ranks", "shell"):
        return text, 0, ""
    match = re.fullmatch(r"torchrun\s+(\S+)", text)
    if match:
        nproc = match[1]
        if not nproc.isdigit() or int(nproc) < 1:
            return f"`torchrun {nproc}` needs a positive number of ranks, as in `torchrun 2`"
        return "torchrun", int(nproc), ""
    if text == "torchrun":
        return "`torchrun` needs the number of ranks, as in `<!-- example: torchrun 2 -->`"
    match = re.fullmatch(r"skip\s*(:?)\s*(.*)", text, re.S)
    if match:
        if not match[2].strip():
            return (
                "`skip` needs a reason, as in `<!-- example: skip: needs two GPUs -->`: say "
                "why the block cannot run in the test suite"
            )
        if not match[1]:
            return f"write `skip: {match[2].strip()}`, with a colon before the reason"
        return "skip", 0, match[2].strip()
    return f"unknown example kind {text!r}; the kinds are {KINDS_HELP}"


def _language(info: str) -> str:
    word = info.strip().split(maxsplit=1)[0] if info.strip() else ""
    return word.strip("{}.").lower()


def _shell_source(body: list[str], first: int) -> tuple[str, str | None]:
    """The commands of a shell block without ``$`` prompts, or the line that is output."""
    prompted = any(line.lstrip().startswith("$") for line in body)
    commands: list[str] = []
    continued = False
    for offset, line in enumerate(body):
        stripped = line.strip()
        if stripped.startswith("$"):
            commands.append(stripped[1:].removeprefix(" "))
        elif prompted and stripped and not continued and not stripped.startswith("#"):
            return "", (
                f"line {first + offset} has no `$ ` prompt where other lines have one: output "
                "does not belong in a shell example; put it in a ```text block"
            )
        else:
            commands.append(line)
        continued = stripped.endswith("\\")
    return textwrap.dedent("\n".join(commands)).strip("\n") + "\n", None


def _fence_example(
    path: str,
    relpath: str,
    line: int,
    language: str,
    body: list[str],
    first: int,
    comment: str | None,
) -> Example:
    """Decide the mode of one fenced block (``line`` is its fence, from 1)."""
    source, code_line, indent = _code(body, first)
    base = Example(
        path=path, relpath=relpath, line=line, language=language, mode="output", indent=indent
    )

    def invalid(reason: str) -> Example:
        return replace(base, mode="invalid", reason=reason)

    kind: tuple[str, int, str] | None = None
    if comment is not None:
        parsed = _parse_kind(comment)
        if isinstance(parsed, str):
            return invalid(parsed)
        kind = parsed
    if kind is not None and kind[0] == "skip":
        return replace(base, mode="skip", reason=kind[2], source=source, first_line=code_line)
    shown = language or "unlabelled"
    if language in PYTHON_LANGUAGES | DOCTEST_LANGUAGES:
        is_session = language in DOCTEST_LANGUAGES or source.lstrip().startswith(">>>")
        if kind is None and "pytest.mark.ranks" in source:
            return invalid(
                "this block is a test module using pytest.mark.ranks: put "
                "`<!-- example: ranks -->` on the line right before its fence so that it runs "
                "under pytest with helios-pg's plugin"
            )
        if kind is None:
            mode: Mode = "doctest" if is_session else "python"
            return replace(base, mode=mode, source=source, first_line=code_line)
        if kind[0] == "shell":
            return invalid(
                "`shell` is for console or bash blocks; a python block runs as a "
                "program without a comment, or use ranks, torchrun N or skip: REASON"
            )
        if is_session:
            return invalid(f"`{kind[0]}` needs a program, not a `>>>` session")
        if kind[0] == "ranks":
            return replace(base, mode="ranks", source=source, first_line=code_line)
        return replace(base, mode="torchrun", source=source, first_line=code_line, nproc=kind[1])
    if language in SHELL_LANGUAGES:
        if kind is None:
            return invalid(
                f"a {language} block needs `<!-- example: shell -->` (run by bash from the "
                "repository root) or `<!-- example: skip: REASON -->` on the line right "
                "before its fence; output belongs in a ```text block"
            )
        if kind[0] != "shell":
            return invalid(f"`{kind[0]}` is for python blocks; a {language} block takes shell")
        commands, problem = _shell_source(body, first)
        if problem is not None:
            return invalid(problem)
        return replace(base, mode="shell", source=commands, first_line=code_line)
    if kind is not None:
        return invalid(
            f"a {shown} block is output and is not run, so `{kind[0]}` does not apply; "
            "mark python, console or bash blocks only"
        )
    return base


def _problem(path: str, relpath: str, line: int, reason: str, language: str = "") -> Example:
    return Example(path, relpath, line, language, "invalid", reason=reason)


def parse_markdown(text: str, path: str, relpath: str) -> list[Example]:
    """The fenced blocks of one Markdown (MyST) text, and its problems.

    Args:
        text: The file's content.
        path: The file's path, as tracebacks should name it.
        relpath: The path relative to the repository root, for test ids.

    Returns:
        One :class:`Example` per fence (``output`` for blocks that are not run) and per
        problem, in line order.
    """
    lines = text.splitlines()
    found: list[Example] = []
    _scan(lines, 0, len(lines), path, relpath, found)
    return sorted(found, key=lambda example: example.line)


def _scan(
    lines: list[str], start: int, end: int, path: str, relpath: str, found: list[Example]
) -> None:
    index = start
    while index < end:
        line = lines[index]
        match = _opening(line)
        if match is None:
            if line.strip().startswith("<!-- example"):
                following = lines[index + 1] if index + 1 < end else ""
                if _opening(following) is None:
                    reason = (
                        "this example comment is not on the line right before a code fence, "
                        "so it marks nothing; move it there"
                    )
                    found.append(_problem(path, relpath, index + 1, reason))
            index += 1
            continue
        fence, info = match["fence"], match["info"].strip()
        close = _closing(lines, index + 1, end, fence[0], len(fence))
        if close is None:
            reason = f"this {fence} fence is never closed: end the block with a line of {fence}"
            found.append(_problem(path, relpath, index + 1, reason, _language(info)))
            return
        body = lines[index + 1 : close]
        comment_text = _comment_before(lines, index, start)
        directive = DIRECTIVE.match(info)
        if fence[0] == ":" or (directive is not None and directive["name"] not in CODE_DIRECTIVES):
            name = directive["name"] if directive is not None else ""
            if name not in OPAQUE_DIRECTIVES:
                _scan(lines, index + 1, close, path, relpath, found)
            if comment_text is not None:
                reason = (
                    "an example comment marks a code block, not a directive; move it inside, "
                    "right before the code fence"
                )
                found.append(_problem(path, relpath, index + 1, reason, name))
        else:
            first = index + 2
            language = _language(info)
            if directive is not None:
                language = _language(directive["argument"])
                body, first = _strip_options(body, first)
            found.append(
                _fence_example(path, relpath, index + 1, language, body, first, comment_text)
            )
        index = close + 1


def _comment_before(lines: list[str], index: int, start: int) -> str | None:
    """The kind text of the example comment right before line ``index``, if any.

    A malformed comment (``<!-- example ranks -->``) comes back as text that
    :func:`_parse_kind` rejects, naming it.
    """
    if index <= start:
        return None
    previous = lines[index - 1].strip()
    match = COMMENT.match(previous)
    if match is None:
        if previous.startswith("<!-- example"):
            return f"{previous} (write <!-- example: KIND -->)"
        return None
    if match["colon"] is None:
        return f"{previous} (write <!-- example: KIND -->, with a colon)"
    return match["kind"]


# --- Docstrings ---------------------------------------------------------------------


def _docstring_nodes(path: str) -> dict[str, ast.Constant]:
    """Each docstring of a source file by qualified name (``""`` for the module)."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    found: dict[str, ast.Constant] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                first = child.body[0] if child.body else None
                if (
                    isinstance(first, ast.Expr)
                    and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)
                ):
                    found[name] = first.value  # of overloads, the one with a docstring
                inner = f"{name}.<locals>." if not isinstance(child, ast.ClassDef) else f"{name}."
                visit(child, inner)

    first = tree.body[0] if tree.body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        found[""] = first.value
    visit(tree, "")
    return found


def _documented(module: types.ModuleType) -> Iterator[object]:
    """The module and what its ``__all__`` names, with public classes' members."""
    yield module
    for name in getattr(module, "__all__", ()):
        obj = getattr(module, name)
        if inspect.isclass(obj):
            yield obj
            for attribute, member in vars(obj).items():
                if attribute.startswith("_"):
                    continue
                if isinstance(member, staticmethod | classmethod):
                    yield member.__func__
                elif isinstance(member, property) and member.fget is not None:
                    yield member.fget
                elif inspect.isfunction(member):
                    yield member
        elif inspect.isfunction(obj):
            yield obj


def _where(obj: object) -> tuple[str, str, str] | None:
    """(source file, qualified name, module name) of a module, class or function."""
    if isinstance(obj, types.ModuleType):
        source = obj.__file__
        return (source, "", obj.__name__) if source else None
    target = inspect.unwrap(obj) if callable(obj) else obj
    try:
        source = inspect.getsourcefile(target)  # type: ignore[arg-type]
    except TypeError:
        return None
    qualname = getattr(target, "__qualname__", None)
    module = getattr(target, "__module__", None)
    if source is None or not isinstance(qualname, str) or not isinstance(module, str):
        return None
    return source, qualname, module


def docstring_examples(root: Path) -> list[Example]:
    """The examples in the docstrings of :data:`DOCSTRING_MODULES` and their public names.

    Args:
        root: The repository root, for the test ids.

    Returns:
        One doctest per docstring with ``>>>`` lines, one example per literal block
        that is an example, and one ``invalid`` example per ``Example:`` section that
        holds neither; each docstring once however many names reach it.
    """
    found: dict[str, Example] = {}
    nodes: dict[str, dict[str, ast.Constant]] = {}
    for module_name in DOCSTRING_MODULES:
        module = importlib.import_module(module_name)
        for obj in _documented(module):
            where = _where(obj)
            if where is None:
                continue
            source, qualname, defining = where
            if source not in nodes:
                nodes[source] = _docstring_nodes(source)
            node = nodes[source].get(qualname)
            if node is None:
                continue
            name = f"{defining}.{qualname}" if qualname else defining
            path = Path(source).resolve()
            try:
                relpath = path.relative_to(root.resolve()).as_posix()
            except ValueError:
                relpath = path.as_posix()
            for example in parse_docstring(str(node.value), node.lineno, str(path), relpath):
                found.setdefault(example.location, replace(example, module=defining, name=name))
    return list(found.values())


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _block_after(lines: list[str], index: int) -> tuple[int, int]:
    """The lines ``[start, end)`` indented under line ``index``, blank edges left out."""
    indent = _indent(lines[index])
    end = index + 1
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
        end += 1
    start = index + 1
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return start, end


def parse_docstring(doc: str, first_line: int, path: str, relpath: str) -> list[Example]:
    """The examples of one docstring, and its problems.

    Args:
        doc: The docstring as written (not cleaned), so its lines match the file's.
        first_line: The file line (from 1) on which the docstring starts.
        path: The file's path, as tracebacks should name it.
        relpath: The path relative to the repository root, for test ids.

    Returns:
        One doctest for all its ``>>>`` lines, one example per literal block that is an
        example, and one ``invalid`` example per ``Example:`` section without code.
    """
    lines = doc.splitlines()
    found: list[Example] = []
    doctests = doctest.DocTestParser().get_examples(doc)
    if doctests:
        found.append(
            Example(
                path=path,
                relpath=relpath,
                line=first_line + doctests[0].lineno,
                language="pycon",
                mode="doctest",
                source=doc,
                first_line=first_line,
            )
        )
    sections: list[tuple[int, int]] = []
    for index, line in enumerate(lines):
        stripped = line.strip()
        if index > 0 and stripped in EXAMPLE_HEADERS:
            start, end = _block_after(lines, index)
            sections.append((start, end))
            content = lines[start:end]
            if not any(">>>" in text or text.rstrip().endswith("::") for text in content):
                reason = (
                    f"this {stripped} section holds neither `>>>` lines nor a literal block, "
                    "so its code is neither run nor shown as code: write `Example::` and "
                    "indent the code under it, or use `>>>` lines"
                )
                found.append(_problem(path, relpath, first_line + index, reason, "python"))
    for index, line in enumerate(lines):
        stripped = line.strip()
        directive = RST_CODE.match(stripped)
        in_section = any(start <= index < end for start, end in sections)
        is_literal = stripped in EXAMPLE_LITERALS or (in_section and stripped.endswith("::"))
        if directive is not None:
            if directive["language"] not in PYTHON_LANGUAGES:
                continue
        elif not is_literal or index == 0:
            continue
        start, end = _block_after(lines, index)
        body = lines[start:end]
        if directive is not None:
            body, start = _strip_options(body, start)
        source, code_line, indent = _code(body, first_line + start)
        if not source.strip() or source.lstrip().startswith(">>>"):
            continue
        mode: Mode = "ranks" if "pytest.mark.ranks" in source else "python"
        found.append(
            Example(
                path=path,
                relpath=relpath,
                line=first_line + index,
                language="python",
                mode=mode,
                source=source,
                first_line=code_line,
                indent=indent,
            )
        )
    return found


# --- Running python programs and doctests -------------------------------------------


def _frames_after_runner(exc: BaseException) -> BaseException:
    """``exc`` with this module's own frames cut from the front of its traceback."""
    tb = exc.__traceback__
    here = str(Path(__file__).resolve())
    while tb is not None and str(Path(tb.tb_frame.f_code.co_filename).resolve()) == here:
        tb = tb.tb_next
    return exc.with_traceback(tb)


def _run_program(example: Example, workdir: Path) -> None:
    script = workdir / "example.py"
    script.write_text(example.source, encoding="utf-8")
    main_module = types.ModuleType("__main__")
    main_module.__file__ = str(script)
    main_module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main_module
    sys.argv = [str(script)]
    sys.path[0] = str(workdir)
    exec(_compile(example), main_module.__dict__)


def _compile(example: Example) -> types.CodeType:
    """The example's code, with the line numbers and columns of the file that holds it.

    Blank lines in front keep the line numbers. Code that the file indents (a
    docstring's, a fence in a list) is compiled under ``if True:`` with its indent, so
    a traceback's markers line up with the file's text; unless that is not valid
    Python (a ``__future__`` import), when it is compiled dedented.
    """
    padding = "\n" * (example.first_line - 1)
    if example.indent and example.first_line > 1:
        margin = " " * example.indent
        indented = "".join(
            margin + line if line.strip() else line
            for line in example.source.splitlines(keepends=True)
        )
        with contextlib.suppress(SyntaxError):
            return compile(padding[1:] + "if True:\n" + indented, example.path, "exec")
    return compile(padding + example.source, example.path, "exec")


def _run_doctest(example: Example) -> str | None:
    if example.module:
        globs = dict(vars(importlib.import_module(example.module)))
    else:
        globs = {"__name__": "__main__", "__builtins__": builtins}
    test = doctest.DocTestParser().get_doctest(
        example.source,
        globs,
        example.name or example.location,
        example.path,
        example.first_line - 1,
    )
    runner = doctest.DocTestRunner(verbose=False, optionflags=doctest.ELLIPSIS)
    report = io.StringIO()
    runner.run(test, out=report.write, clear_globs=False)
    return report.getvalue() if runner.failures else None


def _left_group() -> str | None:
    """Destroy a default process group the example left, and say so; None if none."""
    dist: Any = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    try:
        import helios_pg

        helios_pg.shutdown()
    except Exception:
        dist.destroy_process_group()
    return (
        "the example left the default process group initialized: end it with "
        "helios_pg.shutdown(), or run the code inside `with helios_pg.process_group():`"
    )


def _execute(example: Example, workdir: Path) -> list[str]:
    """Run one example in this process (a child of its own); return its failures."""
    problems: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if example.mode == "doctest":
                report = _run_doctest(example)
                if report is not None:
                    problems.append(report)
            else:
                _run_program(example, workdir)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                problems.append(f"the example exited with status {exc.code!r}")
        except BaseException as exc:
            lines = traceback.format_exception(_frames_after_runner(exc))
            problems.append("".join(lines).rstrip())
        left = _left_group()
        if left is not None:
            problems.append(left)
        try:
            atexit._run_exitfuncs()
        except BaseException as exc:
            problems.append(f"an exit handler failed: {exc!r}")
    for warning in caught:
        text = warnings.formatwarning(
            warning.message, warning.category, warning.filename, warning.lineno, warning.line
        )
        problems.append(f"the example emitted a warning: {text.rstrip()}")
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    return problems


def _child(example: Example, workdir: Path, output: Path, result: Path) -> NoReturn:
    status = 70
    try:
        os.setpgid(0, 0)
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
        os.chdir(workdir)
        problems = _execute(example, workdir)
        result.write_text(json.dumps(problems), encoding="utf-8")
        status = 0
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(status)


def _wait(pid: int, limit: float) -> tuple[int, bool]:
    """Wait for child ``pid``; at ``limit`` dump its stacks and kill its process group."""
    deadline = time.monotonic() + limit
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status, False
        if time.monotonic() >= deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGUSR1)
            time.sleep(1.0)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            return status, True
        time.sleep(0.01)


def _run_one(example: Example, limit: float) -> dict[str, object]:
    # Not a TemporaryDirectory: its finalizer would run in the child's exit handlers.
    tmp = tempfile.mkdtemp(prefix="helios-example-")
    try:
        workdir = Path(tmp) / "work"
        workdir.mkdir()
        output, result = Path(tmp) / "output", Path(tmp) / "result.json"
        sys.stdout.flush()
        sys.stderr.flush()
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(example, workdir, output, result)
        status, timed_out = _wait(pid, limit)
        duration = time.monotonic() - started
        # Whatever the example started and left behind goes with it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        text = output.read_text(encoding="utf-8", errors="replace") if output.exists() else ""
        if len(text) > OUTPUT_LIMIT:
            text = "[...]\n" + text[-OUTPUT_LIMIT:]
        code = os.waitstatus_to_exitcode(status)
        if timed_out:
            problems = [
                f"still running after the {limit:.0f} s limit: killed (every thread's stack "
                "is in the output)"
            ]
        elif result.exists() and code == 0:
            problems = json.loads(result.read_text(encoding="utf-8"))
        else:
            how = f"signal {-code}" if code < 0 else f"exit status {code}"
            problems = [f"the example's process ended before its checks ran ({how})"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "id": example.location,
        "problems": problems,
        "output": text,
        "seconds": round(duration, 3),
    }


def run_examples(examples: Iterable[Example], limit: float) -> Iterator[dict[str, object]]:
    """Run python programs and doctests, each in a forked child; yield each result.

    The examples without torch run first, before this process imports torch.

    Args:
        examples: Examples of a mode in :data:`IN_PROCESS_MODES`.
        limit: Seconds each example may run.

    Yields:
        ``{"id", "problems", "output", "seconds"}`` per example; no problems means it
        passed.
    """
    pending = list(examples)
    ordered = [e for e in pending if not e.uses_torch] + [e for e in pending if e.uses_torch]
    torch_loaded = False
    for example in ordered:
        if example.uses_torch and not torch_loaded:
            torch_loaded = True
            with contextlib.suppress(ImportError):
                importlib.import_module("torch.distributed")
        yield _run_one(example, limit)


def main(argv: list[str]) -> int:
    """Run the examples of a JSON file; print one ``RESULT {json}`` line for each.

    Args:
        argv: ``[program, JOBS, LIMIT]``: a JSON list of :class:`Example` fields and
            the seconds each example may run.

    Returns:
        0; the results say which examples failed.
    """
    _, jobs, limit = argv
    examples = [Example(**fields) for fields in json.loads(Path(jobs).read_text("utf-8"))]
    for outcome in run_examples(examples, float(limit)):
        sys.stdout.write(RESULT_PREFIX + json.dumps(outcome) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
