"""Checkpoints a stopped job resumes from: written whole or not at all, the last few kept.

Each checkpoint is a folder, ``step-000000120``, written under a temporary name and
renamed once every rank's files are on disk, so that a job killed in the middle of a
save leaves no folder that looks complete:

- ``state.pt``: the state rank 0 saved (or ``state-RANK.pt``, one per rank, with
  ``every_rank=True``);
- ``rng-RANK.pt``: each rank's Python and torch random generators (the CPU's, and its
  current CUDA device's where CUDA is in use);
- ``meta.json``: the step, the epoch, the batches of that epoch already trained on, the
  job's attempt, the world size and the time.

Every rank calls :meth:`Checkpoints.save` (two barriers of the default group) and
:meth:`Checkpoints.load` (rank 0 chooses the checkpoint, every rank reads it); the folder
must be one every rank sees (a shared file system). Old checkpoints, and a step saved
again, are renamed out of sight before they are removed, so a kill at any moment leaves
whole checkpoints only.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Checkpoints", "Resumed"]

_COMPLETE = re.compile(r"^step-(\d+)$")
_PARTIAL = ".partial"


@dataclass(frozen=True)
class Resumed:
    """The newest complete checkpoint, as :meth:`Checkpoints.load` read it.

    Attributes:
        step: The step saved: the resumed run goes on with the next one.
        epoch: The epoch of that step.
        batch: How many batches of that epoch were trained on: skip as many.
        state: What :meth:`Checkpoints.save` was given (this rank's, with
            ``every_rank=True``).
        attempt: The attempt of the job that saved it.
        path: Its folder.
    """

    step: int
    epoch: int
    batch: int
    state: dict[str, Any]
    attempt: int
    path: Path

    def restore_rng(self) -> None:
        """Put this rank's random generators back as they were at the save.

        Call it where the run that saved them was at that moment: after creating the
        epoch's DataLoader iterator (which draws its workers' seed from torch's
        generator), before the next step. The workers' own generators start afresh.

        Raises:
            FileNotFoundError: The checkpoint has no generators for this rank (saved by
                a job with fewer ranks).
        """
        import torch

        rng = torch.load(self.path / f"rng-{_rank()}.pt", weights_only=True)
        random.setstate(rng["python"])
        torch.set_rng_state(rng["torch"])
        if rng.get("cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state(rng["cuda"])  # this rank's device's


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _world() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def _agreed(path: Path | None) -> Path | None:
    """Rank 0's choice, on every rank: a file system's cached listing may differ."""
    import torch.distributed as dist

    if _world() == 1:
        return path
    box = [None if path is None else str(path)]
    dist.broadcast_object_list(box, src=0)
    return None if box[0] is None else Path(box[0])


def _fsync(path: Path, durable: bool = True) -> None:
    if not durable:
        return
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _write(path: Path, data: object, durable: bool) -> None:
    """``torch.save`` to ``path``, flushed to the disk where ``durable``."""
    import torch

    with path.open("wb") as handle:
        torch.save(data, handle)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())


def _discard(path: Path) -> None:
    """Remove a checkpoint folder: first out of sight (renamed), so never half of one."""
    hidden = path.with_name(f"{path.name}{_PARTIAL}-discarded-{os.getpid()}")
    path.rename(hidden)
    shutil.rmtree(hidden, ignore_errors=True)


def _refuse_without_group(call: str) -> None:
    import torch.distributed as dist

    from helios_pg._preempt._preemption import refuse_without_group

    if not (dist.is_available() and dist.is_initialized()):
        risk = "every rank would write or read the same files as rank 0"
        refuse_without_group(f"Checkpoints.{call}()", risk)


class Checkpoints:
    """Save and find the checkpoints of a job in one folder.

    Args:
        folder: Where the checkpoints go; made if missing. Every rank must see the same
            folder.
        keep: How many complete checkpoints to keep, the newest; older ones are removed
            after each save.
        every_rank: Each rank saves its own state (sharded optimizers, per-rank data
            state); by default rank 0 saves the state it is given.
        fsync: Flush every file and folder to the disk before the checkpoint counts as
            complete, so that it survives the node crashing too, not only the job being
            killed (which leaves what was written in the page cache). It makes a save
            of 100 MiB about twice as long as a plain ``torch.save`` on a local disk
            (``python -m tools.bench checkpoint``); False where only preemption matters.

    Raises:
        ValueError: ``keep`` is not a positive integer.

    Example::

        import tempfile

        import torch
        from helios_pg import Checkpoints

        checkpoints = Checkpoints(tempfile.mkdtemp(), keep=2)
        model = torch.nn.Linear(2, 1)
        checkpoints.save({"model": model.state_dict()}, step=10, epoch=0, batch=10)
        resumed = checkpoints.load()
        assert resumed is not None and resumed.step == 10
        model.load_state_dict(resumed.state["model"])
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        keep: int = 2,
        every_rank: bool = False,
        fsync: bool = True,
    ) -> None:
        given: object = keep
        if not isinstance(given, int) or isinstance(given, bool) or given < 1:
            message = (
                f"Checkpoints(keep={keep!r}): give how many checkpoints to keep, an "
                "integer >= 1 (2 keeps the one before the newest, should the newest be bad)"
            )
            raise ValueError(message)
        self.folder = Path(folder)
        self.keep = keep
        self.every_rank = every_rank
        self.fsync = fsync

    def complete(self) -> list[Path]:
        """The complete checkpoints, the oldest first."""
        if not self.folder.is_dir():
            return []
        found = []
        for entry in self.folder.iterdir():
            matched = _COMPLETE.match(entry.name)
            if matched and (entry / "meta.json").is_file():
                found.append((int(matched.group(1)), entry))
        return [path for _, path in sorted(found)]

    def save(self, state: Mapping[str, Any], *, step: int, epoch: int = 0, batch: int = 0) -> Path:
        """Write a checkpoint of ``step``, whole, on every rank's call.

        A collective: every rank calls it with the same numbers. Rank 0 (every rank,
        with ``every_rank=True``) writes ``state``; every rank writes its random
        generators; once all are on disk, rank 0 writes the metadata and renames the
        folder to its final name, then removes checkpoints beyond ``keep``. Wrap it
        in ``Preemption.saving()`` to time it against the launcher's grace.

        Args:
            state: What to save: ``state_dict()`` of the model, the optimizer, the
                scheduler, anything ``torch.save`` takes.
            step: The step just trained: a resumed run goes on with the next one.
            epoch: The epoch of that step.
            batch: How many batches of that epoch were trained on.

        Returns:
            The checkpoint's folder.

        Raises:
            PreemptionError: The launcher started several ranks but no process group
                exists (call ``helios_pg.init()`` first).
        """
        import torch

        from helios_env import get_dist_info

        _refuse_without_group("save")
        rank = _rank()
        name = f"step-{step:09d}"
        attempt = get_dist_info().attempt
        partial = self.folder / f"{name}{_PARTIAL}-{attempt}"
        partial.mkdir(parents=True, exist_ok=True)
        if self.every_rank or rank == 0:
            name_of_state = f"state-{rank}.pt" if self.every_rank else "state.pt"
            _write(partial / name_of_state, dict(state), self.fsync)
        # Only where CUDA is in use already: reading its generators would initialize it.
        started = bool(torch.cuda.is_initialized())  # type: ignore[no-untyped-call]
        cuda = torch.cuda.get_rng_state() if started else None  # this rank's device's
        rng = {"python": random.getstate(), "torch": torch.get_rng_state(), "cuda": cuda}
        _write(partial / f"rng-{rank}.pt", rng, self.fsync)
        _barrier()  # every rank's files are on disk
        final = self.folder / name
        if rank == 0:
            meta: dict[str, object] = {"step": step, "epoch": epoch, "batch": batch}
            meta |= {"attempt": attempt, "world_size": _world(), "every_rank": self.every_rank}
            meta["time"] = time.time()
            (partial / "meta.json").write_text(json.dumps(meta) + "\n")
            _fsync(partial / "meta.json", self.fsync)
            _fsync(partial, self.fsync)
            if final.exists():  # the same step saved again (a rerun): the new one wins
                _discard(final)
            partial.replace(final)
            _fsync(self.folder, self.fsync)
        _barrier()  # no rank goes on before the checkpoint is complete
        if rank == 0:
            self._prune()
        return final

    def _prune(self) -> None:
        """Remove complete checkpoints beyond ``keep``, and partial ones of earlier runs."""
        for old in self.complete()[: -self.keep]:
            _discard(old)
        for entry in self.folder.iterdir():
            if _PARTIAL in entry.name:
                with contextlib.suppress(OSError):
                    shutil.rmtree(entry)

    def load(
        self, *, map_location: str | None = "cpu", weights_only: bool = True
    ) -> Resumed | None:
        """The newest complete checkpoint, or None when there is none.

        Every rank reads it (its own state with ``every_rank=True``). The random
        generators are not touched: call :meth:`Resumed.restore_rng` where the saving
        run was when it saved.

        Args:
            map_location: Where tensors go, as for ``torch.load``.
            weights_only: As for ``torch.load``: True reads tensors, containers and
                numbers only (what ``state_dict()`` holds); False reads any object,
                which runs code from the file.

        Raises:
            FileNotFoundError: The checkpoint has no state for this rank.
            PreemptionError: As :meth:`save`.
        """
        import torch

        _refuse_without_group("load")
        found = self.complete()
        path = _agreed(found[-1] if found else None)
        if path is None:
            return None
        meta = json.loads((path / "meta.json").read_text())
        rank = _rank()
        name = f"state-{rank}.pt" if meta.get("every_rank") else "state.pt"
        if not (path / name).is_file():
            message = (
                f"checkpoint {path} has no {name}: it was saved by "
                f"{meta.get('world_size')} ranks with every_rank={meta.get('every_rank')}, "
                f"and this is rank {rank} of {_world()}; resume with the same ranks"
            )
            raise FileNotFoundError(message)
        state = torch.load(path / name, map_location=map_location, weights_only=weights_only)
        return Resumed(
            int(meta["step"]),
            int(meta["epoch"]),
            int(meta["batch"]),
            state,
            int(meta["attempt"]),
            path,
        )
