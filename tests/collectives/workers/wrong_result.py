"""Worker: the main job, with its gather_uneven check getting a wrong value on one rank.

Run under torchrun with the main job's arguments; ``HELIOS_TEST_WRONG_RANK`` names the
rank whose ``gather_uneven`` result is corrupted, as a faulty transport or backend
would. The main job must fail that check and name that rank.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import torch

from helios_collectives._main import cli, verify

Check = Callable[[int, int, torch.device], object]


def corrupted(check: Check) -> Check:
    def wrong(rank: int, n: int, device: torch.device) -> object:
        outcome = check(rank, n, device)
        assert isinstance(outcome, tuple)
        got, want = outcome
        if rank == int(os.environ["HELIOS_TEST_WRONG_RANK"]):
            got = got.clone()
            got.view(-1)[0] += 1.0
        return got, want

    return wrong


if __name__ == "__main__":
    verify.CHECKS["gather_uneven"] = corrupted(verify.CHECKS["gather_uneven"])
    sys.exit(cli.main(sys.argv[1:]))
