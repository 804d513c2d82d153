"""``python -m helios_collectives``: the check and benchmark, plainly and under torchrun."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import helios_pg
from helios_collectives._errors import SizeSpecError
from helios_collectives._main.sizes import format_bytes, parse_size, parse_sizes
from helios_collectives._main.sweep import bus_factor
from tests.support.procs import base_env, run_processes, run_torchrun

QUICK = ["--sizes", "4B:4KiB:32", "--iters", "2", "--warmup", "0"]


def _main_job(*args: str, extra_env: dict[str, str] | None = None) -> tuple[int, str, str]:
    command = [sys.executable, "-m", "helios_collectives", *args]
    done = run_processes([(command, base_env(extra_env))], limit=90)[0]
    return done.returncode, done.stdout, done.stderr


def test_parse_sizes_takes_a_range_with_a_factor() -> None:
    assert parse_sizes("4B:64MiB") == [4 * 4**i for i in range(13)]
    assert parse_sizes("1K:1M:32") == [1024, 32 * 1024, 1024 * 1024]


def test_parse_sizes_takes_a_list() -> None:
    assert parse_sizes("1MiB,8, 1K") == [8, 1024, 1024 * 1024]


@pytest.mark.parametrize("spec", ["0B", "4XB", "64MiB:4B", "4B:64MiB:1", "1:2:3:4", "abc"])
def test_parse_sizes_rejects_bad_values_naming_them(spec: str) -> None:
    with pytest.raises(SizeSpecError, match=r"size|--sizes"):
        parse_sizes(spec)


def test_parse_size_and_format_bytes_round_trip() -> None:
    for size in (4, 1024, 64 * 1024 * 1024):
        assert parse_size(format_bytes(size).replace(" ", "")) == size


def test_bus_factors_follow_nccl_tests() -> None:
    assert bus_factor("all_reduce", 4) == pytest.approx(1.5)
    assert bus_factor("all_gather", 4) == pytest.approx(0.75)
    assert bus_factor("all_reduce", 1) == 0.0


def test_a_plain_run_passes_every_check_and_reports_json() -> None:
    code, out, err = _main_job(*QUICK, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["ok"] is True
    assert data["environment"]["world_size"] == 1
    assert [b["backend"] for b in data["bindings"]] == [helios_pg.default_backend()]
    assert all(check["passed"] for check in data["checks"])
    assert {p["operation"] for p in data["benchmark"]} == {"all_reduce", "all_gather"}
    assert len(data["benchmark"]) == 2 * 3
    assert "verifying collectives" in err


def test_a_bad_sizes_value_exits_with_status_two_naming_it() -> None:
    code, _, err = _main_job("--sizes", "64MiB:4B")
    assert code == 2
    assert "64MiB:4B" in err


def test_a_malformed_launcher_variable_exits_with_status_two_naming_it() -> None:
    code, _, err = _main_job("--no-bench", extra_env={"RANK": "abc", "WORLD_SIZE": "2"})
    assert code == 2
    assert "RANK='abc'" in err


def test_under_torchrun_rank_zero_prints_one_table_for_two_ranks() -> None:
    done = run_torchrun(["-m", "helios_collectives", *QUICK], nproc=2, limit=120)
    assert done.returncode == 0, done.describe()
    assert done.stdout.count("collective checks") == 1
    assert "FAILED" not in done.stdout
    assert "busbw (GB/s)" in done.stdout
    assert "launcher       torchrun" in done.stdout
    # Both ranks' bindings are listed by rank 0.
    binding = done.stdout.split("device binding")[1].split("collective checks")[0]
    assert len([line for line in binding.splitlines() if line.strip().endswith("gloo")]) == 2


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


def test_a_backend_that_cannot_run_here_exits_with_status_two_naming_the_fix() -> None:
    code, _, err = _main_job(
        "--no-bench", "--backend", "nccl", extra_env={"CUDA_VISIBLE_DEVICES": ""}
    )
    assert code == 2
    assert "backend='gloo'" in err


def test_an_unknown_backend_exits_with_status_two_listing_the_backends_torch_offers() -> None:
    code, _, err = _main_job("--no-bench", "--backend", "foo")
    assert code == 2
    assert "Traceback" not in err
    assert "backend='foo'" in err
    assert "'gloo'" in err
