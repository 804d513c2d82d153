"""helios-env's small shared readers and writers: on/off variables, host:port endpoints."""

from __future__ import annotations

import pytest

from helios_env.integration import endpoint, switch


@pytest.mark.parametrize("raw", ["1", "true", "Yes", " ON "])
def test_the_spellings_of_on(raw: str) -> None:
    assert switch("HELIOS_X", raw, default=False) is True


@pytest.mark.parametrize("raw", ["0", "false", "No", " off "])
def test_the_spellings_of_off(raw: str) -> None:
    assert switch("HELIOS_X", raw, default=True) is False


@pytest.mark.parametrize("default", [True, False])
@pytest.mark.parametrize("raw", [None, "", "  "])
def test_unset_or_empty_is_the_default(default: bool, raw: str | None) -> None:
    assert switch("HELIOS_X", raw, default=default) is default


@pytest.mark.parametrize(("default", "fix"), [(True, "HELIOS_X=0"), (False, "HELIOS_X=1")])
def test_anything_else_is_refused_naming_the_variable_and_the_fix(default: bool, fix: str) -> None:
    with pytest.raises(ValueError, match=r"HELIOS_X must be 1 or 0 .*got 'maybe'") as caught:
        switch("HELIOS_X", "maybe", default=default)
    assert fix in str(caught.value)


@pytest.mark.parametrize(
    ("host", "written"),
    [
        ("node1", "node1:29500"),
        ("10.0.0.4", "10.0.0.4:29500"),
        ("fd00::1", "[fd00::1]:29500"),
        ("[fd00::1]", "[fd00::1]:29500"),
    ],
)
def test_an_endpoint_brackets_an_ipv6_address_once(host: str, written: str) -> None:
    assert endpoint(host, 29500) == written
