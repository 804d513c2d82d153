"""Worker: one process drawing batches from DataLoaders, signalled with its workers.

``argv[1]``: the loaders' start methods, comma-separated (``fork,spawn,forkserver``),
each loader with two workers, all drawn from side by side; ``argv[2]``: ``shield`` or
``plain`` (``preemption(shield_workers=False)``); ``argv[3]``: the signal's name;
``argv[4]``, where given, ``early``: a forkserver loader is drawn from before
``preemption()``, so the forkserver that forks the workers started unshielded.

Once every loader has served a batch, the process sends the signal to its whole
process group (the test starts it in a session of its own), as a cluster does to every
process of a job, then draws batches until ``should_stop()`` says so and five more.
It reports how many batches came after the signal, the signal it received, and each
worker's exit status once ended, or the error drawing raised: the first loader's
workers are ended with SIGTERM from the process (``Process.terminate()``, as
multiprocessing's exit handler does), the others' by their iterator.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from helios_pg import preemption
from tests.support.worker import report


class Numbers(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.005)
        return torch.tensor([index])


def loader(method: str) -> DataLoader[torch.Tensor]:
    return DataLoader(Numbers(), batch_size=2, num_workers=2, multiprocessing_context=method)


def main() -> None:
    methods = sys.argv[1].split(",")
    number = signal.Signals[sys.argv[3]]
    if sys.argv[4:] == ["early"]:
        next(iter(loader("forkserver")))
    with preemption(shield_workers=sys.argv[2] == "shield") as stop:
        iterators: list[Any] = [iter(loader(method)) for method in methods]
        after = None
        try:
            while after is None or after < 5:
                for iterator in iterators:
                    next(iterator)
                if after is None:  # from another process, as from the cluster's
                    subprocess.run(["kill", f"-{number}", "--", f"-{os.getpgid(0)}"], check=False)
                    time.sleep(1.0)  # long enough for a worker to die of it
                    after = 0
                elif stop.should_stop():
                    after += 1
        except RuntimeError as exc:
            report(error=str(exc).splitlines()[0], received=stop.received)
            return
        statuses = []
        for worker in iterators[0]._workers:
            worker.terminate()
            worker.join(timeout=20)
        for iterator in iterators:
            iterator._shutdown_workers()
            statuses += [worker.exitcode for worker in iterator._workers]
        report(batches=after, received=stop.received, statuses=statuses)


if __name__ == "__main__":
    main()
