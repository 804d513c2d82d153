"""A failure report never depends on the exception behaving."""

from __future__ import annotations

import sys

import pytest
from torch._utils import ExceptionWrapper

from helios_pg._reports._render import HEADLINE_LIMIT, PART_LIMIT, callstack, headline


class BrokenStrError(Exception):
    def __str__(self) -> str:
        raise RuntimeError


class BrokenBothError(BrokenStrError):
    def __repr__(self) -> str:
        raise RuntimeError


class NotAStringError(Exception):
    def __str__(self) -> str:
        return 7  # type: ignore[return-value]  # noqa: PLE0307 - the case under test


def raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as caught:
        return caught


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ValueError("bad batch 7\nsecond line"), "ValueError: bad batch 7"),
        (ValueError(), "ValueError"),
        (BrokenStrError(), "BrokenStrError: BrokenStrError()"),
        (BrokenBothError(), "BrokenBothError: <BrokenBothError: str() and repr() failed>"),
        (NotAStringError(), "NotAStringError: NotAStringError()"),
        (ValueError("lone \udc80 surrogate"), "ValueError: lone \\udc80 surrogate"),
    ],
)
def test_the_headline_survives_any_exception(error: BaseException, expected: str) -> None:
    line = headline(error)
    assert line == expected
    line.encode("utf-8")  # writable anywhere


def test_a_huge_message_is_bounded_once() -> None:
    error = raised(ValueError("x" * 1_000_000))

    line = headline(error)
    stack = callstack(type(error), error, error.__traceback__)

    assert len(line) < HEADLINE_LIMIT + 100
    assert line.endswith("more characters)")
    assert len(stack) < 2 * PART_LIMIT
    assert "Traceback (most recent call last)" in stack


def test_the_callstack_of_an_exception_that_cannot_be_rendered() -> None:
    error = raised(BrokenBothError())

    stack = callstack(type(error), error, error.__traceback__)

    assert "raise error" in stack
    assert "BrokenBothError" in stack


def test_a_dataloader_workers_exception_is_named_by_the_workers_own_line() -> None:
    # How a DataLoader raises a worker's exception again in the main process.
    try:
        message = "shard 20 is unreadable: checksum mismatch"
        raise OSError(message)
    except OSError:
        wrapped = ExceptionWrapper(sys.exc_info(), where="in DataLoader worker process 0")  # type: ignore[no-untyped-call]
    with pytest.raises(OSError, match="Caught OSError") as caught:
        wrapped.reraise()  # type: ignore[no-untyped-call]

    assert headline(caught.value) == (
        "OSError: shard 20 is unreadable: checksum mismatch (in DataLoader worker process 0)"
    )
