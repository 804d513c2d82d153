"""CI's matrix (tools/legs.py): a run left out of a leg is made by another entry."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

import pytest

from tools import check_isolation
from tools.legs import GROUPS, LEGS, WHEELS, Leg
from tools.matrix import LEG_SELECTION, ROOT, leg_environment


def covers(tests: tuple[str, ...], path: str) -> bool:
    return any(PurePosixPath(path).is_relative_to(test) for test in tests)


def runs_elsewhere(leg: Leg, path: str) -> bool:
    """Whether an entry other than ``leg`` runs ``path`` on its Python and versions."""
    others = [
        other
        for other in LEGS.values()
        if other is not leg
        and (other.python, other.resolution) == (leg.python, leg.resolution)
        and covers(other.tests, path)
        and not covers(other.ignore, path)
    ]
    # The wheels run on the newest Python with the newest versions.
    wheels = [
        pkg
        for pkg in WHEELS.values()
        if (leg.python, leg.resolution) == (check_isolation.PYTHON, "highest")
        and covers((pkg.tests,), path)
    ]
    return bool(others or wheels)


@pytest.mark.parametrize(
    ("leg", "path"),
    [(leg, path) for leg in LEGS.values() for path in leg.ignore],
    ids=lambda value: value.name if isinstance(value, Leg) else str(value),
)
def test_every_path_a_leg_leaves_out_runs_in_another_entry(leg: Leg, path: str) -> None:
    assert runs_elsewhere(leg, path), f"{leg.name} leaves out {path}, which nothing else runs"


def test_floor_and_top_leave_out_what_only_repeats_another_entry() -> None:
    assert set(LEGS["floor"].ignore) == {"tests/env", "tests/log"}
    assert set(LEGS["top"].ignore) == {pkg.tests for pkg in check_isolation.PACKAGES}


def test_both_ends_of_the_python_range_run_without_torch() -> None:
    torch_free = {pkg.name for pkg in check_isolation.PACKAGES if pkg.torch_free}
    assert torch_free == {"helios-env", "helios-log"}
    pythons = {leg.python for leg in LEGS.values() if set(leg.packages) <= torch_free}
    # helios-env's and helios-log's wheels are installed and tested without torch.
    pythons.add(check_isolation.PYTHON)
    assert pythons >= {LEGS["floor"].python, LEGS["top"].python}


def test_all_names_every_leg_and_every_wheel() -> None:
    assert set(GROUPS["all"]) == set(LEGS) | set(WHEELS)
    assert set(GROUPS["isolation"]) == set(WHEELS)


def test_the_torch_free_entries_and_the_others_make_the_whole_matrix() -> None:
    torch_free, with_torch = GROUPS["torch-free"], GROUPS["with-torch"]
    assert sorted([*torch_free, *with_torch]) == sorted(GROUPS["all"])
    assert set(torch_free) == {"no-torch-3.10", "wheel-helios-env", "wheel-helios-log"}
    for name in torch_free:
        packages = LEGS[name].packages if name in LEGS else (WHEELS[name].name,)
        assert set(packages) <= {"helios-env", "helios-log"}


def test_a_legs_tests_write_bytecode_and_never_see_the_workspaces_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("HELIOS_KEPT", "kept")
    env = leg_environment()
    assert not {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE"} & env.keys()
    assert env["HELIOS_KEPT"] == "kept"


def selects(selection: str, *marks: str) -> bool:
    """Whether pytest's ``-m selection`` takes a test marked ``marks``."""
    names = ("launchers", "slow", "multinode", "faults", "gpu", "ranks")
    return bool(eval(selection, {"__builtins__": {}}, {name: name in marks for name in names}))


def test_the_fault_scenarios_run_at_both_ends_of_the_range_and_not_in_the_main_run() -> None:
    assert selects(LEGS["floor"].selection, "faults")
    assert selects(LEGS["floor"].selection)
    assert selects(LEGS["top"].selection, "faults")
    assert selects(LEG_SELECTION, "faults")
    assert selects(LEG_SELECTION)
    addopts = re.search(r'"-m", "([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert addopts, "pyproject.toml's addopts has no -m"
    main_selection = addopts[1]
    assert not selects(main_selection, "faults")
    assert selects(main_selection)
    for mark in ("launchers", "slow", "multinode"):
        assert not selects(LEGS["floor"].selection, mark)


def test_the_floor_runs_the_ranks_plugin_at_the_lowest_pytest_its_extra_allows() -> None:
    floor = LEGS["floor"]
    assert "helios-pg[pytest]" in floor.packages
    assert floor.resolution == "lowest-direct"
    assert covers(floor.tests, "tests/pg/test_plugin.py")
    assert not covers(floor.ignore, "tests/pg/test_plugin.py")
