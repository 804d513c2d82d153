"""Worker: rank 1 (or ``HELIOS_TEST_FAILING_RANK``) of a job fails, as the test asks.

``HELIOS_TEST_FAILURE`` says how: ``raise`` (an uncaught ``ValueError``), ``env_raise``
(the same in a group made with ``init_method="env://"``), ``record`` (the same below
torchrun's ``@record``), ``thread`` (a thread dies, then the rank exits with status 3),
``exit`` (``SystemExit(3)``), ``os_exit`` (``os._exit(3)``), ``sigint`` (SIGINT to
itself, as Ctrl-C in its terminal: Python raises ``KeyboardInterrupt``),
``init_backend`` (rank 1 asks ``init`` for nccl, on a machine without CUDA),
``desert`` (``sys.exit(0)``: rank 1 leaves cleanly in the middle), ``mismatch``
(every rank calls ``all_reduce_tensors``, rank 1 with a smaller last batch: every rank
raises ``CollectiveMismatchError``). Otherwise the other
ranks wait in an all-reduce that rank 1 never joins (or in the rendezvous), so each of
them fails once rank 1 is gone.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from helios_collectives import all_reduce_tensors
from helios_env import get_global_rank
from helios_pg import process_group
from tests.support.worker import group_timeout, report

FAILING_RANK = int(os.environ.get("HELIOS_TEST_FAILING_RANK", "1"))


def fail(mode: str) -> None:
    if mode in ("raise", "env_raise", "record"):
        message = "bad batch 7"
        raise ValueError(message)
    if mode == "thread":

        def die() -> None:
            message = "loader thread died"
            raise RuntimeError(message)

        thread = threading.Thread(target=die, name="loader")
        thread.start()
        thread.join()
        sys.exit(3)
    if mode == "exit":
        sys.exit(3)
    if mode == "os_exit":
        sys.stdout.flush()
        os._exit(3)
    if mode == "desert":
        report(agent_store=os.environ.get("TORCHELASTIC_USE_AGENT_STORE"))
        sys.exit(0)
    if mode == "sigint":
        os.kill(os.getpid(), signal.SIGINT)  # Python raises it here, or in the sleep
        time.sleep(30)


def main() -> None:
    mode = os.environ["HELIOS_TEST_FAILURE"]
    init_method = "env://" if mode == "env_raise" else None
    failing = get_global_rank() == FAILING_RANK  # before init: from any launcher's variables
    # nccl without CUDA; on a GPU host, a backend torch does not have.
    unavailable = "no-such-backend" if torch.cuda.is_available() else "nccl"
    backend = unavailable if mode == "init_backend" and failing else None
    with process_group(timeout=group_timeout(), init_method=init_method, backend=backend) as info:
        dist.all_reduce(torch.ones(1))
        if mode == "mismatch":
            all_reduce_tensors(torch.ones(2 if info.rank == FAILING_RANK else 3, 4))
        if info.rank == FAILING_RANK:
            time.sleep(0.2)  # the others are in the next all-reduce by now
            fail(mode)
        dist.all_reduce(torch.ones(1))


if __name__ == "__main__":
    if os.environ.get("HELIOS_TEST_FAILURE") == "record":
        record(main)()
    else:
        main()
