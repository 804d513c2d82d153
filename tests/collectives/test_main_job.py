"""``python -m helios_collectives``: the check and benchmark, plainly and under torchrun.

The plain runs call its ``main(argv)`` in this process (a world of one on a local store);
the runs under torchrun start ``python -m helios_collectives`` itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import helios_pg
from helios_collectives._errors import SizeSpecError
from helios_collectives._main.cli import LOCAL_COPY, main
from helios_collectives._main.sizes import format_bytes, parse_size, parse_sizes
from helios_collectives._main.sweep import bus_factor
from tests.support.procs import plain_environment, run_torchrun

QUICK = ["--sizes", "4B:4KiB:32", "--iters", "2", "--warmup", "0"]


def test_parse_sizes_takes_a_range_with_a_factor() -> None:
    assert parse_sizes("4B:64MiB") == [4 * 4**i for i in range(13)]
    assert parse_sizes("1K:1M:32") == [1024, 32 * 1024, 1024 * 1024]


def test_a_range_ends_at_max_also_where_the_factor_steps_over_it() -> None:
    assert parse_sizes("4B:1MiB:16") == [4, 64, 1024, 16 * 1024, 256 * 1024, 1024 * 1024]
    assert parse_sizes("8:8") == [8]


def test_parse_sizes_takes_a_list() -> None:
    assert parse_sizes("1MiB,8, 1K") == [8, 1024, 1024 * 1024]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("0B", "size '0B' is not a positive size such as 4B, 64K or 64MiB"),
        ("4XB", "size '4XB' is not a positive size such as 4B, 64K or 64MiB"),
        ("abc", "size 'abc' is not a positive size such as 4B, 64K or 64MiB"),
        ("4B:abc", "size 'abc' is not a positive size"),
        ("64MiB:4B", "--sizes '64MiB:4B': MIN (67108864 B) exceeds MAX (4 B); swap them"),
        ("4B:64MiB:1", "--sizes '4B:64MiB:1': the factor must be an integer >= 2, got '1'"),
        ("4B:64MiB:x", "--sizes '4B:64MiB:x': the factor must be an integer >= 2, got 'x'"),
        ("1:2:3:4", "--sizes '1:2:3:4': use MIN:MAX or MIN:MAX:FACTOR, such as 4B:64MiB:4"),
        ("3B", "size '3B' (3 B) is not a whole number of float32 elements (4 B each): use 4B"),
        ("6", "size '6' (6 B) is not a whole number of float32 elements (4 B each): use 4B or 8B"),
        ("4B:1030B", "size '1030B' (1030 B) is not a whole number of float32 elements"),
    ],
)
def test_parse_sizes_rejects_bad_values_naming_them_and_the_fix(spec: str, message: str) -> None:
    with pytest.raises(SizeSpecError) as raised:
        parse_sizes(spec)
    assert str(raised.value).startswith(message)
    assert isinstance(raised.value, ValueError)


def test_parse_size_and_format_bytes_round_trip() -> None:
    for size in (4, 1024, 64 * 1024 * 1024):
        assert parse_size(format_bytes(size).replace(" ", "")) == size


def test_bus_factors_follow_nccl_tests() -> None:
    assert bus_factor("all_reduce", 4) == pytest.approx(1.5)
    assert bus_factor("all_gather", 4) == pytest.approx(0.75)
    assert bus_factor("all_reduce", 1) == 0.0


STARTUP_ORDER = (
    "process_started",
    "helios_imported",
    "torch_loaded",
    "init_called",
    "group_formed",
    "first_collective",
)


def test_a_plain_run_passes_every_check_and_reports_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main([*QUICK, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert data["ok"] is True
    assert data["environment"]["world_size"] == 1
    assert [b["backend"] for b in data["bindings"]] == [helios_pg.default_backend()]
    assert all(check["passed"] for check in data["checks"])
    assert {p["operation"] for p in data["benchmark"]} == {"all_reduce", "all_gather"}
    assert len(data["benchmark"]) == 2 * 3
    assert data["local_copy"] is True
    assert data["consistency"]["agree"] is True
    assert data["consistency"]["groups"][0]["ranks"] == [0]
    assert data["links"]["verdict"] == "one rank: no link to measure"
    (node,) = data["startup"]["nodes"]
    assert node["ranks"] == [0]
    assert node["store_reached"] is None  # one rank meets at no store
    moments = [node[name] for name in STARTUP_ORDER]
    assert moments == sorted(moments), node
    assert moments[0] == 0.0  # the origin is this process's start
    # Not a terminal: no progress, and nothing of the table again on stderr.
    assert err == ""
    assert not dist.is_initialized()


def test_at_world_size_one_the_table_says_an_all_reduce_moves_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(QUICK) == 0
    out = capsys.readouterr().out
    table = out.split("benchmark (float32, 1 rank, slowest rank's time)\n")[1]
    assert table.startswith(LOCAL_COPY + "\n")
    rows = [line.split() for line in table.splitlines()[3:] if line.strip()]
    assert {tuple(row[-2:]) for row in rows if row[0] == "all_reduce"} == {("no-op", "no-op")}
    assert all(row[-2] != "no-op" for row in rows if row[0] == "all_gather")


@pytest.mark.parametrize("options", [QUICK, ["--no-bench"]], ids=["sweep", "checks-only"])
def test_on_a_terminal_progress_is_one_line_rewritten_then_cleared(options: list[str]) -> None:
    primary, secondary = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "helios_collectives", *options],
            stdout=subprocess.PIPE,
            stderr=secondary,
            env=plain_environment(os.environ),
            timeout=120,
            check=False,
        )
        os.close(secondary)
        shown = b""
        with contextlib.suppress(OSError):  # EIO once everything written was read
            while chunk := os.read(primary, 65536):
                shown += chunk
    finally:
        os.close(primary)
    assert done.returncode == 0, shown
    progress = shown.decode()
    assert "\n" not in progress.replace("\r\n", "\n").strip("\n")
    assert progress.startswith("helios-collectives: verifying collectives\r\x1b[K")
    assert progress.endswith("\r\x1b[K")
    if options == QUICK:
        assert progress.count("\r\x1b[K") >= 2 * 3 + 1
        assert "all_gather 4 KiB" in progress


def test_a_bad_sizes_value_exits_with_status_two_naming_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--sizes", "64MiB:4B"])
    assert exited.value.code == 2
    assert "--sizes '64MiB:4B': MIN (67108864 B) exceeds MAX (4 B)" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-1", "inf"])
def test_a_timeout_that_is_not_positive_exits_with_status_two_naming_it(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--timeout", value])
    assert exited.value.code == 2
    assert f"--timeout must be a positive, finite number of seconds, got {float(value)}" in (
        capsys.readouterr().err
    )


def test_a_malformed_launcher_variable_exits_with_status_two_naming_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "abc")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["--no-bench"]) == 2
    err = capsys.readouterr().err
    assert "invalid environment" in err
    assert "RANK='abc'" in err
    assert not dist.is_initialized()


@pytest.mark.long
def test_under_torchrun_rank_zero_prints_one_table_for_two_ranks() -> None:
    done = run_torchrun(["-m", "helios_collectives", *QUICK], nproc=2, limit=120)
    assert done.returncode == 0, done.describe()
    assert done.stdout.count("collective checks") == 1
    assert "FAILED" not in done.stdout
    assert "busbw (GB/s)" in done.stdout
    assert LOCAL_COPY not in done.stdout
    assert "all_reduce" not in done.stderr
    assert "launcher       torchrun" in done.stdout
    assert "  all ranks agree\n" in done.stdout
    assert "links (point to point, one node: its ranks: 2 local ranks, 1 round," in done.stdout
    assert "slowest link rank 0 <-> rank 1: " in done.stdout
    startup = done.stdout.split("start-up (seconds after the job's first process started")[1]
    (row,) = [line for line in startup.splitlines() if line.startswith("ranks 0-1 (")]
    cells = row.split()[3:]  # "ranks 0-1 (vm)", then the moments
    assert len(cells) == 7, row
    assert "-" not in cells, row  # every moment noted, the store's too
    # Both ranks' bindings are listed by rank 0.
    binding = done.stdout.split("device binding")[1].split("collective checks")[0]
    assert len([line for line in binding.splitlines() if line.strip().endswith("gloo")]) == 2


@pytest.mark.long
def test_a_wrong_result_on_one_rank_fails_the_run_and_names_the_rank(tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    worker = Path(__file__).resolve().parent / "workers" / "wrong_result.py"
    args = [str(worker), "--no-bench", "--json", str(result)]
    # Rank 0 reports 3 s late: rank 1, which fails the run, waits for the report.
    slow = {"HELIOS_TEST_WRONG_RANK": "1", "HELIOS_TEST_SLOW_REPORT": "3"}
    done = run_torchrun(args, nproc=2, extra_env=slow, limit=120)
    assert done.returncode != 0
    data = json.loads(result.read_text())
    assert data["ok"] is False
    failed = {c["name"]: c["failures"] for c in data["checks"] if not c["passed"]}
    assert list(failed) == ["gather_uneven"]
    assert list(failed["gather_uneven"]) == ["1"]
    assert "values differ" in failed["gather_uneven"]["1"]
    assert "FAILED checks: gather_uneven" in done.stderr


def test_a_backend_that_cannot_run_here_exits_with_status_two_naming_the_fix(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["--no-bench", "--backend", "nccl"]) == 2
    err = capsys.readouterr().err
    assert "cannot create the process group" in err
    assert "backend='gloo'" in err
    assert not dist.is_initialized()


def test_an_unknown_backend_exits_with_status_two_listing_the_backends_torch_offers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--no-bench", "--backend", "foo"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "backend='foo'" in err
    assert "'gloo'" in err
    assert not dist.is_initialized()
