"""global_print and local_print, in one process with the launcher variables set by each test."""

from __future__ import annotations

import builtins

import pytest

from helios_env import LauncherEnvError
from helios_log import global_print, local_print
from tests.log.conftest import RecordingFile, SetRanks


def test_global_print_prints_in_a_plain_process(capsys: pytest.CaptureFixture[str]) -> None:
    global_print("hello", 1)
    assert capsys.readouterr().out == "hello 1\n"


def test_local_print_prints_in_a_plain_process(capsys: pytest.CaptureFixture[str]) -> None:
    local_print("hello", 1)
    assert capsys.readouterr().out == "hello 1\n"


def test_global_print_prints_on_rank_zero(
    set_ranks: SetRanks, capsys: pytest.CaptureFixture[str]
) -> None:
    set_ranks(rank=0, world_size=4, local_rank=0, local_world_size=2)
    global_print("hello")
    assert capsys.readouterr().out == "hello\n"


@pytest.mark.parametrize(("rank", "local_rank"), [(1, 1), (2, 0), (3, 1)])
def test_global_print_is_silent_on_other_global_ranks(
    set_ranks: SetRanks, capsys: pytest.CaptureFixture[str], rank: int, local_rank: int
) -> None:
    set_ranks(rank=rank, world_size=4, local_rank=local_rank, local_world_size=2)
    global_print("hello")
    assert capsys.readouterr().out == ""


def test_global_print_prints_on_the_chosen_global_rank(
    set_ranks: SetRanks, capsys: pytest.CaptureFixture[str]
) -> None:
    set_ranks(rank=2, world_size=4, local_rank=0, local_world_size=2)
    global_print("hello", global_rank=2)
    assert capsys.readouterr().out == "hello\n"


def test_global_print_with_a_chosen_rank_is_silent_on_rank_zero(
    set_ranks: SetRanks, capsys: pytest.CaptureFixture[str]
) -> None:
    set_ranks(rank=0, world_size=4, local_rank=0, local_world_size=2)
    global_print("hello", global_rank=2)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("rank", [0, 2])
def test_local_print_prints_on_local_rank_zero_of_every_node(
    set_ranks: SetRanks, capsys: pytest.CaptureFixture[str], rank: int
) -> None:
    set_ranks(rank=rank, world_size=4, local_rank=0, local_world_size=2)
    local_print("hello")
    assert capsys.readouterr().out == "hello\n"


@pytest.mark.parametrize("rank", [1, 3])
def test_local_print_is_silent_on_other_local_ranks(
    set_ranks: SetRanks, capsys: pytest.CaptureFixture[str], rank: int
) -> None:
    set_ranks(rank=rank, world_size=4, local_rank=1, local_world_size=2)
    local_print("hello")
    assert capsys.readouterr().out == ""


def test_local_print_prints_on_the_chosen_local_rank(
    set_ranks: SetRanks, capsys: pytest.CaptureFixture[str]
) -> None:
    set_ranks(rank=3, world_size=4, local_rank=1, local_world_size=2)
    local_print("hello", local_rank=1)
    assert capsys.readouterr().out == "hello\n"


def test_global_print_reads_the_rank_at_call_time(
    set_ranks: SetRanks, capsys: pytest.CaptureFixture[str]
) -> None:
    set_ranks(rank=1, world_size=2, local_rank=1, local_world_size=2)
    global_print("first")
    set_ranks(rank=0, world_size=2, local_rank=0, local_world_size=2)
    global_print("second")
    assert capsys.readouterr().out == "second\n"


def test_local_print_reads_the_rank_at_call_time(
    set_ranks: SetRanks, capsys: pytest.CaptureFixture[str]
) -> None:
    set_ranks(rank=1, world_size=2, local_rank=1, local_world_size=2)
    local_print("first")
    set_ranks(rank=1, world_size=2, local_rank=0, local_world_size=1)
    local_print("second")
    assert capsys.readouterr().out == "second\n"


def test_print_keyword_arguments_pass_through(recording_file: RecordingFile) -> None:
    global_print("a", "b", sep="-", end="!", file=recording_file, flush=True)
    local_print("c", "d", sep="+", end="?", file=recording_file, flush=True)
    assert recording_file.text == "a-b!c+d?"
    assert recording_file.flushes == 2


def test_print_without_flush_does_not_flush(recording_file: RecordingFile) -> None:
    global_print("a", file=recording_file)
    assert recording_file.text == "a\n"
    assert recording_file.flushes == 0


def test_a_silent_global_print_writes_nothing_to_its_file(
    set_ranks: SetRanks, recording_file: RecordingFile
) -> None:
    set_ranks(rank=1, world_size=2, local_rank=1, local_world_size=2)
    global_print("hello", file=recording_file, flush=True)
    assert recording_file.writes == []
    assert recording_file.flushes == 0


def test_a_silent_local_print_writes_nothing_to_its_file(
    set_ranks: SetRanks, recording_file: RecordingFile
) -> None:
    set_ranks(rank=1, world_size=2, local_rank=1, local_world_size=2)
    local_print("hello", file=recording_file, flush=True)
    assert recording_file.writes == []
    assert recording_file.flushes == 0


def test_a_silent_call_never_calls_print(
    set_ranks: SetRanks, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[object, ...]] = []

    def spy(*args: object, **kwargs: object) -> None:
        calls.append(args)

    monkeypatch.setattr(builtins, "print", spy)
    set_ranks(rank=1, world_size=2, local_rank=1, local_world_size=2)
    global_print("hello")
    local_print("hello")
    global_print("hello", global_rank=1)
    assert calls == [("hello",)]


def test_an_unknown_keyword_fails_on_a_silent_rank_too(set_ranks: SetRanks) -> None:
    set_ranks(rank=1, world_size=2, local_rank=1, local_world_size=2)
    with pytest.raises(TypeError, match="colour"):
        global_print("hello", colour="red")  # type: ignore[call-overload]


def test_a_negative_global_rank_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"global_rank=-1.*use global_rank=0"):
        global_print("hello", global_rank=-1)


def test_a_negative_local_rank_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"local_rank=-1.*use local_rank=0"):
        local_print("hello", local_rank=-1)


def test_a_rank_that_is_not_an_int_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match=r"global_rank must be an int, got '0'"):
        global_print("hello", global_rank="0")  # type: ignore[call-overload]


def test_a_bool_rank_is_refused() -> None:
    with pytest.raises(TypeError, match="got True"):
        local_print("hello", local_rank=True)


def test_a_malformed_launcher_variable_surfaces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "abc")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(LauncherEnvError, match="RANK"):
        global_print("hello")
