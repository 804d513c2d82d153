"""Worker: form the group across nodes, all-reduce, and report where this rank ran.

Started on the virtual nodes by torchrun, srun, sbatch, salloc and mpirun, in the
clean environment the launcher gives it (no ``PYTHONPATH``: it imports only torch and
helios). It calls ``helios_pg.init()`` as the launcher left the environment, sums
``rank + 1`` over every rank with an all-reduce, and prints one line, in one write:
``RESULT {json}`` with the host name, the network namespace (the node it really ran
on), the ranks and sizes, ``node_rank`` and ``num_nodes`` from
``helios_env.get_dist_info()``, and the sum. ``--plain`` forms the group with plain
``torch.distributed.init_process_group`` instead.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

import helios_pg
from helios_env import get_dist_info

TIMEOUT = timedelta(seconds=20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plain", action="store_true", help="plain torch, not helios_pg")
    parser.add_argument("--timeout", type=float, default=TIMEOUT.total_seconds())
    options = parser.parse_args()
    timeout = timedelta(seconds=options.timeout)
    if options.plain:
        dist.init_process_group("gloo", timeout=timeout)
    else:
        helios_pg.init(backend="gloo", timeout=timeout)
    try:
        info = get_dist_info()
        total = torch.tensor([float(info.rank + 1)])
        dist.all_reduce(total)
        result = {
            "hostname": socket.gethostname(),
            "net_namespace": Path("/proc/self/ns/net").stat().st_ino,
            "rank": info.rank,
            "local_rank": info.local_rank,
            "local_world_size": info.local_world_size,
            "world_size": info.world_size,
            "node_rank": info.node_rank,
            "num_nodes": info.num_nodes,
            "total": total.item(),
        }
        sys.stdout.write("RESULT " + json.dumps(result, sort_keys=True) + "\n")
        sys.stdout.flush()
    finally:
        if options.plain:
            dist.destroy_process_group()
        else:
            helios_pg.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
