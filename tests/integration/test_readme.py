"""The README and the docs link to what exists, the name map matches the code, and the
README's benchmark table is the one tools/bench renders from tools/results.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from tools.bench.render import README_TABLE, bench_table, readme_table, rewrite_readme

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MIGRATING = DOCS / "migrating.md"
HELIOS_ML = (
    "DistributedInfo",
    "is_using_torchrun",
    "init_dist",
    "shutdown_dist",
    "is_dist_active",
    "get_dist_info",
    "get_local_rank",
    "get_global_rank",
    "get_local_world_size",
    "get_world_size",
    "gather_into_tensor",
    "all_reduce_tensors",
    "global_print",
    "local_print",
    "safe_barrier",
)
FHELIUM = ("init", "shutdown", "local_device")

_FENCE = re.compile(r"^(`{3,}|~{3,}).*?^\1[ \t]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
_LINK = re.compile(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_TARGET = re.compile(r"`(helios_[a-z]+)\.([A-Za-z_]+)`")


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts)


def links(path: Path) -> list[str]:
    """Every Markdown link and image target of ``path``, outside code blocks and code spans."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", path.read_text(encoding="utf-8")))
    return _LINK.findall(text)


def relative_links(path: Path) -> list[str]:
    return [
        target
        for target in links(path)
        if not re.match(r"[a-z][a-z0-9+.-]*:", target) and not target.startswith("#")
    ]


def toctree_pages() -> list[str]:
    text = (DOCS / "index.md").read_text(encoding="utf-8")
    match = re.search(r"^(`{3,})\{toctree\}[^\n]*\n(.*?)^\1[ \t]*$", text, re.M | re.S)
    assert match is not None, "docs/index.md has no toctree"
    entries = [line.strip() for line in match.group(2).splitlines()]
    return [entry for entry in entries if entry and not entry.startswith(":")]


def test_the_root_toctree_lists_the_pages_in_order() -> None:
    assert toctree_pages() == [
        "launching",
        "helios-env",
        "helios-pg",
        "helios-collectives",
        "helios-log",
        "training",
        "preemption",
        "testing",
        "failures",
        "benchmarks",
        "migrating",
        "api/index",
    ]


@pytest.mark.parametrize("page", toctree_pages())
def test_the_readme_links_to_every_page_of_the_root_toctree(page: str) -> None:
    targets = {target.partition("#")[0] for target in relative_links(README)}
    assert f"docs/{page}.md" in targets, f"README.md has no link to docs/{page}.md"


@pytest.mark.parametrize("path", [README, *pages()], ids=lambda p: str(Path(p).relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_that_exists(path: Path) -> None:
    missing = [
        target
        for target in relative_links(path)
        if not (path.parent / target.partition("#")[0]).exists()
    ]
    assert not missing, f"{path.relative_to(ROOT)} links to missing files: {missing}"


def test_links_are_found_outside_code_only(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "See [Launching](launching.md#torchrun) and [the site](https://example.org).\n"
        "`[not](a-link.md)` and\n```python\nx = [y](z.md)\n```\n![a figure](plot.svg)\n",
        encoding="utf-8",
    )
    assert links(page) == ["launching.md#torchrun", "https://example.org", "plot.svg"]
    assert relative_links(page) == ["launching.md#torchrun", "plot.svg"]


def map_rows() -> dict[str, str]:
    rows = {}
    for line in MIGRATING.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3:
            continue
        target = _TARGET.search(cells[1])
        if target is not None:
            rows[cells[0]] = f"{target.group(1)}.{target.group(2)}"
    return rows


@pytest.mark.parametrize(
    "name", [f"`{n}`" for n in HELIOS_ML] + [f"FHElium `{n}`" for n in FHELIUM]
)
def test_every_helios_ml_and_fhelium_name_maps_to_a_public_helios_name(name: str) -> None:
    target = map_rows().get(name)
    assert target is not None, f"{name} is not mapped in docs/migrating.md"
    package, _, attribute = target.partition(".")
    module = importlib.import_module(package)
    assert attribute in module.__all__, target


BENCH = json.loads((ROOT / "tools" / "results" / "bench.json").read_text())["cases"]


def readme_benchmark_table(text: str) -> str:
    match = README_TABLE.search(text)
    assert match is not None, "the README has no benchmark table"
    return match.group(0)


def test_the_readme_benchmark_table_is_the_one_rendered_from_tools_results() -> None:
    # python -m tools.bench rewrites it (--no-run: from bench.json, measuring nothing).
    shown = readme_benchmark_table(README.read_text(encoding="utf-8"))
    assert shown == readme_table(BENCH)


def test_the_readme_table_quotes_the_headline_rows_of_bench_json() -> None:
    table = readme_table(BENCH).splitlines()[2:]
    assert [line.split(" | ")[0].lstrip("| ") for line in table] == [
        "import time",
        "gating: global_print on a rank that does not print",
        "per-call instructions, all-reduce of 1 element, world size one (gloo)",
        "coalescing: all-reduce of 64 tensors of 16 floats",
        "the default check, 2 ranks: all-reduce of 1 element",
        "the default check, 8 ranks: all-reduce of 1 element",
        "hostlist: 10,000 nodes, one padded range",
        "2-rank test: init, all-reduce, destroy (median of 30)",
        "2-rank DDP test: construct, forward, backward, step, fresh ranks",
    ]
    headlines = [r for case in BENCH.values() for r in case["rows"] if r["headline"]]
    assert len(headlines) == len(table)
    # Each a measured figure: positive values on both sides, their ratio as stored.
    assert all(r["helios_value"] > 0 and r["alternative_value"] > 0 for r in headlines)
    coalescing = next(line for line in table if line.startswith("| coalescing"))
    # A speed-up is quoted as helios / alternative, with the speed-up beside it.
    row = next(r for r in headlines if r["case"].startswith("coalescing: all-reduce of 64"))
    speed_up = row["ratio"]
    expected = f"| {1 / speed_up:.2g} ({speed_up:.0f}\N{MULTIPLICATION SIGN} faster) |"
    assert coalescing.endswith(expected), coalescing


def test_the_docs_table_is_the_one_rendered_from_tools_results() -> None:
    # docs/benchmarks.md includes tools/results/bench.md.
    shown = (ROOT / "tools" / "results" / "bench.md").read_text(encoding="utf-8")
    assert shown == bench_table(BENCH)
    assert "{include} ../tools/results/bench.md" in (DOCS / "benchmarks.md").read_text()


def test_rewriting_the_readme_replaces_its_benchmark_table_only(tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    stale = text.replace("| import time | `import helios_env, helios_log` |", "| import time | x |")
    assert stale != text
    copy = tmp_path / "README.md"
    copy.write_text(stale, encoding="utf-8")
    rewrite_readme(copy, BENCH)
    assert copy.read_text(encoding="utf-8") == text
    copy.write_text("# No table\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"has no .* table"):
        rewrite_readme(copy, BENCH)
