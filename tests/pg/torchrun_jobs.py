"""Several torchrun jobs of one worker, started together, each keeping its error files."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from tests.support.procs import Finished, base_env, run_processes, torchrun_command

__all__ = ["ROOT_CAUSE", "names_culprit", "root_cause", "run_jobs"]

ROOT_CAUSE = "Root Cause (first observed failure):"
AT_ONCE = 5
"""Jobs started together: five of three ranks each keep two shared cores busy enough
that every rank still joins its group well within the short group timeouts."""


def run_jobs(
    worker: Path,
    modes: Sequence[str],
    env_for: Callable[[str, Path], Mapping[str, str]],
    tmp_path_factory: pytest.TempPathFactory,
    *,
    nproc: int = 3,
    limit: float = 240.0,
    restarts: int = 0,
    at_once: int = AT_ONCE,
) -> dict[str, tuple[Finished, Path]]:
    """Run ``torchrun --standalone`` of ``worker`` once per mode, ``at_once`` at a time.

    Each job keeps its workers' error files under a ``--log-dir`` of its own, which
    ``env_for(mode, log_dir)`` may also use. ``restarts`` is torchrun's
    ``--max-restarts``. ``limit`` bounds each batch of jobs started together.

    Returns:
        For each mode, the finished torchrun and its log directory.
    """
    commands = []
    logs = {}
    for mode in modes:
        logs[mode] = tmp_path_factory.mktemp(f"torchrun-{mode}")
        command = torchrun_command(
            "--standalone",
            f"--nproc-per-node={nproc}",
            f"--max-restarts={restarts}",
            f"--log-dir={logs[mode]}",
            str(worker),
        )
        commands.append((command, base_env(env_for(mode, logs[mode]))))
    finished: list[Finished] = []
    for start in range(0, len(commands), at_once):
        finished += run_processes(commands[start : start + at_once], limit=limit)
    return {mode: (done, logs[mode]) for mode, done in zip(modes, finished, strict=True)}


def root_cause(output: str) -> str:
    """The part of torchrun's summary from its root cause on."""
    assert ROOT_CAUSE in output, output
    return output.split(ROOT_CAUSE, 1)[1]


def names_culprit(cause: str, rank: int, what: str) -> bool:
    """Whether torchrun's root cause is ``rank``, or a rank that says ``rank`` failed first.

    Where the culprit is still tearing down when the ranks it broke have exited,
    torchrun stops it, and a torch whose summary leaves out the workers it stopped (2.4)
    names one of those ranks: its traceback then starts with the culprit's line.
    """
    if f"rank      : {rank} (local_rank: {rank})" in cause:
        return True
    return f"traceback : rank {rank} on " in cause and f"failed first: {what}" in cause
