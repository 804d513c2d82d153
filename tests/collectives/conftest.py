"""Fixtures for helios-collectives: a world of one in this process, and the shared
multi-process runs that the result, validation and fault tests read.

The multi-process runs are session fixtures: each starts its ranks once (starting a
rank costs seconds of CPU for the torch import) and runs every case in one go.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import helios_pg
from helios_collectives import VALIDATE_ENV_VAR
from tests.collectives.cases import Case
from tests.collectives.strategies import (
    draw_cases,
    explicit_cases,
    gather_cases,
    reduce_cases,
    reduce_list_cases,
    uneven_cases,
)
from tests.support.procs import Finished, is_launcher_variable, results, run_hand_started

WORKERS = Path(__file__).parent / "workers"
GROUP_TIMEOUT = 5.0
"""Process-group timeout of the multi-process runs, in seconds."""
PROPERTY_WORLD = 3
CPU_RUN_ENV = {
    "HELIOS_TEST_PG_TIMEOUT": str(GROUP_TIMEOUT),
    VALIDATE_ENV_VAR: "0",
    # gloo on the CPU even where GPUs exist: helios_pg.init binds cuda:LOCAL_RANK
    # whenever CUDA is available, and there may be fewer GPUs than ranks.
    "CUDA_VISIBLE_DEVICES": "",
}
"""Environment of the CPU multi-process runs (on top of ``base_env``)."""

# Scenarios after the drawn cases, in the order the worker runs them. The skipped
# collective comes last: after it the group has timed out and is unusable.
SCENARIOS = (
    "reduce_dtype_mismatch",
    "reduce_shape_mismatch_env",
    "reduce_op_mismatch",
    "reduce_list_composition_mismatch",
    "reduce_empty_list_on_one_rank",
    "reduce_empty_list_everywhere",
    "gather_numel_mismatch",
    "gather_bad_size_everywhere",
    "operation_mismatch",
    "sequence_mismatch",
    "uneven_dtype_mismatch",
    "uneven_rest_mismatch",
    "uneven_zero_dim_everywhere",
    "barrier_all",
    "safe_barriers",
    "barrier_late_last_rank",
    "barrier_all",
    "barrier_late_all_but_rank_zero",
    "barrier_all",
    "skip_on_last_rank",
)

Outcome = dict[str, Any]


@dataclass(frozen=True)
class Run:
    """One multi-process run: its cases, and what each rank reported for each."""

    world: int
    cases: list[Case]
    finished: list[Finished]
    reported: dict[int, dict[int, Outcome]] = field(default_factory=dict)

    def outcomes(self, index: int) -> list[Outcome]:
        """What every rank reported for case ``index``, in rank order."""
        by_rank = self.reported.get(index, {})
        missing = [r for r in range(self.world) if r not in by_rank]
        assert not missing, f"ranks {missing} reported nothing for case {index}\n" + self.log()
        return [by_rank[r] for r in range(self.world)]

    def of_kind(self, kind: str) -> list[tuple[Case, list[Outcome]]]:
        """Every case of ``kind`` with every rank's outcome."""
        return [(c, self.outcomes(i)) for i, c in enumerate(self.cases) if c["kind"] == kind]

    def scenario(self, name: str, occurrence: int = 0) -> list[Outcome]:
        """Every rank's outcome of the ``occurrence``-th run of scenario ``name``."""
        indices = [i for i, c in enumerate(self.cases) if c.get("name") == name]
        return self.outcomes(indices[occurrence])

    def log(self) -> str:
        return "\n".join(f.describe()[-4000:] for f in self.finished)


def _collect(finished: list[Finished], world: int, cases: list[Case]) -> Run:
    run = Run(world, cases, finished)
    for item in results(finished):
        run.reported.setdefault(item["index"], {})[item["rank"]] = item
    return run


def property_cases(world: int) -> list[Case]:
    """The drawn and explicit cases of the property run, then its scenarios."""
    cases = [
        *explicit_cases(world),
        *draw_cases(gather_cases(world), 50),
        *draw_cases(reduce_cases(), 70),
        *draw_cases(reduce_list_cases(), 50),
        *draw_cases(uneven_cases(world), 50),
        {
            "kind": "raw_view_reduce",
            "shape": [4, 3],
            "dtype": "float32",
            "view": "column",
            "seed": 7,
        },
    ]
    return cases + [{"kind": "scenario", "name": name} for name in SCENARIOS]


@pytest.fixture(scope="session")
def property_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Three ranks over gloo run every property case and scenario once."""
    cases = property_cases(PROPERTY_WORLD)
    path = tmp_path_factory.mktemp("collectives") / "cases.json"
    path.write_text(json.dumps(cases))
    finished = run_hand_started(
        WORKERS / "run_cases.py",
        PROPERTY_WORLD,
        args=[str(path)],
        extra_env=CPU_RUN_ENV,
        limit=100,
    )
    return _collect(finished, PROPERTY_WORLD, cases)


@pytest.fixture(autouse=True)
def plain_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start every in-process test as a plain process, with validation mode unset."""
    for name in filter(is_launcher_variable, list(os.environ)):
        monkeypatch.delenv(name)
    monkeypatch.delenv(VALIDATE_ENV_VAR, raising=False)


@pytest.fixture
def world_of_one() -> Iterator[None]:
    """A world-size-one gloo group in this process, destroyed after the test."""
    helios_pg.init(backend="gloo")
    try:
        yield
    finally:
        helios_pg.shutdown()
