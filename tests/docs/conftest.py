"""The code examples of ``README.md``, ``packages/*/README.md``, ``docs/**/*.md`` (not
``docs/_build``) and the docstrings of ``packages/*/src``, one test each, run by Sybil
(``sybil_config.py`` says how). pytest collects them where it collects this file, under
ids such as ``tests/docs/conftest.py::docs/testing.md::line:11,column:1``, one
pytest-xdist scope. The ranks examples, and the sample outputs they print, go last: their
one pytest session, started with the first example, runs while the others do.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sybil.integration.pytest import SybilItem

from tests.docs.sybil_config import REPO_ROOT, DocFile, ranks_batch

__all__ = ["pytest_collect_file", "pytest_collection_modifyitems", "ranks_batch"]


class Documentation(pytest.File):
    def collect(self) -> Iterator[DocFile]:
        pages = [p for p in REPO_ROOT.glob("docs/**/*.md") if "_build" not in p.parts]
        readmes = [REPO_ROOT / "README.md", *sorted(REPO_ROOT.glob("packages/*/README.md"))]
        for path in [*readmes, *sorted(pages), *sorted(REPO_ROOT.glob("packages/*/src/**/*.py"))]:
            name = path.relative_to(REPO_ROOT).as_posix()
            yield DocFile.from_parent(self, path=path, name=name, nodeid=f"{self.nodeid}::{name}")


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> Documentation | None:
    return (
        Documentation.from_parent(parent, path=file_path) if file_path == Path(__file__) else None
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(
        key=lambda item: isinstance(item, SybilItem) and item.example.parsed.runs_as() == "ranks"
    )
