"""The README's error list and its map from helios-ml and FHElium match the code."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
PACKAGES = ("helios_env", "helios_pg", "helios_collectives", "helios_log")
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


def section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert match is not None, f"the README has no section {title!r}"
    return match.group(1)


def exported_errors() -> list[str]:
    found = []
    for name in PACKAGES:
        module = importlib.import_module(name)
        for public in module.__all__:
            obj = getattr(module, public)
            if isinstance(obj, type) and issubclass(obj, Exception):
                found.append(public)
    return found


@pytest.mark.parametrize("error", exported_errors())
def test_every_exported_error_is_listed(error: str) -> None:
    assert f"| `{error}` |" in section("Errors")


def map_rows() -> dict[str, str]:
    rows = {}
    for line in section("Coming from helios-ml or FHElium").splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("`helios_"):
            rows[cells[0]] = cells[1].strip("`")
    return rows


@pytest.mark.parametrize(
    "name", [f"`{n}`" for n in HELIOS_ML] + [f"FHElium `{n}`" for n in FHELIUM]
)
def test_every_helios_ml_and_fhelium_name_maps_to_a_public_helios_name(name: str) -> None:
    target = map_rows().get(name)
    assert target is not None, f"{name} is not mapped"
    package, _, attribute = target.partition(".")
    module = importlib.import_module(package)
    assert attribute in module.__all__, target
