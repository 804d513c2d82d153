"""RankFilter, RankFieldsFilter and setup_rank_logging, in one process."""

from __future__ import annotations

import logging
import logging.config

import pytest

from helios_log import HANDLER_NAME, RankFieldsFilter, RankFilter, setup_rank_logging
from tests.log.conftest import RecordingFile, SetRanks


def make_record(level: int = logging.INFO, message: str = "hello") -> logging.LogRecord:
    return logging.LogRecord("test", level, __file__, 1, message, None, None)


def attach(
    logger: logging.Logger, stream: RecordingFile, fmt: str, *filters: logging.Filter
) -> None:
    handler = logging.StreamHandler(stream)
    for item in filters:
        handler.addFilter(item)
    handler.setFormatter(logging.Formatter(fmt))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)


# RankFilter


def test_rank_filter_passes_records_in_a_plain_process() -> None:
    assert RankFilter().filter(make_record())


def test_rank_filter_passes_records_on_the_chosen_rank(set_ranks: SetRanks) -> None:
    set_ranks(rank=2, world_size=4, local_rank=0, local_world_size=2)
    assert RankFilter(2).filter(make_record())


def test_rank_filter_drops_records_on_other_ranks(set_ranks: SetRanks) -> None:
    set_ranks(rank=2, world_size=4, local_rank=0, local_world_size=2)
    assert not RankFilter(0).filter(make_record(logging.CRITICAL))


def test_rank_filter_accepts_several_ranks(set_ranks: SetRanks) -> None:
    rank_filter = RankFilter([1, 3])
    passed = []
    for rank in range(4):
        set_ranks(rank=rank, world_size=4, local_rank=rank % 2, local_world_size=2)
        passed.append(rank_filter.filter(make_record()))
    assert passed == [False, True, False, True]


def test_rank_filter_on_local_ranks_passes_once_per_node(set_ranks: SetRanks) -> None:
    rank_filter = RankFilter(0, local=True)
    passed = []
    for rank in range(4):
        set_ranks(rank=rank, world_size=4, local_rank=rank % 2, local_world_size=2)
        passed.append(rank_filter.filter(make_record()))
    assert passed == [True, False, True, False]


def test_rank_filter_passes_records_at_all_ranks_level_on_every_rank(
    set_ranks: SetRanks,
) -> None:
    set_ranks(rank=1, world_size=2, local_rank=1, local_world_size=2)
    rank_filter = RankFilter(0, all_ranks_level=logging.WARNING)
    assert rank_filter.filter(make_record(logging.WARNING))
    assert rank_filter.filter(make_record(logging.ERROR))


def test_rank_filter_drops_records_below_all_ranks_level_on_other_ranks(
    set_ranks: SetRanks,
) -> None:
    set_ranks(rank=1, world_size=2, local_rank=1, local_world_size=2)
    assert not RankFilter(0, all_ranks_level="WARNING").filter(make_record(logging.INFO))


def test_rank_filter_reads_the_rank_for_each_record(set_ranks: SetRanks) -> None:
    rank_filter = RankFilter(0)
    set_ranks(rank=1, world_size=2, local_rank=1, local_world_size=2)
    first = rank_filter.filter(make_record())
    set_ranks(rank=0, world_size=2, local_rank=0, local_world_size=2)
    second = rank_filter.filter(make_record())
    assert (first, second) == (False, True)


def test_rank_filter_takes_level_names() -> None:
    assert RankFilter(all_ranks_level="warning").all_ranks_level == logging.WARNING


def test_rank_filter_refuses_a_negative_rank() -> None:
    with pytest.raises(ValueError, match=r"ranks=-1"):
        RankFilter([0, -1])


def test_rank_filter_refuses_no_ranks() -> None:
    with pytest.raises(ValueError, match=r"at least one rank.*ranks=0"):
        RankFilter([])


def test_rank_filter_refuses_an_unknown_level_name() -> None:
    with pytest.raises(ValueError, match=r"all_ranks_level .* got 'LOUD'"):
        RankFilter(all_ranks_level="LOUD")


# RankFieldsFilter


def test_rank_fields_filter_adds_the_rank_fields(set_ranks: SetRanks) -> None:
    set_ranks(rank=3, world_size=4, local_rank=1, local_world_size=2)
    record = make_record()
    assert RankFieldsFilter().filter(record)
    fields = {
        name: record.__dict__[name]
        for name in ("rank", "world_size", "local_rank", "local_world_size", "rank_prefix")
    }
    assert fields == {
        "rank": 3,
        "world_size": 4,
        "local_rank": 1,
        "local_world_size": 2,
        "rank_prefix": "[rank 3/4]",
    }


def test_rank_fields_filter_prefix_in_a_plain_process() -> None:
    record = make_record()
    RankFieldsFilter().filter(record)
    assert record.__dict__["rank_prefix"] == "[rank 0/1]"


def test_rank_fields_are_read_when_each_record_is_handled(
    set_ranks: SetRanks, fresh_logger: logging.Logger, recording_file: RecordingFile
) -> None:
    attach(fresh_logger, recording_file, "%(rank_prefix)s %(message)s", RankFieldsFilter())
    set_ranks(rank=1, world_size=2, local_rank=1, local_world_size=2)
    fresh_logger.info("one")
    set_ranks(rank=0, world_size=2, local_rank=0, local_world_size=2)
    fresh_logger.info("two")
    assert recording_file.text == "[rank 1/2] one\n[rank 0/2] two\n"


def test_rank_fields_fill_a_format_string(
    set_ranks: SetRanks, fresh_logger: logging.Logger, recording_file: RecordingFile
) -> None:
    set_ranks(rank=2, world_size=4, local_rank=0, local_world_size=2)
    fmt = "%(rank)s %(world_size)s %(local_rank)s %(local_world_size)s %(message)s"
    attach(fresh_logger, recording_file, fmt, RankFieldsFilter())
    fresh_logger.warning("hi")
    assert recording_file.text == "2 4 0 2 hi\n"


# dictConfig


def dict_config(logger_name: str, stream: RecordingFile) -> dict[str, object]:
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            "rank0": {"()": "helios_log.RankFilter", "ranks": 0, "all_ranks_level": "WARNING"},
            "rank_fields": {"()": "helios_log.RankFieldsFilter"},
        },
        "formatters": {"ranked": {"format": "%(rank_prefix)s %(levelname)s %(message)s"}},
        "handlers": {
            "out": {
                "class": "logging.StreamHandler",
                "stream": stream,
                "filters": ["rank0", "rank_fields"],
                "formatter": "ranked",
            }
        },
        "loggers": {logger_name: {"handlers": ["out"], "level": "INFO"}},
    }


def test_dict_config_logs_info_with_a_prefix_on_rank_zero(
    set_ranks: SetRanks, fresh_logger: logging.Logger, recording_file: RecordingFile
) -> None:
    logging.config.dictConfig(dict_config(fresh_logger.name, recording_file))
    set_ranks(rank=0, world_size=4, local_rank=0, local_world_size=2)
    fresh_logger.info("hello")
    assert recording_file.text == "[rank 0/4] INFO hello\n"


def test_dict_config_logs_only_warnings_on_other_ranks(
    set_ranks: SetRanks, fresh_logger: logging.Logger, recording_file: RecordingFile
) -> None:
    logging.config.dictConfig(dict_config(fresh_logger.name, recording_file))
    set_ranks(rank=3, world_size=4, local_rank=1, local_world_size=2)
    fresh_logger.info("hidden")
    fresh_logger.warning("shown")
    assert recording_file.text == "[rank 3/4] WARNING shown\n"


# setup_rank_logging


def test_setup_rank_logging_logs_info_with_a_prefix_on_rank_zero(
    set_ranks: SetRanks, fresh_logger: logging.Logger, recording_file: RecordingFile
) -> None:
    setup_rank_logging(
        stream=recording_file, logger=fresh_logger, fmt="%(rank_prefix)s %(message)s"
    )
    set_ranks(rank=0, world_size=4, local_rank=0, local_world_size=2)
    fresh_logger.info("hello")
    assert recording_file.text == "[rank 0/4] hello\n"


def test_setup_rank_logging_logs_warnings_on_every_rank(
    set_ranks: SetRanks, fresh_logger: logging.Logger, recording_file: RecordingFile
) -> None:
    setup_rank_logging(
        stream=recording_file, logger=fresh_logger, fmt="%(rank_prefix)s %(message)s"
    )
    set_ranks(rank=1, world_size=4, local_rank=1, local_world_size=2)
    fresh_logger.info("hidden")
    fresh_logger.warning("shown")
    assert recording_file.text == "[rank 1/4] shown\n"


def test_setup_rank_logging_logs_despite_malformed_variables_it_does_not_print(
    set_ranks: SetRanks,
    monkeypatch: pytest.MonkeyPatch,
    fresh_logger: logging.Logger,
    recording_file: RecordingFile,
) -> None:
    setup_rank_logging(
        stream=recording_file,
        logger=fresh_logger,
        fmt="%(rank_prefix)s %(local_rank)s/%(local_world_size)s %(message)s",
    )
    set_ranks(rank=1, world_size=4, local_rank=1, local_world_size=2)
    monkeypatch.setenv("MASTER_PORT", "http")
    monkeypatch.setenv("GROUP_RANK", "x")

    fresh_logger.warning("shown")

    assert recording_file.text == "[rank 1/4] 1/2 shown\n"


def test_setup_rank_logging_default_format_names_rank_level_and_logger(
    fresh_logger: logging.Logger, recording_file: RecordingFile
) -> None:
    setup_rank_logging(stream=recording_file, logger=fresh_logger)
    fresh_logger.info("hello")
    assert recording_file.text == f"[rank 0/1] INFO {fresh_logger.name}: hello\n"


def test_setup_rank_logging_hides_debug_on_rank_zero_at_info(
    fresh_logger: logging.Logger, recording_file: RecordingFile
) -> None:
    setup_rank_logging(stream=recording_file, logger=fresh_logger)
    fresh_logger.debug("hidden")
    assert recording_file.writes == []


def test_setup_rank_logging_on_a_local_rank_logs_once_per_node(
    set_ranks: SetRanks, fresh_logger: logging.Logger, recording_file: RecordingFile
) -> None:
    setup_rank_logging(
        stream=recording_file, logger=fresh_logger, local=True, fmt="%(rank)s %(message)s"
    )
    for rank in range(4):
        set_ranks(rank=rank, world_size=4, local_rank=rank % 2, local_world_size=2)
        fresh_logger.info("hello")
    assert recording_file.text == "0 hello\n2 hello\n"


def test_setup_rank_logging_without_all_ranks_level_silences_other_ranks(
    set_ranks: SetRanks, fresh_logger: logging.Logger, recording_file: RecordingFile
) -> None:
    setup_rank_logging(stream=recording_file, logger=fresh_logger, all_ranks_level=None)
    set_ranks(rank=1, world_size=2, local_rank=1, local_world_size=2)
    fresh_logger.critical("hidden")
    assert recording_file.writes == []


def test_setup_rank_logging_twice_installs_one_handler(
    fresh_logger: logging.Logger, recording_file: RecordingFile
) -> None:
    setup_rank_logging(stream=recording_file, logger=fresh_logger, fmt="%(message)s")
    setup_rank_logging(stream=recording_file, logger=fresh_logger, fmt="%(message)s")
    fresh_logger.info("once")
    assert recording_file.text == "once\n"
    assert [h.get_name() for h in fresh_logger.handlers] == [HANDLER_NAME]


def test_setup_rank_logging_again_applies_the_new_settings(
    fresh_logger: logging.Logger, recording_file: RecordingFile
) -> None:
    setup_rank_logging(stream=recording_file, logger=fresh_logger, fmt="%(message)s")
    setup_rank_logging("DEBUG", stream=recording_file, logger=fresh_logger, fmt="new %(message)s")
    fresh_logger.debug("shown")
    assert recording_file.text == "new shown\n"


def test_setup_rank_logging_keeps_other_handlers(
    fresh_logger: logging.Logger, recording_file: RecordingFile
) -> None:
    other = logging.NullHandler()
    fresh_logger.addHandler(other)
    setup_rank_logging(stream=recording_file, logger=fresh_logger)
    setup_rank_logging(stream=recording_file, logger=fresh_logger)
    assert fresh_logger.handlers[0] is other
    assert len(fresh_logger.handlers) == 2


def test_setup_rank_logging_configures_the_root_logger_by_default(
    root_logger: logging.Logger, recording_file: RecordingFile
) -> None:
    handler = setup_rank_logging(stream=recording_file)
    assert handler in root_logger.handlers
    assert root_logger.level == logging.INFO


def test_setup_rank_logging_takes_a_logger_name(
    fresh_logger: logging.Logger, recording_file: RecordingFile
) -> None:
    handler = setup_rank_logging(stream=recording_file, logger=fresh_logger.name)
    assert fresh_logger.handlers == [handler]


def test_setup_rank_logging_lowers_the_logger_level_to_all_ranks_level(
    fresh_logger: logging.Logger, recording_file: RecordingFile
) -> None:
    setup_rank_logging(logging.ERROR, stream=recording_file, logger=fresh_logger)
    assert fresh_logger.level == logging.WARNING


def test_a_dropped_record_writes_nothing(
    set_ranks: SetRanks, fresh_logger: logging.Logger, recording_file: RecordingFile
) -> None:
    setup_rank_logging(stream=recording_file, logger=fresh_logger)
    set_ranks(rank=1, world_size=2, local_rank=1, local_world_size=2)
    fresh_logger.info("hidden")
    assert recording_file.writes == []
    assert recording_file.flushes == 0


def test_setup_rank_logging_refuses_a_negative_rank(fresh_logger: logging.Logger) -> None:
    with pytest.raises(ValueError, match=r"rank=-1"):
        setup_rank_logging(rank=-1, logger=fresh_logger)
    assert fresh_logger.handlers == []


def test_setup_rank_logging_refuses_an_unknown_level(fresh_logger: logging.Logger) -> None:
    with pytest.raises(ValueError, match=r"level .* got 'VERBOSE'"):
        setup_rank_logging("VERBOSE", logger=fresh_logger)
