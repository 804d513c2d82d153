"""Worker: one rank of three calls init late; each reports the StartupWarnings it saw
and its ``startup_moments()``.

``HELIOS_TEST_LATE_RANK`` sleeps ``HELIOS_TEST_LATE_BY`` seconds between importing
helios (and torch, which ``_timeline``'s import loads) and calling init. The threshold
is helios's own (10 s): three ranks importing torch on busy cores arrive seconds apart.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import asdict

import helios_pg
from helios_pg._setup import _timeline
from tests.support.worker import report

assert _timeline.LATE == 10.0  # the test's delay is sized for it


def main() -> None:
    rank = int(os.environ["RANK"])
    if rank == int(os.environ.get("HELIOS_TEST_LATE_RANK", "-1")):
        time.sleep(float(os.environ["HELIOS_TEST_LATE_BY"]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # Twice the test's 30 s delay: the others wait that long at the store for it.
        helios_pg.init(backend="gloo", timeout=60)
    seen = [str(w.message) for w in caught if issubclass(w.category, helios_pg.StartupWarning)]
    report(rank=rank, warnings=seen, moments=asdict(helios_pg.startup_moments()))
    helios_pg.shutdown()


if __name__ == "__main__":
    main()
