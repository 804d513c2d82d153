"""How a sample output of the documentation is compared with what a run printed.

A sample is a run of whole lines of the run's output, after both are normalised: what
legitimately varies from run to run reads the same on both sides (:data:`VARIES`), runs
of blanks are one space (a column's width follows its numbers) and trailing blanks go.
In a sample, ``...`` stands for any text (doctest's ELLIPSIS), and for any number of lines
on a line of its own; a number written with a decimal point or an exponent (a time, a
rate, an address, a version: :data:`NUMBER`) stands for any number. A sample that no run
here can print is checked for its shape instead: it must be one message template of the
package that prints it (:func:`fits_template`), literal text as written, each ``{...}``
of an f-string (or a string joined to it) any text.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
import socket
from pathlib import Path

__all__ = ["ELLIPSIS", "NUMBER", "SAMPLE_HOST", "VARIES", "find", "fits_template", "normalise"]

ELLIPSIS = "..."
SAMPLE_HOST = "vm"  # a sample's host name, which stands for the host that runs it
VARIES = [  # what varies, how it is found, and what it reads as on both sides
    ("a traceback's file and line", r'File "[^"\n]*", line \d+', 'File "<file>", line <n>'),
    ("a source file's name and line", r"\b[\w.-]+\.py:\d+\b", "<file>:<n>"),
    ("a thread's id", r"\b0x[0-9a-fA-F]+\b", "<id>"),
    ("a process id", r"\bpid:? \d+", "pid <pid>"),
    ("a port", r"(?:(?<=\d)|(?<=\])|(?<=localhost)):\d{2,5}\b", ":<port>"),
    ("the kernel's ephemeral ports", r"\bports \d+-\d+", "ports <range>"),
]
NUMBER = re.compile(r"(?<![\w.])\d+(?:(?:\.\d+)+(?:[eE][-+]?\d+)?|[eE][-+]?\d+)(?![\w.])")
_ANY_NUMBER = r"\d+(?:\.\d+)*(?:[eE][-+]?\d+)?"
_BLANKS = re.compile(r"[ \t]+")
_MIN_LITERAL = 20  # characters of literal text a template needs to count as one


def normalise(text: str, host: str) -> str:
    """``text`` with what varies replaced by its reading, ``host`` read as the host."""
    text = re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", "<host>", text)
    for _, pattern, reading in VARIES:
        text = re.sub(pattern, reading, text)
    lines = [_BLANKS.sub(" ", line).rstrip() for line in text.splitlines()]
    return "\n".join(lines).strip("\n")


def _literal_text(text: str) -> str:
    """A regex for ``text``, each of its :data:`NUMBER` any number."""
    return _ANY_NUMBER.join(map(re.escape, NUMBER.split(text)))


def _pattern(sample: str) -> re.Pattern[str]:
    parts = []
    for line in sample.splitlines():
        if line.strip() == ELLIPSIS:
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(r"[\s\S]*?".join(map(_literal_text, line.split(ELLIPSIS))) + r"\n")
    return re.compile("^" + "".join(parts), re.MULTILINE)


def find(sample: str, output: str) -> str | None:
    """None when ``sample`` is in ``output``; else what differs, both normalised."""
    sample = normalise(sample, SAMPLE_HOST)
    output = normalise(output, socket.gethostname()) + "\n"
    if _pattern(sample).search(output):
        return None
    lines = sample.splitlines()
    missing = next((line for line in lines if not _pattern(line).search(output)), None)
    why = f"no line of the output reads {missing!r}" if missing else "its lines are not together"
    return (
        f"{why}\n--- the sample, normalised ---\n{sample}\n--- the output, normalised ---\n{output}"
    )


def _literal(node: ast.expr) -> list[str | None] | None:
    """The pieces of a string expression, None for each computed one; None if not a string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        pieces = [_literal(value) for value in node.values]
        return [piece for part in pieces for piece in (part or [None])]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal(node.left), _literal(node.right)
        if left is not None or right is not None:
            return [*(left or [None]), *(right or [None])]
    return None


@functools.cache
def _templates(package: str) -> tuple[re.Pattern[str], ...]:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return ()
    origin = Path(spec.origin)
    paths = sorted(origin.parent.rglob("*.py")) if spec.submodule_search_locations else [origin]
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            pieces = _literal(node) if isinstance(node, ast.expr) else None
            if pieces and sum(len(p) for p in pieces if p) >= _MIN_LITERAL and None in pieces:
                text = "".join(_BLANKS.sub(" ", p) if p else "\0" for p in pieces).strip()
                found.append(re.compile(r"[\s\S]*?".join(map(re.escape, text.split("\0")))))
    return tuple(found)


def fits_template(sample: str, package: str) -> str | None:
    """None when ``sample`` is one of the message templates of ``package`` (or a module)
    filled in; else why not."""
    templates = _templates(package)
    if not templates:
        return f"{package} is not importable here, or has no message template"
    text = "\n".join(_BLANKS.sub(" ", line).rstrip() for line in sample.strip().splitlines())
    if any(template.fullmatch(text) for template in templates):
        return None
    return f"the sample fits none of the {len(templates)} message templates of {package}"
