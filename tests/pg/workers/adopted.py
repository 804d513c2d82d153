"""Worker: a job whose group another framework made, in a thread, as Ray Train does.

Each rank runs its training function in a thread that catches what it raises (as Ray
Train's ``ThreadRunner`` does), after plain torch made the group with a 60 s timeout
from torchrun's variables. The function calls helios's ``process_group()``, which
adopts that group. ``HELIOS_TEST_ADOPTED`` says what happens next:

- ``raise``: rank 1 raises ``ValueError: bad batch 7`` while the others wait in an
  all-reduce; the thread catches it and the rank exits with status 1.
- ``hang``: rank 1 stays out of the all-reduce until the roll call convicted it (its
  error file is there), then joins it (run with ``HELIOS_HANG_TIMEOUT``).
- ``timeout``: ``process_group(timeout=3)``; rank 1 skips an all-reduce until the
  others' timed out, each of which prints what gloo said.
- ``settings``: rank 1 runs with ``NCCL_DEBUG=INFO``, the others without: the
  agreement check warns from rank 0.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import warnings
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from helios_pg import process_group
from helios_pg._torch import destroy_without_deadlock
from tests.support.worker import group_timeout

ERROR_FILE = "TORCHELASTIC_ERROR_FILE"
MADE_WITH = timedelta(seconds=60)


def wait_for(path: Path) -> None:
    """Wait until ``path`` exists: an event, bounded by the group's timeout."""
    deadline = time.monotonic() + group_timeout().total_seconds()
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def train(case: str) -> None:
    rank = int(os.environ["RANK"])
    if case == "settings" and rank == 1:
        os.environ["NCCL_DEBUG"] = "INFO"
    timeout = 3 if case == "timeout" else None
    with process_group(timeout=timeout) as info:
        dist.all_reduce(torch.ones(1))
        if case == "raise" and info.rank == 1:
            time.sleep(0.2)  # the others are in the next all-reduce by now
            message = "bad batch 7"
            raise ValueError(message)
        if case == "hang" and info.rank == 1:
            wait_for(Path(os.environ[ERROR_FILE]))
        marks = Path(os.environ["HELIOS_TEST_MARKS"])
        if case == "timeout":
            if info.rank == 1:
                for other in (0, 2):
                    wait_for(marks / f"timed-out-{other}")
            else:
                try:
                    dist.all_reduce(torch.ones(1))
                except RuntimeError as exc:
                    # One write for the whole line: print writes the text and its
                    # newline apart, and another rank's line could land in between.
                    sys.stdout.write(f"rank {info.rank} timed out: {exc}\n")
                    sys.stdout.flush()
                (marks / f"timed-out-{info.rank}").touch()
            return
        dist.all_reduce(torch.ones(1))


def main() -> None:
    case = os.environ["HELIOS_TEST_ADOPTED"]
    caught: list[BaseException] = []

    def run() -> None:
        dist.init_process_group("gloo", init_method="env://", timeout=MADE_WITH)
        try:
            train(case)
        except BaseException as exc:  # the framework keeps it, as Ray does
            caught.append(exc)
        finally:
            # As the framework would, but past torch's own deadlock: before torch 2.8,
            # destroying a gloo group just after a collective can hang on its worker
            # thread (helios's shutdown() steps around it the same way).
            destroy_without_deadlock()

    warnings.simplefilter("always")
    thread = threading.Thread(target=run, name="TrainingThread")
    thread.start()
    thread.join()
    if caught:
        print(f"the framework caught: {caught[0]!r}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
