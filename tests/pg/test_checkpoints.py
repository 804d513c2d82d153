"""Checkpoints a stopped job resumes from: whole or absent, the last few kept, exact.

In this process (a world of one): the folder layout, what ``load()`` skips (a folder a
killed save left, one without its metadata), pruning, the random generators. On two
ranks of the ranks plugin: a DDP job with dropout and a shuffling ``DistributedSampler``
stopped in the middle of an epoch and resumed from its checkpoint trains on the same
batches with the same losses as a job that was never stopped.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from helios_env import DistributedInfo
from helios_pg import Checkpoints, PreemptionError


@pytest.mark.parametrize("fsync", [True, False])
def test_a_checkpoint_is_a_folder_with_its_state_generators_and_numbers(
    tmp_path: Path, fsync: bool
) -> None:
    checkpoints = Checkpoints(tmp_path / "ckpt", fsync=fsync)
    path = checkpoints.save({"weights": torch.arange(3)}, step=12, epoch=1, batch=4)
    assert path == tmp_path / "ckpt" / "step-000000012"
    assert sorted(entry.name for entry in path.iterdir()) == ["meta.json", "rng-0.pt", "state.pt"]
    meta = json.loads((path / "meta.json").read_text())
    assert {key: meta[key] for key in ("step", "epoch", "batch", "attempt", "world_size")} == {
        "step": 12,
        "epoch": 1,
        "batch": 4,
        "attempt": 0,
        "world_size": 1,
    }
    resumed = checkpoints.load()
    assert resumed is not None
    assert (resumed.step, resumed.epoch, resumed.batch, resumed.path) == (12, 1, 4, path)
    assert torch.equal(resumed.state["weights"], torch.arange(3))


def test_load_takes_the_newest_complete_one_and_save_keeps_the_last_few(tmp_path: Path) -> None:
    checkpoints = Checkpoints(tmp_path, keep=2)
    assert checkpoints.load() is None
    for step in (5, 10, 15):
        checkpoints.save({"step": step}, step=step)
    assert [path.name for path in checkpoints.complete()] == ["step-000000010", "step-000000015"]
    # What a save killed half-way leaves: a partial folder, and one without metadata.
    (tmp_path / "step-000000020.partial-0").mkdir()
    (tmp_path / "step-000000020.partial-0" / "state.pt").write_bytes(b"half")
    (tmp_path / "step-000000025").mkdir()
    resumed = checkpoints.load()
    assert resumed is not None
    assert resumed.state == {"step": 15}
    checkpoints.save({"step": 30}, step=30)  # and the next save sweeps the partial one away
    assert not (tmp_path / "step-000000020.partial-0").exists()


def test_the_generators_come_back_as_they_were_at_the_save(tmp_path: Path) -> None:
    checkpoints = Checkpoints(tmp_path)
    torch.manual_seed(1)
    random.seed(1)
    checkpoints.save({}, step=1)
    expected = (torch.rand(3), random.random())
    torch.manual_seed(2)
    random.seed(2)
    resumed = checkpoints.load()
    assert resumed is not None
    resumed.restore_rng()
    found = (torch.rand(3), random.random())
    assert torch.equal(found[0], expected[0])
    assert found[1] == expected[1]


def test_a_step_saved_again_replaces_the_first_whole(tmp_path: Path) -> None:
    checkpoints = Checkpoints(tmp_path)
    checkpoints.save({"take": 1}, step=4)
    checkpoints.save({"take": 2}, step=4)
    resumed = checkpoints.load()
    assert resumed is not None
    assert resumed.state == {"take": 2}
    assert [entry.name for entry in tmp_path.iterdir()] == ["step-000000004"]


def test_without_a_group_under_a_multi_rank_launcher_it_names_init(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    checkpoints = Checkpoints(tmp_path)
    with pytest.raises(PreemptionError, match=r"Checkpoints.save\(\) needs the process group"):
        checkpoints.save({}, step=1)
    with pytest.raises(PreemptionError, match=r"Checkpoints.load\(\) needs the process group"):
        checkpoints.load()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("keep", [0, -1, 1.5, True])
def test_a_keep_that_is_no_positive_integer_is_refused(keep: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=rf"Checkpoints\(keep={keep!r}\): give how many"):
        Checkpoints(tmp_path, keep=keep)


def test_a_rank_without_its_state_is_told_to_resume_with_the_same_ranks(tmp_path: Path) -> None:
    Checkpoints(tmp_path).save({"a": 1}, step=3)
    (tmp_path / "step-000000003" / "state.pt").rename(tmp_path / "elsewhere.pt")
    with pytest.raises(FileNotFoundError, match="resume with the same ranks"):
        Checkpoints(tmp_path).load()


STEPS_PER_EPOCH = 4
EPOCHS = 3


def train(folder: Path, rank: int, *, stop_at: int | None) -> list[float]:
    """A DDP job with dropout and a shuffling sampler; resumes from ``folder`` if it can.

    Stops after step ``stop_at`` (saving it), else runs to the end. Returns the loss of
    every step it trained, in order.
    """
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(32, 6), torch.randn(32, 1))
    layers = [torch.nn.Linear(6, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 1)]
    model = DistributedDataParallel(torch.nn.Sequential(*layers))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(data, seed=7)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    checkpoints = Checkpoints(folder)
    torch.manual_seed(100 + rank)  # a fresh process's generators: restore_rng() matters
    resumed = checkpoints.load()
    step, epoch, skip = (resumed.step, resumed.epoch, resumed.batch) if resumed else (0, 0, 0)
    if resumed is not None:
        model.module.load_state_dict(resumed.state["model"])
        optimizer.load_state_dict(resumed.state["optimizer"])
    losses = []
    while epoch < EPOCHS:
        sampler.set_epoch(epoch)
        batches = iter(loader)
        if resumed is not None:
            resumed.restore_rng()  # where the saving run was: the iterator made, then
            resumed = None
        for index, (x, y) in enumerate(batches):
            if index < skip:
                continue
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            losses.append(loss.item())
            step += 1
            if step == stop_at:
                state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}
                checkpoints.save(state, step=step, epoch=epoch, batch=index + 1)
                return losses
        skip = 0
        epoch += 1
    return losses


@pytest.mark.ranks(2)
def test_a_resumed_job_trains_as_if_it_had_never_stopped(
    dist_info: DistributedInfo, tmp_path: Path
) -> None:
    whole = train(tmp_path / "never", dist_info.rank, stop_at=None)
    assert len(whole) == EPOCHS * STEPS_PER_EPOCH
    first = train(tmp_path / "stopped", dist_info.rank, stop_at=6)  # in the second epoch
    second = train(tmp_path / "stopped", dist_info.rank, stop_at=None)
    assert len(first) == 6
    assert first + second == whole
