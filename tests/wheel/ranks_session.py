"""A ranks-plugin session run from helios-pg's wheel alone (tools/noxfile.py, ``wheel``).

Not collected by the suite: the noxfile copies it into an empty folder and runs pytest
there, in an environment where helios-pg and pytest come from their wheels and nothing
from this repository is importable. The plugin's behaviour is tested in tests/pg.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from helios_env import DistributedInfo


@pytest.mark.ranks(2)
def test_two_ranks_reduce(dist_info: DistributedInfo) -> None:
    value = torch.tensor([float(dist_info.rank + 1)])
    dist.all_reduce(value)
    assert value.item() == 3.0


def test_a_plain_test_beside_them() -> None:
    assert not dist.is_initialized()
