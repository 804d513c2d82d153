"""Worker: ``helios_pg.init()`` on a virtual node, and what its agreement check said.

Started by hand on each node (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...), in the
node's clean environment. Prints one ``RESULT`` line: the rank, its host, and either
the sum of an all-reduce or init's ``ProcessGroupInitError`` and how long init took;
with the ``AgreementWarning`` messages init gave (also printed on stderr, as Python
shows a warning).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import warnings
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

import helios_pg

TIMEOUT = 20.0


def main() -> int:
    result: dict[str, Any] = {"rank": int(os.environ["RANK"]), "host": socket.gethostname()}
    started = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            helios_pg.init(backend="gloo", timeout=timedelta(seconds=TIMEOUT))
        except helios_pg.ProcessGroupInitError as exc:
            result["error"] = str(exc)
    result["seconds"] = time.monotonic() - started
    result["warnings"] = [
        str(w.message) for w in caught if issubclass(w.category, helios_pg.AgreementWarning)
    ]
    for shown in caught:
        warnings.showwarning(shown.message, shown.category, shown.filename, shown.lineno)
    if "error" not in result:
        total = torch.ones(1)
        dist.all_reduce(total)
        result["total"] = total.item()
        helios_pg.shutdown()
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
