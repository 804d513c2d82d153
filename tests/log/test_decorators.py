"""on_global_rank and on_local_rank, in one process with the launcher variables set by each test."""

from __future__ import annotations

import pytest

from helios_log import on_global_rank, on_local_rank
from tests.log.conftest import SetRanks


class Counter:
    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []

    def record(self, value: int, *, label: str = "") -> int:
        self.calls.append((value, label))
        return value * 10


def test_on_global_rank_runs_in_a_plain_process() -> None:
    counter = Counter()
    gated = on_global_rank()(counter.record)
    assert gated(4, label="x") == 40
    assert counter.calls == [(4, "x")]


def test_on_local_rank_runs_in_a_plain_process() -> None:
    counter = Counter()
    gated = on_local_rank()(counter.record)
    assert gated(4) == 40
    assert counter.calls == [(4, "")]


def test_on_global_rank_runs_on_the_chosen_rank_and_returns_its_value(
    set_ranks: SetRanks,
) -> None:
    set_ranks(rank=3, world_size=4, local_rank=1, local_world_size=2)
    counter = Counter()
    gated = on_global_rank(3)(counter.record)
    assert gated(2, label="y") == 20
    assert counter.calls == [(2, "y")]


def test_on_global_rank_returns_none_elsewhere_without_calling(set_ranks: SetRanks) -> None:
    set_ranks(rank=2, world_size=4, local_rank=0, local_world_size=2)
    counter = Counter()
    gated = on_global_rank(0)(counter.record)
    assert gated(2) is None
    assert counter.calls == []


def test_on_local_rank_runs_on_local_rank_zero_of_a_later_node(set_ranks: SetRanks) -> None:
    set_ranks(rank=2, world_size=4, local_rank=0, local_world_size=2)
    counter = Counter()
    gated = on_local_rank(0)(counter.record)
    assert gated(5) == 50
    assert counter.calls == [(5, "")]


def test_on_local_rank_returns_none_on_other_local_ranks_without_calling(
    set_ranks: SetRanks,
) -> None:
    set_ranks(rank=1, world_size=4, local_rank=1, local_world_size=2)
    counter = Counter()
    gated = on_local_rank(0)(counter.record)
    assert gated(5) is None
    assert counter.calls == []


def test_on_global_rank_reads_the_rank_at_call_time(set_ranks: SetRanks) -> None:
    counter = Counter()
    gated = on_global_rank(1)(counter.record)
    set_ranks(rank=0, world_size=2, local_rank=0, local_world_size=2)
    assert gated(1) is None
    set_ranks(rank=1, world_size=2, local_rank=1, local_world_size=2)
    assert gated(2) == 20
    assert counter.calls == [(2, "")]


def test_on_local_rank_reads_the_rank_at_call_time(set_ranks: SetRanks) -> None:
    counter = Counter()
    gated = on_local_rank(0)(counter.record)
    set_ranks(rank=1, world_size=2, local_rank=1, local_world_size=2)
    assert gated(1) is None
    set_ranks(rank=1, world_size=2, local_rank=0, local_world_size=1)
    assert gated(2) == 20


def test_the_decorated_function_keeps_its_name_doc_and_wrapped() -> None:
    def save(path: str) -> int:
        """Save to path."""
        return len(path)

    gated = on_global_rank()(save)
    assert gated.__name__ == "save"
    assert gated.__doc__ == "Save to path."
    assert gated.__wrapped__ is save  # type: ignore[attr-defined]


def test_the_decorator_works_on_methods(set_ranks: SetRanks) -> None:
    class Saver:
        def __init__(self) -> None:
            self.saved: list[str] = []

        @on_global_rank()
        def save(self, path: str) -> str:
            self.saved.append(path)
            return path

    saver = Saver()
    assert saver.save("a") == "a"
    set_ranks(rank=1, world_size=2, local_rank=1, local_world_size=2)
    assert saver.save("b") is None
    assert saver.saved == ["a"]


def test_a_negative_rank_is_a_value_error_at_decoration_time() -> None:
    with pytest.raises(ValueError, match=r"rank=-2.*use rank=0"):
        on_local_rank(-2)


def test_a_rank_that_is_not_an_int_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"rank must be an int, got 1.5"):
        on_global_rank(1.5)  # type: ignore[arg-type]


def test_using_the_decorator_without_parentheses_names_the_fix() -> None:
    with pytest.raises(TypeError, match=r"@on_global_rank\(\)"):

        @on_global_rank  # type: ignore[arg-type]
        def job() -> None:
            """Never decorated."""


def test_the_wrapper_keeps_the_signature_for_type_checkers() -> None:
    # Checked by mypy (strict, warn_unused_ignores): each ignore below is needed only
    # because the wrapper kept the parameters; a wrapper typed `(...) -> R | None`
    # would make them unused, and mypy would fail.
    @on_global_rank()
    def add(a: int, *, b: int = 1) -> int:
        return a + b

    result: int | None = add(1, b=2)
    assert result == 3
    with pytest.raises(TypeError):
        add("one")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        add(1, c=2)  # type: ignore[call-arg]


def test_the_wrapper_return_type_admits_none() -> None:
    # Checked by mypy: `int` is not assignable from `int | None`, so the ignore is used.
    @on_local_rank()
    def one() -> int:
        return 1

    value: int = one()  # type: ignore[assignment]
    assert value == 1
