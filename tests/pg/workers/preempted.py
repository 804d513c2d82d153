"""Worker: a training loop that stops when told to, saves, and asks to be requeued.

Each step is one all-reduce; rank 0 saves a checkpoint (the next step to run) when
the job stops, and every ``HELIOS_TEST_EVERY`` steps. ``HELIOS_TEST_PREEMPT`` says what
happens:

- ``sigterm``: at step 3, rank 0 sends SIGTERM to its parent, torchrun's agent, as an
  operator stopping the job does; the agent forwards it to every rank;
- ``usr1_one``: at step 3, rank 1 alone receives SIGUSR1;
- ``restart``: on the job's first attempt, rank 1 raises at step 5; torchrun starts the
  group again, which resumes from the checkpoint;
- ``outside``: nothing here; the test signals the job (``scancel --signal``) or one
  rank (``kill``), having read ``HELIOS_TEST_PROGRESS``: each rank's pid
  (``rank-N.pid``) and rank 0's last step (``step``). The first attempt's steps are
  slow (``HELIOS_TEST_PAUSE`` seconds), so that the signal comes before its end; the
  second's are not. ``HELIOS_TEST_STEPS`` steps in all.

With ``HELIOS_TEST_LOADER`` (start methods by rank, comma-separated), each step first
draws a batch from a DataLoader with two workers started that way; torchrun's SIGTERM
reaches each rank's whole process group, its workers included. Each rank then reports
its workers' exit statuses once its iterator has ended them.

Each rank prints one result when it stops or ends (the attempt, the step it started
from, the step after which it stopped), then calls ``requeue()`` if it stopped, and
prints what that said: SLURM may stop the job as soon as it is requeued.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

# Held, not acted on, until preemption() has its handlers: a stop signal that comes
# while torch imports (SLURM's --signal=USR1@30 fixes its moment, not the rank's)
# then stops the job after a step instead of killing the rank. Only in the rank: a
# spawned DataLoader worker runs this module too (as __mp_main__), and must owe its
# blocked signals to preemption() alone.
STOP_SIGNALS = {signal.SIGUSR1, signal.SIGTERM}
if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)

from typing import Any  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from helios_pg import preemption, process_group  # noqa: E402
from tests.support.worker import group_timeout, report  # noqa: E402

STEPS = int(os.environ.get("HELIOS_TEST_STEPS", "40"))
SIGNAL_AT = 3
FAIL_AT = 5


class Batches(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([index])


def batches(rank: int) -> Any:
    """An iterator over a DataLoader with two workers, or None without HELIOS_TEST_LOADER."""
    methods = os.environ.get("HELIOS_TEST_LOADER")
    if methods is None:
        return None
    method = methods.split(",")[rank]
    return iter(DataLoader(Batches(), num_workers=2, multiprocessing_context=method))


def ended(iterator: Any) -> list[int | None]:
    """The exit statuses of an iterator's workers, once it has ended them."""
    if iterator is None:
        return []
    iterator._shutdown_workers()
    return [worker.exitcode for worker in iterator._workers]


def load(checkpoint: Path) -> int:
    return int(json.loads(checkpoint.read_text())["next"]) if checkpoint.exists() else 0


def save(checkpoint: Path, next_step: int) -> None:
    partial = checkpoint.with_suffix(".partial")
    partial.write_text(json.dumps({"next": next_step}))
    partial.replace(checkpoint)


def signal_at(case: str, rank: int, step: int) -> None:
    if step != SIGNAL_AT:
        return
    if case == "sigterm" and rank == 0:
        os.kill(os.getppid(), signal.SIGTERM)
    elif case == "usr1_one" and rank == 1:
        os.kill(os.getpid(), signal.SIGUSR1)


def progress(rank: int, step: int | None) -> None:
    folder = os.environ.get("HELIOS_TEST_PROGRESS")
    if folder is None:
        return
    if step is None:
        Path(folder, f"rank-{rank}.pid").write_text(str(os.getpid()))
    elif rank == 0:
        Path(folder, "step").write_text(str(step))


def main() -> None:
    case = os.environ["HELIOS_TEST_PREEMPT"]
    checkpoint = Path(os.environ["HELIOS_TEST_CHECKPOINT"])
    every = int(os.environ.get("HELIOS_TEST_EVERY", "0"))
    with process_group(timeout=group_timeout()) as info, preemption() as stop:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # one held comes now
        start = load(checkpoint)
        step = start
        stopped = None
        pause = float(os.environ.get("HELIOS_TEST_PAUSE", "0.3")) if info.attempt == 0 else 0.0
        pause = pause if case == "outside" else 0.05
        progress(info.rank, None)
        loader = batches(info.rank)
        while step < STEPS:
            signal_at(case, info.rank, step)
            if case == "restart" and info.attempt == 0 and info.rank == 1 and step == FAIL_AT:
                message = f"rank 1 fails at step {step}"
                raise RuntimeError(message)
            if loader is not None:
                next(loader)
            dist.all_reduce(torch.ones(1))
            time.sleep(pause)
            step += 1
            progress(info.rank, step)
            if info.rank == 0 and every and step % every == 0:
                save(checkpoint, step)
            if stop.should_stop():
                stopped = step - 1
                break
        if info.rank == 0:
            save(checkpoint, step)
        workers = ended(loader)
        report(rank=info.rank, attempt=info.attempt, start=start, stopped=stopped, workers=workers)
        outcome = stop.requeue() if stopped is not None else None
        if outcome is not None:
            returned = time.time()
            report(rank=info.rank, how=outcome.how, exit_status=outcome.exit_status, at=returned)
    raise SystemExit(outcome.exit_status if outcome else 0)


if __name__ == "__main__":
    main()
