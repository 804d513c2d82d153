"""Worker: the main job, with its gather_uneven check getting a wrong value on one rank.

Run under torchrun with the main job's arguments; ``HELIOS_TEST_WRONG_RANK`` names the
rank whose ``gather_uneven`` result is corrupted, as a faulty transport or backend
would. The main job must fail that check and name that rank. ``HELIOS_TEST_SLOW_REPORT``
delays rank 0's report by that many seconds: the other ranks, which fail the run, must
not exit (and have torchrun stop rank 0) before it is written.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

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


def slow(emit: Callable[..., None]) -> Callable[..., None]:
    def late(*args: Any, **kwargs: Any) -> None:
        time.sleep(float(os.environ.get("HELIOS_TEST_SLOW_REPORT", "0")))
        emit(*args, **kwargs)

    return late


if __name__ == "__main__":
    cli._emit = slow(cli._emit)
    verify.CHECKS["gather_uneven"] = corrupted(verify.CHECKS["gather_uneven"])
    sys.exit(cli.main(sys.argv[1:]))
