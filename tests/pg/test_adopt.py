"""A default group someone else made is adopted whole: checked, timed, watched, kept.

In one process: a group of one that plain torch made (as Ray Train, Lightning or
accelerate make theirs), then helios's ``init`` on it. The multi-rank promises (the
failure report, the roll call, the timeout, the layout) are checked in real torchrun
jobs: ``test_adopted_jobs.py``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore

from helios_pg import (
    AdoptionWarning,
    BackendUnavailableError,
    RendezvousConfigError,
    init,
    process_group,
    shutdown,
)
from helios_pg._reports import _reporter, _watchdog

MADE_WITH = timedelta(seconds=60)


@pytest.fixture
def made_by_torch() -> Iterator[None]:
    """A group of one made by plain torch, as another framework makes it."""
    dist.init_process_group("gloo", store=HashStore(), world_size=1, rank=0, timeout=MADE_WITH)
    try:
        yield
    finally:
        shutdown()
    assert _reporter.active() is None
    assert _watchdog._watchdog is None


def group_timeout() -> timedelta | None:
    """The default group's gloo timeout, where this torch shows it."""
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    options = getattr(backend, "options", None)
    return getattr(options, "_timeout", None)


@pytest.mark.usefixtures("made_by_torch")
@pytest.mark.parametrize(
    ("arguments", "error", "names"),
    [
        ({"timeout": -1}, RendezvousConfigError, "-1"),
        ({"hang_timeout": 0}, RendezvousConfigError, "hang_timeout"),
        ({"backend": "foo"}, BackendUnavailableError, "foo"),
        ({"backend": "mpi"}, ValueError, "mpi"),
        ({"world_size": 2}, RendezvousConfigError, "world_size=2"),
        ({"rank": 1, "world_size": 2}, RendezvousConfigError, "world_size=2"),
    ],
)
def test_the_arguments_are_checked_as_for_a_new_group(
    arguments: dict[str, Any], error: type[Exception], names: str
) -> None:
    with pytest.raises(error, match=names):
        init(**arguments)
    assert dist.is_initialized()  # the group stays as it was
    assert _reporter.active() is None


@pytest.mark.usefixtures("made_by_torch")
def test_an_adopted_group_gets_the_reporter_and_the_watchdog_once() -> None:
    init(hang_timeout=30)
    watchdog = _watchdog._watchdog
    assert _reporter.active() is not None
    assert watchdog is not None
    init(hang_timeout=30, backend="gloo", world_size=1, rank=0)  # again: nothing new
    assert _watchdog._watchdog is watchdog


SETS_TIMEOUT = hasattr(dist, "set_timeout")
"""Whether this torch can change a live gloo group's timeout (torch 2.4 cannot)."""


@pytest.mark.usefixtures("made_by_torch")
@pytest.mark.skipif(not SETS_TIMEOUT, reason="torch cannot change a live gloo group's timeout")
def test_the_timeout_is_set_on_an_adopted_group() -> None:
    if group_timeout() is None:
        pytest.skip(f"torch {torch.__version__} does not show a gloo group's timeout")
    assert group_timeout() == MADE_WITH
    init(timeout=7)
    assert group_timeout() == timedelta(seconds=7)


@pytest.mark.usefixtures("made_by_torch")
@pytest.mark.skipif(SETS_TIMEOUT, reason="this torch changes a live gloo group's timeout")
def test_a_torch_that_cannot_set_gloos_timeout_says_so() -> None:
    with pytest.warns(AdoptionWarning, match=r"timeout=7 s was not applied to gloo's"):
        init(timeout=7)


@pytest.mark.usefixtures("made_by_torch")
def test_a_timeout_torch_cannot_set_is_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    # As on a torch that cannot change a live group's timeout.
    monkeypatch.delattr(dist, "set_timeout", raising=False)
    monkeypatch.delattr(dist.distributed_c10d, "_set_pg_timeout", raising=False)
    with pytest.warns(AdoptionWarning, match=r"timeout=7 s was not applied") as said:
        init(timeout=7)
    assert said[0].filename == __file__  # the warning points at the caller of init
    assert _reporter.active() is not None  # the rest of the adoption went on


@pytest.mark.usefixtures("made_by_torch")
def test_a_timeout_torch_warns_it_kept_is_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    def kept(timeout: timedelta, group: object = None) -> None:
        # As torch does for a backend that cannot change its timeout (MPI, UCC).
        warnings.warn("Set timeout is now only supported for either nccl or gloo.", stacklevel=2)

    monkeypatch.setattr(dist, "set_timeout", kept, raising=False)
    with pytest.warns(AdoptionWarning, match=r"timeout=7 s was not applied: Set timeout"):
        init(timeout=7)


@pytest.mark.usefixtures("made_by_torch")
def test_a_block_that_adopted_the_group_leaves_it_alive() -> None:
    world = dist.group.WORLD
    with process_group(hang_timeout=30):
        assert _watchdog._watchdog is not None
    assert dist.group.WORLD is world
    assert _reporter.active() is None
    assert _watchdog._watchdog is None


@pytest.mark.usefixtures("made_by_torch")
def test_a_block_that_adopted_the_group_hands_back_the_hooks_when_it_raises() -> None:
    def train() -> None:
        with process_group():
            message = "bad batch 7"
            raise ValueError(message)  # reported now; the group's owner catches it

    hook = sys.excepthook
    with pytest.raises(ValueError, match="bad batch 7"):
        train()
    assert _reporter.active() is None
    assert sys.excepthook is hook
    assert dist.is_initialized()


def test_a_block_inside_a_group_init_made_takes_nothing_back() -> None:
    init(backend="gloo", world_size=1, rank=0, hang_timeout=30)
    try:
        watchdog = _watchdog._watchdog
        with process_group():
            pass
        assert _watchdog._watchdog is watchdog
        assert _reporter.active() is not None
    finally:
        shutdown()
