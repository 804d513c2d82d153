"""Driver: Ray Train's ``TorchTrainer``, two CPU workers, whose group helios adopts.

Ray makes the group (gloo, ``env://``, its own 1800 s timeout) in a thread of each
worker and catches what the training function raises; the function runs in
``helios_pg.process_group(timeout=40)``, with ``HELIOS_HANG_TIMEOUT=1``. Each worker
writes what helios saw to ``<out>/<attempt>-<rank>.json`` (``sys.argv[1]`` is
``out``). One ``fit``, restarted once by Ray (``FailureConfig(max_failures=1)``):

- the first worker group: rank 1 raises ``ValueError: bad batch 7`` while rank 0
  waits in an all-reduce, which breaks once Ray tears the group down (or Ray stops
  rank 0 first: its watchdog has said by then which rank failed first);
- the second: rank 1 stays out of the all-reduce until it answered the roll call,
  then joins it, and the run ends.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import ray
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

TIMEOUT = 40  # the group's timeout given to process_group(); Ray's own is 1800 s


def group_timeout() -> float | None:
    """The default group's gloo timeout in seconds, where this torch shows it."""
    import torch
    import torch.distributed as dist

    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    timeout = getattr(getattr(backend, "options", None), "_timeout", None)
    return None if timeout is None else float(timeout.total_seconds())


def train(config: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    from helios_env import get_dist_info, inspect_environment
    from helios_pg import process_group
    from helios_pg._reports import _reporter, _watchdog

    out = Path(config["out"])
    answer = Path(os.environ["HELIOS_HANG_DIR"]) / "rank-1.txt"
    with process_group(timeout=TIMEOUT) as info:
        total = torch.tensor([float(info.rank + 1)])
        dist.all_reduce(total)
        seen = get_dist_info()
        record = {
            "rank": seen.rank,
            "world_size": seen.world_size,
            "local_rank": seen.local_rank,
            "node_rank": seen.node_rank,
            "attempt": seen.attempt,
            "launcher": inspect_environment().launcher.value,
            "sum": total.item(),
            "timeout": group_timeout(),
            "reporter": _reporter.active() is not None,
            "watchdog": _watchdog._watchdog is not None,
        }
        (out / f"{seen.attempt}-{seen.rank}.json").write_text(json.dumps(record))
        if seen.rank == 1 and seen.attempt == 0:
            time.sleep(0.5)  # rank 0 is in the next all-reduce by now
            message = "bad batch 7"
            raise ValueError(message)
        if seen.rank == 1:
            answer.unlink(missing_ok=True)  # a roll call of the first group's
            deadline = time.monotonic() + TIMEOUT
            while not answer.exists() and time.monotonic() < deadline:
                time.sleep(0.05)  # until the roll call asked this rank
        dist.all_reduce(total)


def main() -> None:
    out = Path(sys.argv[1])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=True)
    env = {"HELIOS_HANG_DIR": str(out / "reports"), "HELIOS_HANG_TIMEOUT": "1"}
    trainer = TorchTrainer(
        train,
        train_loop_config={"out": str(out)},
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
        # Ray Train's RunConfig (ray.train.v2) takes worker_runtime_env; the stubs that
        # ray.train re-exports for type checkers are Ray AIR's, which does not.
        run_config=RunConfig(  # type: ignore[call-arg]
            name="helios",
            storage_path=str(out / "storage"),
            failure_config=FailureConfig(max_failures=1),
            worker_runtime_env={"env_vars": env},
        ),
    )
    trainer.fit()
    print("fit done", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
