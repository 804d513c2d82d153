"""The API reference under ``docs/api/`` documents every public name, once, and nothing else.

The pages are read as text: each autodoc directive (``.. autofunction:: NAME`` and its
kin) inside an ``eval-rst`` block names one documented object. The strict Sphinx build
checks the same from the built reference (``docs/_ext/helios_api.py``); this test
needs no Sphinx and names the page to fix.
"""

from __future__ import annotations

import importlib
import re
from collections import Counter
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
API_DIR = REPO_ROOT / "docs" / "api"
PACKAGES = ("helios_env", "helios_pg", "helios_collectives", "helios_log")
PAGES = (*PACKAGES, "errors")
# Documented beside helios_pg's names: the pytest plugin module and its fixture.
PLUGIN_MODULE = "helios_pg.pytest_plugin"
PLUGIN_NAMES = (f"{PLUGIN_MODULE}.dist_info",)

_FENCE = re.compile(r"^(`{3,}|~{3,})\s*\{eval-rst\}\s*$")
_AUTODOC = re.compile(r"^\.\. auto(\w+)::\s*([\w.]+)")


def autodoc_targets(text: str) -> list[tuple[str, str]]:
    """Return ``(kind, name)`` for each top-level autodoc directive in a page's eval-rst blocks.

    Args:
        text: The Markdown source of a page.

    Returns:
        The directives in page order, such as ``("function", "helios_env.get_dist_info")``.
    """
    targets: list[tuple[str, str]] = []
    closing: str | None = None
    for line in text.splitlines():
        if closing is None:
            fence = _FENCE.match(line)
            if fence is not None:
                closing = fence[1]
            continue
        if line.strip() == closing:
            closing = None
            continue
        directive = _AUTODOC.match(line)
        if directive is not None:
            targets.append((directive[1], directive[2]))
    return targets


def public_names(package: str) -> list[str]:
    """The qualified names in a package's ``__all__``."""
    module = importlib.import_module(package)
    return [f"{package}.{name}" for name in module.__all__]


def page_text(page: str) -> str:
    return (API_DIR / f"{page}.md").read_text(encoding="utf-8")


def documented() -> dict[str, list[str]]:
    """Map each page to the names its autodoc directives document."""
    return {page: [name for _, name in autodoc_targets(page_text(page))] for page in PAGES}


ALL_PUBLIC = [name for package in PACKAGES for name in public_names(package)]


@pytest.mark.parametrize("name", ALL_PUBLIC)
def test_every_public_name_is_documented_once_on_its_package_page(name: str) -> None:
    package = name.split(".", 1)[0]
    pages = documented()
    everywhere = Counter(target for names in pages.values() for target in names)
    assert everywhere[name] == 1, (
        f"{name} is in __all__ of {package}, so docs/api/{package}.md must document it "
        f"exactly once (an autodoc directive in an eval-rst block); found {everywhere[name]}"
    )
    assert name in pages[package], f"{name} is documented outside docs/api/{package}.md"


def test_the_pages_document_nothing_that_is_not_public() -> None:
    allowed = {*ALL_PUBLIC, *PACKAGES, PLUGIN_MODULE, *PLUGIN_NAMES}
    extra = {
        f"docs/api/{page}.md: {name}"
        for page, names in documented().items()
        for name in names
        if name not in allowed
    }
    assert not extra, f"not a public name (in no __all__): {sorted(extra)}"


def test_each_package_page_starts_from_its_module() -> None:
    for package in PACKAGES:
        assert autodoc_targets(page_text(package))[0] == ("module", package)


def test_the_plugin_module_and_fixture_are_documented_with_helios_pg() -> None:
    pg = documented()["helios_pg"]
    assert PLUGIN_MODULE in pg
    for name in PLUGIN_NAMES:
        assert name in pg
    assert ".. py:decorator:: pytest.mark.ranks(" in page_text("helios_pg")
    module = importlib.import_module(PLUGIN_MODULE)
    for name in PLUGIN_NAMES:
        assert name.rsplit(".", 1)[1] in module.__all__


def test_errors_page_renders_the_hierarchy_from_the_code() -> None:
    assert re.search(r"^`{3,}\{helios-error-tree\}$", page_text("errors"), re.MULTILINE)


def test_the_index_lists_every_api_page() -> None:
    index = page_text("index")
    toctree = index.split("```{toctree}", 1)[1].split("```", 1)[0]
    entries = [line.strip() for line in toctree.splitlines()[1:] if line.strip()]
    assert [entry for entry in entries if not entry.startswith(":")] == list(PAGES)


def test_a_name_removed_from_a_page_is_noticed() -> None:
    text = page_text("helios_log")
    assert ("function", "helios_log.local_print") in autodoc_targets(text)
    removed = "\n".join(line for line in text.splitlines() if "helios_log.local_print" not in line)
    assert "helios_log.local_print" not in [name for _, name in autodoc_targets(removed)]


def test_directives_outside_eval_rst_blocks_do_not_count() -> None:
    text = (
        "# page\n\n.. autofunction:: helios_env.get_dist_info\n\n"
        "```python\n.. autofunction:: helios_env.get_world_size\n```\n\n"
        "```{eval-rst}\n.. autoclass:: helios_env.Launcher\n   :members:\n```\n"
    )
    assert autodoc_targets(text) == [("class", "helios_env.Launcher")]
