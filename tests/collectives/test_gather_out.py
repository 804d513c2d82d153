"""gather_into_tensor(out=...): a preallocated result, checked before anything is sent."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
import torch.distributed as dist

from helios_collectives import CollectiveArgumentError, gather_into_tensor


def test_the_result_is_gathered_into_out(world_of_one: None) -> None:
    out = torch.full((2, 3), -1.0)
    mine = torch.arange(6.0).reshape(2, 3)

    result = gather_into_tensor(mine, (2, 3), out=out)

    assert result is out
    assert torch.equal(out, mine)


@pytest.mark.parametrize(
    ("out", "named"),
    [
        (torch.empty(3, 3), "shape (3, 3) instead of (2, 3)"),
        (torch.empty(2, 3, dtype=torch.float64), "dtype torch.float64 instead of torch.float32"),
        (torch.empty(3, 2).t(), "is not contiguous"),
        ("buffer", "out must be a torch.Tensor or None"),
    ],
)
def test_a_wrong_out_is_named_before_anything_is_sent(
    world_of_one: None, monkeypatch: pytest.MonkeyPatch, out: Any, named: str
) -> None:
    def forbidden(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a collective started")

    for name in ("all_gather_single", "all_gather_into_tensor"):
        if hasattr(dist, name):
            monkeypatch.setattr(dist, name, forbidden)

    with pytest.raises(CollectiveArgumentError, match=re.escape(named)):
        gather_into_tensor(torch.ones(2, 3), (2, 3), out=out)
