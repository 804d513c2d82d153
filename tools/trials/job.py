"""A small DDP training job with DataLoader workers, as docs/preemption.md shows it.

Started by ``python -m tools.trials`` under torchrun. Each rank trains a small MLP on
batches from a ``DataLoader(num_workers=2)``, saves a checkpoint every ``SAVE_EVERY``
steps (a few MB, written whole: a temporary file, then a rename), and asks
``should_stop()`` after every step; when it says to stop, rank 0 saves the step, and
every rank prints one ``TRIAL {json}`` line (the step it stopped after, what it was
doing when the signal came) and exits 0. ``HELIOS_TRIAL_SHIELD=0`` turns the
DataLoader shield off (``preemption(shield_workers=False)``). Rank 0 writes
``HELIOS_TRIAL_DIR/training`` after its first step, so that the driver signals the
job during training.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

from helios_pg import preemption, process_group

SAVE_EVERY = 5
WIDTH = 512
now = {"phase": "start"}
"""What the rank is doing: data, forward, backward, step, save, or stop."""
seen: list[str] = []


class Samples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.002)  # reading and decoding
        generator = torch.Generator().manual_seed(index)
        return torch.randn(WIDTH, generator=generator), torch.randn(1, generator=generator)


def note_phase(number: int, frame: FrameType | None) -> None:
    """Installed before preemption(), which calls it after setting its flag."""
    seen.append(now["phase"])


def save(model: torch.nn.Module, step: int, folder: Path) -> None:
    now["phase"] = "save"
    partial = folder / "checkpoint.pt.partial"
    torch.save({"step": step, "model": model.state_dict()}, partial)
    with partial.open("rb+") as handle:
        os.fsync(handle.fileno())
    partial.replace(folder / "checkpoint.pt")


def main() -> None:
    folder = Path(os.environ["HELIOS_TRIAL_DIR"])
    shield = os.environ.get("HELIOS_TRIAL_SHIELD", "1") == "1"
    signal.signal(signal.SIGTERM, note_phase)
    with process_group(timeout=60) as info, preemption(shield_workers=shield) as stop:
        layers = [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()] * 3
        model = DistributedDataParallel(torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 1)))
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        loader = DataLoader(Samples(), batch_size=16, num_workers=2)
        step = 0
        stopped = None
        try:
            batches = iter(loader)
            while stopped is None:
                now["phase"] = "data"
                inputs, targets = next(batches)
                now["phase"] = "forward"
                loss = torch.nn.functional.mse_loss(model(inputs), targets)
                now["phase"] = "backward"
                optimizer.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                now["phase"] = "step"
                optimizer.step()
                step += 1
                if info.rank == 0 and step % SAVE_EVERY == 0:
                    save(model.module, step, folder)
                if info.rank == 0 and step == 1:
                    (folder / "training").write_text("1")
                now["phase"] = "stop"
                if stop.should_stop():
                    stopped = step
            if info.rank == 0:
                save(model.module, stopped, folder)
            del batches  # the workers end here, as at the end of an epoch
        except Exception as exc:  # what the trial counts as a crash
            line = {"rank": info.rank, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
            print("TRIAL " + json.dumps(line | {"phase": seen}), flush=True)
            raise
        print("TRIAL " + json.dumps({"rank": info.rank, "stopped": stopped, "phase": seen}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
